"""The fast lane: cache invalidations applied as soon as a shard's binlog tail holds a change.

A micro-batch delivers a change a cycle or two after its commit (the offset log, a Spark job to
read the batch back, the commit). Cache invalidation is the use case that needs milliseconds and
the one that forgives: invalidating a key twice is harmless while an older Event Token never
replaces a newer one, which the memcached sink's CAS protocol guarantees. So the stream reader
(it lives in the driver for the whole query, beside the binlog tails: `tails`) runs one thread
per followed shard that takes each transaction as soon as the shard's tail has finished it and
applies its invalidations to every memcached sink of `fastLaneSinks` (a `MemcachedSink` made
with `ahead=True`: the same keys, the same rules, entries flagged as the fast lane's).

The rows are the tail's, converted by the converter the workers use (the key-range filter is
in it), and they go through the batch's own code (`binlog_ranges.read_shard_rows`): the snapshot
hold-back and the dedup rule's verdicts (`RowClassifier`) of the last offset the reader handed
out, which is where the next batch starts; rows with a dropped verdict (`hop`, `reverse`)
invalidate nothing. The micro-batch still applies every change afterwards, as the durable
record: the same token on the same key is a no-op, so a crash, a replay or a restart changes
nothing, and a change the fast lane could not apply (memcached away, the lane behind) is applied
by its batch as before. The memcached sink does not count finding its own change in an entry
the fast lane wrote as a duplicate delivered (`updatestream.cache.entry.FAST_LANE_FLAG`).

With `fastLaneLog` set, every lane appends one JSON line per transaction it applied (its shard,
GTID, when the tail read the transaction's commit event and when its invalidations were
written), which is how the lag benchmarks time the lane against the writer's own commit times
and split that lag into the binlog's delivery to the tail and the lane's own work.

A lane never fails the stream: an error is logged (once a minute at most) and the lane goes on
with the next transactions. A lane starts with its shard's tail, at the tail's start (the end of
the batch just planned), and stops with it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence

from updatestream.binlog.events import ChangeEvent
from updatestream.binlog.tailer import ShardTailer, TailTransaction
from updatestream.core.dedup import DROPPED_VERDICTS, DedupFilter
from updatestream.core.gtid import GTIDPosition
from updatestream.core.snapshot_plan import SnapshotRange
from updatestream.core.token import EventToken
from updatestream_jobs.sinks.memcached_sink import MemcachedSink
from updatestream_jobs.source.arrow_rows import FIELDS
from updatestream_jobs.source.binlog_ranges import ShardRange, read_shard_rows
from updatestream_jobs.source.offsets import StreamOffset
from updatestream_jobs.source.options import SourceConfig

log = logging.getLogger(__name__)

# rows a lane takes at once when it is behind (whole transactions; at least one)
STEP_ROWS = 5000
_WARN_EVERY = 60.0  # seconds between two warnings of one lane
_GTID = FIELDS.index("gtid")
# the lanes of one process append to `fastLaneLog` one at a time (a module lock: Spark pickles
# the reader, and its lanes with it, before they start)
_LOG_LOCK = threading.Lock()

Rule = tuple[DedupFilter | None, tuple[SnapshotRange, ...] | None]


class FastLane:
    """The fast lanes of one stream reader, one per followed shard (driver side)."""

    def __init__(self, config: SourceConfig, sinks: Sequence[MemcachedSink] | None = None) -> None:
        """`sinks`: for tests, the sinks every lane writes to (default: one `ahead` sink per
        spec of `fastLaneSinks` and lane)."""
        self.config = config
        self._sinks = sinks
        self._rule: Rule | None = None
        self._lanes: dict[str, _ShardLane] = {}
        self.transactions = 0  # transactions applied (for tests and logs)
        self.failures = 0

    @property
    def ruled(self) -> bool:
        return self._rule is not None

    def rule(self, offset: StreamOffset) -> None:
        """The reader handed out `offset`: the next batch starts there, with its dedup rule and
        its snapshot's hold-back."""
        dedup = offset.dedup if offset.dedup is not None and not offset.dedup.is_empty() else None
        self._rule = (dedup, offset.holdback())

    def current_rule(self) -> Rule:
        return self._rule or (None, None)

    def sinks(self) -> list[MemcachedSink]:
        if self._sinks is not None:
            return list(self._sinks)
        keyspace, specs = self.config.keyspace, self.config.fast_lane_sinks
        return [MemcachedSink(spec, keyspace=keyspace, ahead=True) for spec in specs]

    def position(self, shard: str) -> GTIDPosition | None:
        """How far the shard's lane got (applied or skipped), None without a lane."""
        lane = self._lanes.get(shard)
        return None if lane is None else lane.frontier

    def follow(self, tailer: ShardTailer) -> None:
        """A lane for the shard of a tail that just started (replacing the shard's last one)."""
        self.drop(tailer.shard)
        lane = _ShardLane(self, tailer)
        self._lanes[tailer.shard] = lane
        lane.start()

    def drop(self, shard: str) -> None:
        lane = self._lanes.pop(shard, None)
        if lane is not None:
            lane.stop()

    def stop(self) -> None:
        for shard in list(self._lanes):
            self.drop(shard)

    def record(
        self,
        events: Sequence[ChangeEvent],
        found: Sequence[TailTransaction],
        applied_at: float,
    ) -> None:
        """Append the applied transactions to `fastLaneLog` (one line each), when it is set;
        `found`: the tail's transactions they came from (when the tail read each one's end)."""
        path = self.config.fast_lane_log
        if path is None or not events:
            return
        tailed_at = {row[_GTID]: tx.finished_at for tx in found for row in tx.rows}
        seen = dict.fromkeys((e.shard, e.gtid) for e in events if e.op != "heartbeat")
        entries = (
            {"shard": shard, "gtid": gtid, "tailedAt": tailed_at.get(gtid), "appliedAt": applied_at}
            for shard, gtid in seen
        )
        lines = "".join(json.dumps(entry) + "\n" for entry in entries)
        with _LOG_LOCK, open(path, "a", encoding="utf-8") as out:
            out.write(lines)


