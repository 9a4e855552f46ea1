"""The stream reader's binlog tails: one `ShardTailer` per shard read, in the driver.

Without tails, every micro-batch asks each shard for its position and the workers open a binlog
dump per shard from the batch's start (MariaDB finds a GTID start by scanning the binlog file
from its beginning). With them (`tail=true`, the default; `tail=false` turns them off), one
connection per shard lives across batches and the driver keeps the shard's recent, uncommitted
rows:

* `idle`: a tail at the last offset's position tells, without a query, that a shard has nothing
  new (until the heartbeat interval asks for a fresh token anyway);
* `rows`: the rows of a batch's range `(start, end]` when the tail holds exactly that range and
  it is small (`inlineMaxRows`); the batch's held-rows partition carries them and the worker
  only filters them and adds the heartbeat (`binlog_ranges.read_shard_rows`);
* `cut`: admission control, an earlier end for a shard whose tail holds more than `maxBatchRows`
  rows after the start;
* `follow`: after each planned batch, a tail for every shard the batch ends on, from the batch's
  end when the shard has no working tail (a new shard, an overflow, a failure, a moved shard);
  tails of shards the stream no longer reads stop;
* `commit`: rows the stream committed are dropped.

With a `FastLane` (memcached sinks with `fastLane` on), every tail that starts gets a lane that
applies its transactions' invalidations as soon as the tail holds them (`fast_lane`).

A tail is an optimisation only: any range it does not hold exactly is read by the workers as
before, and the rows it hands over are produced by the same converter from the same binlog, so a
replay after a restart (no tails yet) reads the same events.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable, Mapping

from updatestream.binlog.config import ShardEndpoint
from updatestream.binlog.row_converter import EventRow
from updatestream.binlog.tailer import ShardTailer
from updatestream.core.gtid import GTIDPosition, ordinal, position_contains
from updatestream.core.token import EventToken
from updatestream_jobs.source.arrow_rows import FIELDS
from updatestream_jobs.source.fast_lane import FastLane
from updatestream_jobs.source.options import SourceConfig

log = logging.getLogger(__name__)
_heap_frozen = False

_KSID = FIELDS.index("keyspace_id")

# A followed shard whose server sent nothing, not even a heartbeat, for this long is asked
# for its position again, whatever its tail says.
_SILENCE = 3.0
# A tail more than this many transactions behind its shard's head hands over what it holds.
BEHIND = 1000
# A shard whose tail failed (not overflowed) gets a new one this much later at the earliest.
_RETRY_AFTER = 10.0


class Tails:
    """The tails of one stream reader (driver side)."""

    def __init__(
        self,
        config: SourceConfig,
        endpoint: Callable[[str], ShardEndpoint],
        fast_lane: FastLane | None = None,
    ) -> None:
        self.config = config
        self._endpoint = endpoint
        self.fast_lane = fast_lane
        self.tailers: dict[str, ShardTailer] = {}
        self._failed: dict[str, float] = {}  # shard -> when its last tail failed (monotonic)
        self._clock: dict[str, tuple[float, int]] = {}  # shard -> (monotonic, server seconds)
        self.inlined = 0  # ranges handed over from a tail (for tests and logs)
        self.read_by_workers = 0

    def _live(self, shard: str) -> ShardTailer | None:
        tailer = self.tailers.get(shard)
        return tailer if tailer is not None and tailer.alive else None

    def asked(self, shard: str, server_now: int) -> None:
        """The shard was asked for its position; its clock said `server_now`."""
        self._clock[shard] = (time.monotonic(), server_now)

    def idle(self, shard: str, previous: EventToken) -> bool:
        """True when the shard's tail stands at `previous` and the heartbeat interval since
        `previous` has not passed by the shard's clock (as last asked): nothing to read."""
        tailer = self._live(shard)
        clock = self._clock.get(shard)
        if tailer is None or clock is None or tailer.buffer.position != previous.position:
            return False
        if tailer.silent_for() > _SILENCE:  # no heartbeat either: do not trust the tail
            return False
        server_now = clock[1] + (time.monotonic() - clock[0])
        return server_now - previous.timestamp < self.config.heartbeat_interval

    def latest(self, shards: list[str]) -> dict[str, EventToken] | None:
        """Every shard's tail position with the shard's clock as estimated from its last
        query, when every shard of `shards` is followed and was asked once; else None."""
        out = {}
        for shard in shards:
            tailer, clock = self._live(shard), self._clock.get(shard)
            if tailer is None or clock is None:
                return None
            now = int(clock[1] + (time.monotonic() - clock[0]))
            out[shard] = EventToken(now, shard, tailer.buffer.position)
        return out or None

    def cut(self, shard: str, start: EventToken) -> EventToken | None:
        """An end for the shard that keeps the batch within `maxBatchRows` rows and within
        `inlineMaxBytes` of them, so that the tail can hand the range over and no worker reads
        it from the binlog again (the start's timestamp: nothing is promised past the start's
        time), or None."""
        limit = self.config.max_batch_rows
        tailer = self._live(shard)
        if limit <= 0 or tailer is None:
            return None
        position = tailer.buffer.cut_after(start.position, limit, self.config.inline_max_bytes)
        return None if position is None else EventToken(start.timestamp, shard, position)

    def reaches(self, shard: str, start: EventToken, end: EventToken) -> bool:
        """True when the shard's tail holds `start` and has read up to `end`: the range is the
        tail's, and `cut` bounds it."""
        tailer = self._live(shard)
        if tailer is None or not tailer.buffer.holds(start.position):
            return False
        return position_contains(tailer.buffer.position, end.position)

    def held_end(self, shard: str, start: EventToken, head: EventToken) -> EventToken | None:
        """Where the shard's tail stands (with the start's timestamp) when it holds `start` and
        is more than `BEHIND` transactions behind the shard's `head`: a tail that fell behind
        hands over what it has read, and no worker reads that range from the binlog a second
        time. None otherwise (a tail a moment behind is waited for, as before)."""
        tailer = self._live(shard)
        if tailer is None or not tailer.buffer.holds(start.position):
            return None
        position = tailer.buffer.position
        if (
            position == start.position
            or ordinal(str(head.position)) - ordinal(str(position)) <= BEHIND
        ):
            return None
        return EventToken(start.timestamp, shard, position)

    def rows(self, shard: str, start: EventToken, end: EventToken) -> list[EventRow] | None:
        """The rows of `(start, end]` from the shard's tail (waiting up to `tailWaitMs` for it
        to get there), or None when the workers must read the range."""
        tailer = self._live(shard)
        if tailer is None:
            self.read_by_workers += 1
            return None
        buffer = tailer.buffer
        rows = None
        limit = self.config.inline_max_rows
        if buffer.holds(start.position):
            ahead = buffer.rows_after(start.position)
            if ahead is not None and ahead <= limit:  # the range may fit: wait for its end
                buffer.wait_for(end.position, self.config.tail_wait_ms / 1000)
            rows = buffer.rows_between(
                start.position, end.position, limit, self.config.inline_max_bytes
            )
        if rows is None:
            self.read_by_workers += 1
        else:
            self.inlined += 1
        return rows

    def read_between(
        self, shard: str, start: GTIDPosition, end: GTIDPosition
    ) -> list[tuple[GTIDPosition, tuple[str, ...]]] | None:
        """The transactions `(start, end]` the shard's tail holds: the position after each and
        its rows' keyspace ids (what `RecentTransactions` records); None when it does not hold
        the range exactly."""
        tailer = self._live(shard)
        if tailer is None:
            return None
        tailer.buffer.wait_for(end, self.config.tail_wait_ms / 1000)
        found = tailer.buffer.transactions_between(start, end, self.config.tail_buffer_rows)
        if found is None:
            return None
        return [(tx.position, tuple(row[_KSID] or "" for row in tx.rows)) for tx in found]

    def follow(self, ends: Mapping[str, EventToken], *, skip_ahead: bool = True) -> None:
        """Tails for exactly the shards of `ends`; a shard without a working tail (or whose
        endpoint moved) gets a new one from its end token. With `skip_ahead`, so does a shard
        whose tail is behind its end: the workers read that range, and the tail would only
        read it again (while a snapshot reads, every batch ends at the shard's head, and a tail
        a moment behind it is left to catch up)."""
        for shard in list(self.tailers):
            if shard not in ends:
                self._stop(shard)
        for shard, token in ends.items():
            try:
                endpoint = self._endpoint(shard)
            except Exception:  # a shard the stream knows no endpoint of: the workers read it
                continue
            tailer = self.tailers.get(shard)
            if tailer is not None and tailer.alive and tailer.endpoint == endpoint:
                if not skip_ahead or position_contains(tailer.buffer.position, token.position):
                    continue
                log.info(
                    "binlog tail of shard %s is behind the batch's end: following it from there",
                    shard,
                )
            if tailer is not None:
                if tailer.error is not None:
                    self._failed[shard] = time.monotonic()
                self._stop(shard)
            if time.monotonic() - self._failed.get(shard, -_RETRY_AFTER) < _RETRY_AFTER:
                continue
            self._start(endpoint, token.position)

    def _start(self, endpoint: ShardEndpoint, position: GTIDPosition) -> None:
        config = self.config
        freeze_startup_heap()
        sys.setswitchinterval(config.switch_interval_ms / 1000)
        try:
            tailer = ShardTailer(
                endpoint,
                config.reader,
                position,
                max_rows=config.tail_buffer_rows,
                max_bytes=config.tail_buffer_bytes,
            ).start()
            self.tailers[endpoint.shard] = tailer
            if self.fast_lane is not None:
                self.fast_lane.follow(tailer)
        except Exception as exc:  # e.g. an unknown table in the VSchema: the workers will say
            self._failed[endpoint.shard] = time.monotonic()
            log.warning("cannot follow shard %s: %s", endpoint.shard, exc)

    def _stop(self, shard: str) -> None:
        if self.fast_lane is not None:
            self.fast_lane.drop(shard)
        tailer = self.tailers.pop(shard, None)
        if tailer is not None:
            tailer.stop()

    def commit(self, tokens: Mapping[str, EventToken]) -> None:
        for shard, token in tokens.items():
            tailer = self.tailers.get(shard)
            if tailer is not None:
                tailer.buffer.trim(token.position)

    def stop(self) -> None:
        for shard in list(self.tailers):
            self._stop(shard)


def freeze_startup_heap() -> None:
    """Before the first tail of the process starts: collect once, then leave every object alive
    now (modules, Spark's and Arrow's, the reader's own) out of later collections (`gc.freeze`).

    A full collection holds the GIL while it scans every tracked object, and the tails' threads
    wait for it: with the startup heap scanned each time (about 80,000 objects), one took 25 to
    90 ms of CPU, the longest gap between a commit and its tail's read. Once per process.
    """
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.collect()
        gc.freeze()
