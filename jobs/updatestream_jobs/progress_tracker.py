"""Per-shard progress of a running stream: last token, events, lag; metrics and a status file.

The tracker sees every delivered event (in the driver, as the batch goes to the sinks) and
Spark's progress reports (through `ProgressListener`). Per shard it keeps the last token
delivered, the timestamp of the last change event, counts per op and the lag:

* 0 when the shard is caught up: the last batch ended with the shard's heartbeat, and the
  shard's latest position known to Spark (the source's `reportLatestOffset`) is that position;
* otherwise `now - timestamp of the last change event delivered` (or of the last heartbeat when
  no change event was delivered yet).

The status file is the job's `ProgressReport` (`updatestream.contract.progress_report`, which
documents its fields), rewritten atomically after every batch and on every change of phase.
`duplicates` counts the events the hop dedup rule classified since this process started; the
sink counts are per process too, from each sink's result; `hops` are the hops made inside the
running query, completed once the sinks wrote the batch that read the destination shards, with
`durationSeconds` counted from the serving map change (else from when the stream noticed it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from updatestream.binlog.events import SNAPSHOT_OPS, ChangeEvent
from updatestream.contract.progress_report import (
    WAITING,
    BatchReport,
    HopReport,
    ProgressReport,
    ShardReport,
    SinkReport,
    SnapshotReport,
)
from updatestream.core.dedup import DedupFilter
from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import GTIDParseError, parse_position, position_contains
from updatestream.core.shardmap import ShardMap
from updatestream.core.snapshot_plan import SnapshotState, progress_of
from updatestream.core.token import EventToken
from updatestream_jobs.batch_log import BatchLog
from updatestream_jobs.stream_metrics import DUPLICATE_CAUSES, StreamMetrics

log = logging.getLogger(__name__)

_SINK_COUNTS = ("written", "skipped", "late", "duplicatesDelivered")


@dataclass
class ShardProgress:
    shard: str
    token: str | None = None  # the last token delivered (change event or heartbeat), JSON
    position: str | None = None  # its GTID position
    last_event_timestamp: int | None = None
    heartbeat_timestamp: int | None = None
    events: int = 0  # change events, heartbeats not counted
    by_op: Counter[str] = field(default_factory=Counter)
    latest_position: str | None = None  # the shard's latest position Spark last reported
    caught_up: bool = False
    lag_seconds: float = 0.0

    def report(self) -> ShardReport:
        return ShardReport(
            token=EventToken.loads(self.token) if self.token else None,
            position=self.position,
            events=self.events,
            by_op=dict(self.by_op),
            last_event_timestamp=self.last_event_timestamp,
            heartbeat_timestamp=self.heartbeat_timestamp,
            latest_position=self.latest_position,
            lag_seconds=round(self.lag_seconds, 3),
        )


class ProgressTracker:
    def __init__(
        self,
        stream: str,
        key_range: str,
        *,
        metrics: StreamMetrics | None = None,
        status_file: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stream = stream
        self.key_range = key_range
        self.metrics = metrics
        self.status_file = status_file
        self.shards: dict[str, ShardProgress] = {}
        self.batch_id: int | None = None
        self.batches = 0
        self.phase = "starting"
        self.duplicates: Counter[str] = Counter({cause: 0 for cause in DUPLICATE_CAUSES})
        self.sinks: dict[str, Counter[str]] = {}
        self.shard_map: ShardMap | None = None
        self.hops: list[HopReport] = []
        # the dedup rule the stream applies: the one it started with, then the source's own
        # (its offsets keep it as `_dedup`, merged at each hop)
        self.dedup: DedupFilter | None = None
        self.snapshot_state: SnapshotState | None = None  # as of the last finished batch
        self.snapshot_rows = 0  # snapshot rows delivered by this process
        self._snapshot_finished_at: float | None = None
        self.last_batch: BatchReport | None = None  # the job's split of the last batch
        self._spark_phases: tuple[int, dict[str, float]] | None = None  # Spark's, last reported
        self._clock = clock
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.idle_triggers = 0  # triggers that found nothing new to read
        self.batch_log = BatchLog()  # a line in the driver's log every so many batches
        self._delivered = 0  # rows delivered (changes and snapshot rows) as of the last batch
        # while a sink's server does not answer: what the job waits for, and its phase before
        self.error: str | None = None
        self._phase_before_wait = "running"

    def _shard(self, shard: str) -> ShardProgress:
        if shard not in self.shards:
            self.shards[shard] = ShardProgress(shard)
        return self.shards[shard]

    def observe(self, events: Iterable[ChangeEvent]) -> Iterator[ChangeEvent]:
        """Pass events through, recording each (use it on the way to the first sink)."""
        for event in events:
            if event.op in SNAPSHOT_OPS:  # an existing row: no change to the shard's progress
                self.observe_existing(event.shard, event.op)
                yield event
                continue
            with self._lock:
                progress = self._shard(event.shard)
                progress.token = event.token
                progress.position = event.gtid
                progress.by_op[event.op] += 1
                if event.op == "heartbeat":
                    progress.heartbeat_timestamp = event.timestamp
                    progress.caught_up = True
                else:
                    progress.events += 1
                    progress.last_event_timestamp = event.timestamp
                    progress.caught_up = False
            if self.metrics is not None:
                self.metrics.events.labels(self.stream, event.shard, event.op).inc()
            yield event

    def observe_existing(self, shard: str, op: str, rows: int = 1) -> None:
        """`rows` existing rows of `shard` (a snapshot's) delivered: counted, no progress."""
        with self._lock:
            self._shard(shard).by_op[op] += rows
            self.snapshot_rows += rows
        if self.metrics is not None:
            self.metrics.events.labels(self.stream, shard, op).inc(rows)
            self.metrics.snapshot_rows.labels(self.stream).inc(rows)

    def hop_announced(self, hop: dict[str, Any]) -> None:
        """A hop the source made (its marker row); a replayed hop batch announces it again."""
        with self._lock:
            announced = HopReport.model_validate(
                {**hop, "completedAt": None, "durationSeconds": None, "duplicatesDropped": 0}
            )
            if any(h.number == announced.number for h in self.hops):
                return
            self.hops.append(announced)
            self.shard_map = announced.to_map
            self.phase = "hopping"
            if hop.get("dedup"):  # a marker that carries the hop's rule
                self.dedup = DedupFilter.from_json(hop["dedup"])

    def observe_idle(self) -> None:
        """The query read the shards' positions and found nothing new: it runs, caught up."""
        with self._lock:
            self.idle_triggers += 1
        self.write_status()

    def observe_dedup(self, dedup: DedupFilter) -> None:
        """The dedup rule the source applies as of the batch that just finished."""
        with self._lock:
            changed = self.dedup is None or self.dedup.to_json() != dedup.to_json()
            self.dedup = dedup
        if changed:
            self.write_status()

    def complete_hops(self, duplicates_dropped: int) -> list[HopReport]:
        """The hops announced in the batch the sinks just wrote are done; returns them."""
        now = self._clock()
        done = []
        with self._lock:
            for hop in self.hops:
                if hop.completed_at is not None:
                    continue
                began = hop.serving_changed_at or hop.detected_at or now
                hop.completed_at = now
                hop.duration_seconds = round(max(0.0, now - float(began)), 3)
                hop.duplicates_dropped = duplicates_dropped
                done.append(hop)
            if done and self.phase == "hopping":
                self.phase = "running"
        for hop in done:
            if self.metrics is not None:
                self.metrics.hops.labels(self.stream).inc()
                self.metrics.hop_duration.labels(self.stream).observe(hop.duration_seconds or 0.0)
                self.metrics.set_phase(self.key_range, "running")
        return done

    def count_duplicate(self, cause: str, events: int = 1) -> None:
        """`events` classified by the dedup rule (`hop`, `reverse`: dropped; `unknown`,
        `straddle`: delivered)."""
        with self._lock:
            self.duplicates[cause] += events
        if self.metrics is not None:
            self.metrics.duplicates.labels(self.stream, cause).inc(events)

    def sink_result(self, sink: str, result: Any) -> None:
        """Add up what a sink reported for a batch (`SinkResult`, or None from a sink that
        reports nothing), delivered duplicates included."""
        delivered = int(getattr(result, "duplicates_delivered", 0) or 0)
        with self._lock:
            counts = self.sinks.setdefault(sink, Counter())
            if result is not None:
                counts["written"] += int(getattr(result, "written", 0) or 0)
                counts["skipped"] += int(getattr(result, "skipped", 0) or 0)
                counts["late"] += int(getattr(result, "late", 0) or 0)
            counts["duplicatesDelivered"] += delivered
        if self.metrics is not None and delivered:
            self.metrics.duplicates_delivered.labels(self.stream, sink).inc(delivered)

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase
        if self.metrics is not None:
            self.metrics.set_phase(self.key_range, phase)
        self.write_status()

    def wait_for_sink(self, message: str) -> None:
        """A sink's server does not answer: phase `waiting`, `message` as the report's error."""
        with self._lock:
            if self.phase != WAITING:
                self._phase_before_wait = self.phase
            self.error = message
        if self.phase != WAITING:
            log.warning("%s", message)
        self.set_phase(WAITING)

    def sinks_answer(self) -> None:
        """Every sink took the batch again: the phase before the wait, no error."""
        if self.phase != WAITING:
            return
        log.warning("every sink took the batch again; the wait is over (it was: %s)", self.error)
        with self._lock:
            self.error = None
        self.set_phase(self._phase_before_wait)

    def batch_timings(
        self, batch_id: int, read_s: float, sinks_s: dict[str, float], total_s: float
    ) -> None:
        """Where the batch function's time went (the job measures it), for `lastBatch`."""
        with self._lock:
            spark_id, spark = self._spark_phases or (None, {})
            self.last_batch = BatchReport(
                batch_id=batch_id,
                read_seconds=round(read_s, 4),
                sink_seconds={name: round(s, 4) for name, s in sinks_s.items()},
                total_seconds=round(total_s, 4),
                spark_batch_id=spark_id,
                spark_seconds=dict(spark),
            )

    def observe_spark_phases(self, batch_id: int, duration_ms: dict[str, Any]) -> None:
        """Spark's split of a finished micro-batch (its progress event's `durationMs`)."""
        seconds = {k: round(float(v) / 1000, 4) for k, v in sorted(duration_ms.items())}
        with self._lock:
            self._spark_phases = (batch_id, seconds)
            if self.last_batch is not None and self.last_batch.batch_id == batch_id:
                self.last_batch.spark_batch_id = batch_id
                self.last_batch.spark_seconds = seconds

    def finish_batch(self, batch_id: int) -> None:
        with self._lock:
            self.batch_id = batch_id
            self.batches += 1
            self._update_lag()
            delivered = self.snapshot_rows + sum(p.events for p in self.shards.values())
            rows, self._delivered = delivered - self._delivered, delivered
            lag = max((p.lag_seconds for p in self.shards.values()), default=0.0)
            seconds = self.last_batch.total_seconds if self.last_batch is not None else 0.0
        self.batch_log.add(batch_id, rows, lag, seconds)
        self.write_status()

    def observe_latest(self, latest: dict[str, Any], shard_map: str | None = None) -> None:
        """Spark's view of each shard's latest position (an offset: shard -> token JSON; keys
        starting with `_` are the source's hop state) and the shard map it reads."""
        with self._lock:
            if shard_map:
                self.shard_map = ShardMap.parse(shard_map)
            for shard, token in latest.items():
                if shard.startswith("_"):
                    continue
                progress = self._shard(shard)
                progress.latest_position = str(EventToken.from_json(token).position)
            self._update_lag()
        self.write_status()

    def observe_snapshot(self, state: SnapshotState) -> None:
        """The snapshot's progress as of the batch that just finished (its end offset)."""
        with self._lock:
            self.snapshot_state = state
        if self.metrics is not None:
            progress = progress_of(state, self._clock())
            remaining = max(0, progress.chunks_total - progress.chunks_done)
            self.metrics.snapshot_remaining.labels(self.stream).set(remaining)

    def snapshot_report(self) -> SnapshotReport | None:
        """The snapshot's progress as the status report shows it; None when it has none."""
        if self.snapshot_state is None:
            return None
        if self._snapshot_finished_at is None and self.snapshot_state.finished:
            self._snapshot_finished_at = self._clock()
        progress = progress_of(self.snapshot_state, self._snapshot_finished_at or self._clock())
        rate = self.snapshot_rows / progress.elapsed if progress.elapsed > 0 else 0.0
        eta = progress.eta_seconds
        return SnapshotReport(
            chunks_done=progress.chunks_done,
            chunks_total=progress.chunks_total,
            ranges_done=progress.ranges_done,
            ranges_total=progress.ranges_total,
            rows=self.snapshot_rows,
            rows_per_second=round(rate, 1),
            eta_seconds=None if eta is None else round(eta, 1),
            elapsed_seconds=round(progress.elapsed, 1),
            finished=progress.finished,
        )

    def _update_lag(self) -> None:
        now = self._clock()
        for progress in self.shards.values():
            behind = progress.latest_position is not None and not _reached(
                progress.position, progress.latest_position
            )
            if progress.caught_up and not behind:
                progress.lag_seconds = 0.0
            else:
                since = progress.last_event_timestamp or progress.heartbeat_timestamp
                progress.lag_seconds = max(0.0, now - since) if since else 0.0
            if self.metrics is not None:
                self.metrics.lag.labels(self.stream, progress.shard).set(progress.lag_seconds)

    def snapshot(self) -> ProgressReport:
        with self._lock:
            return ProgressReport(
                stream=self.stream,
                key_range=self.key_range,
                batch_id=self.batch_id,
                batches=self.batches,
                idle_triggers=self.idle_triggers,
                updated_at=self._clock(),
                phase=self.phase,
                error=self.error,
                retryable=True if self.error else None,
                shard_map=self.shard_map,
                hops=[hop.model_copy() for hop in self.hops],
                dedup=self.dedup,
                duplicates=dict(sorted(self.duplicates.items())),
                sinks={
                    name: SinkReport.model_validate({k: counts[k] for k in _SINK_COUNTS})
                    for name, counts in sorted(self.sinks.items())
                },
                shards={s: p.report() for s, p in sorted(self.shards.items())},
                snapshot=self.snapshot_report(),
                last_batch=None if self.last_batch is None else self.last_batch.model_copy(),
            )

    def write_status(self) -> None:
        if self.status_file is None:
            return
        try:
            with self._write_lock:  # reports leave in the order they were taken
                self.snapshot().write(self.status_file)
        except OSError as exc:  # progress reporting must not stop the stream
            log.warning("cannot write the status file %s: %s", self.status_file, exc)


def _reached(position: str | None, latest: str) -> bool:
    """True when the delivered `position` includes every transaction of `latest`."""
    if position is None:
        return False
    try:
        return position_contains(parse_position(position), parse_position(latest))
    except GTIDParseError:
        return position == latest


class ProgressListener(StreamingQueryListener):
    """Feeds Spark's per-trigger progress (the source's latest offset) to the tracker."""

    def __init__(self, tracker: ProgressTracker, query_name: str) -> None:
        self.tracker = tracker
        self.query_name = query_name
        self.query_id: str | None = None  # idle events name the query by id only

    def onQueryStarted(self, event: Any) -> None:
        if getattr(event, "name", None) == self.query_name:
            self.query_id = str(event.id)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if progress.name != self.query_name:
            return
        durations = getattr(progress, "durationMs", None)
        if durations:
            self.tracker.observe_spark_phases(progress.batchId, dict(durations))
        for source in progress.sources:
            latest = getattr(source, "latestOffset", None)
            latest = None if latest in ("None", "null") else latest  # Spark had none: str(null)
            end = getattr(source, "endOffset", None)
            try:
                ended = json.loads(end) if end else {}
                shard_map = ended.get("_map")
                if ended.get("_dedup"):
                    self.tracker.observe_dedup(DedupFilter.from_json(ended["_dedup"]))
                if ended.get("_snapshot"):
                    self.tracker.observe_snapshot(SnapshotState.from_json(ended["_snapshot"]))
                if latest:
                    self.tracker.observe_latest(json.loads(latest), shard_map)
                elif ended.get("_behind") is not None:  # `prefetchHeld`: no latest offset
                    self.tracker.observe_latest({**ended, **ended["_behind"]}, shard_map)
            except (ValueError, TypeError, AttributeError, UpdateStreamError) as exc:
                log.warning("cannot read the source's latest offset: %s", exc)

    def onQueryIdle(self, event: Any) -> None:
        """A trigger found nothing new to read (Spark says so at most every 10 s)."""
        if self.query_id is not None and str(getattr(event, "id", "")) == self.query_id:
            self.tracker.observe_idle()

    def onQueryTerminated(self, event: Any) -> None:
        return None