def _text(shard: str, position: GTIDPosition) -> str:
    return EventToken(0, shard, position).dumps()


class _ShardLane:
    """One shard's lane: a thread that follows its tail's buffer."""

    def __init__(self, lane: FastLane, tailer: ShardTailer) -> None:
        self.lane = lane
        self.tailer = tailer
        self.frontier = tailer.buffer.base  # applied (or skipped) up to here
        self._stopped = threading.Event()
        self._warned = -_WARN_EVERY
        self._thread = threading.Thread(
            target=self._run, name=f"fast-lane-{tailer.shard}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        sinks: list[MemcachedSink] = []
        try:
            sinks = self.lane.sinks()
            buffer = self.tailer.buffer
            while not self._stopped.is_set():
                if buffer.wait_past(self.frontier, 1.0):
                    self._step(sinks)
                elif buffer.overflowed:  # the tail ended; a new one brings a new lane
                    return
        except Exception as exc:  # e.g. a sink that cannot be made: the batches still apply
            self._warn(exc)
        finally:
            if self.lane._sinks is None:
                for sink in sinks:
                    sink.close()

    def _step(self, sinks: list[MemcachedSink]) -> None:
        buffer = self.tailer.buffer
        end = buffer.cut_after(self.frontier, STEP_ROWS) or buffer.position
        found = buffer.transactions_between(self.frontier, end, self.lane.config.tail_buffer_rows)
        if found is None:  # committed past the frontier meanwhile: the batches applied those
            self.frontier = buffer.base
            return
        shard = self.tailer.shard
        dedup, holdback = self.lane.current_rule()
        part = ShardRange(
            shard, _text(shard, self.frontier), _text(shard, end), False,
            dedup=dedup, holdback=holdback,
        )  # fmt: skip
        rows = [row for tx in found for row in tx.rows]
        events = [
            ChangeEvent(*row)
            for row in read_shard_rows(self.lane.config, part, rows)
            if row[-1] not in DROPPED_VERDICTS
        ]
        applied = True
        for sink in sinks:
            try:
                sink.invalidate_ahead(events)
            except Exception as exc:  # the batch applies these changes; the lane goes on
                applied = False
                self.lane.failures += 1
                self._warn(exc)
        self.lane.transactions += len(found)
        if applied:
            self.lane.record(events, found, time.time())
        self.frontier = end  # last: who sees the lane there sees its writes and its log

    def _warn(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned >= _WARN_EVERY:
            self._warned = now
            log.warning(
                "fast lane of shard %s: %s: %s (its micro-batches apply these changes)",
                self.tailer.shard,
                type(exc).__name__,
                exc,
            )
