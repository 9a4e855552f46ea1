"""One micro-batch from Spark to every sink: what sinks receive, and in which order they write.

Sinks receive the batch's change events in stream order without the hop markers (recorded as
hops) and without the hop duplicates (counted by cause); events delivered although undecidable
(`unknown`, `straddle`) are counted too, once per batch however many sinks there are.

A batch of at most `single_pass_events` events (the usual micro-batch) is read from Spark once,
in one Spark job (a `collect` under a limit of one event more), held in the driver, and written
to every sink at the same time, one thread per sink: a sink waits for its own server (a commit,
a round trip), not for the sinks before it, so each sink's write starts as soon as the batch is
read. A larger batch streams to each sink in turn, from the persisted batch when there are
several, so a huge transaction is never held whole. Each sink is idempotent per batch
and per event, so neither the order nor a failure of another sink changes what it holds: when
a sink fails the batch fails once every sink has returned, and Spark runs it again. A sink whose
server does not answer gets the same events again, as a replay, until it takes them
(`SinkRetry`): the other sinks' writes are not repeated.

A sink that writes from the executors (`sinks.executor_tasks`; the mirror or memcached with
`writeFrom: executors`) is not given events: the batch is persisted, the sink's Spark job writes
every partition in its own task while the driver writes the other sinks (and records the batch's
progress), and the batch ends when both have."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, cast

from updatestream.binlog.events import HOP_MARKER, SNAPSHOT_OPS, ChangeEvent
from updatestream.core.dedup import DROPPED_VERDICTS
from updatestream_jobs.progress_tracker import ProgressTracker
from updatestream_jobs.sink_retry import SinkRetry
from updatestream_jobs.sinks import BatchContext, Sink, SinkResult
from updatestream_jobs.sinks.executor_tasks import ExecutorWritten, writes_from_executors

# With several sinks, a micro-batch of at most this many events is read from Spark once and
# kept in the driver for every sink (each Spark pass over a batch costs a fixed ~0.1 s, and the
# sinks write it at the same time); a larger one is read once per sink from the persisted batch,
# the sinks in turn. A batch of two shards' `maxBatchRows` (20,000 each) fits; an event held
# costs about 1 KB of the driver's memory (its text fields; the sample keyspace's rows).
SINGLE_PASS_EVENTS = 50_000


@dataclass
class BatchPhases:
    """Where one micro-batch's time went in the driver (seconds, from `time.perf_counter`).

    `read_s`: reading the batch back from Spark before the first sink (runs the batch's Spark
    job, the source's read included); for a batch too large to hold, only finding that out.
    `sinks_s`: each sink's `write_batch`, in the sinks' order (a batch too large to hold is read
    in it); a held batch's sinks write at the same time when there are several.
    `finish_s`: hop bookkeeping and the progress report after the sinks. `total_s`: the whole
    batch function. `started_at`: unix seconds at its start.
    """

    batch_id: int
    started_at: float
    read_s: float = 0.0
    sinks_s: dict[str, float] = field(default_factory=dict)
    finish_s: float = 0.0
    total_s: float = 0.0
    concurrent: bool = False  # several sinks wrote a held batch at the same time


class BatchDelivery:
    """Writes micro-batches to the job's sinks, reporting to its progress tracker."""

    def __init__(
        self, sinks: list[Sink], tracker: ProgressTracker, retry: SinkRetry | None = None
    ) -> None:
        self.sinks = sinks
        self.tracker = tracker
        self.retry = retry
        self.single_pass_events = SINGLE_PASS_EVENTS
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def deduplicated(
        self, events: Iterator[ChangeEvent], *, count: bool = True
    ) -> Iterator[ChangeEvent]:
        """What sinks receive: no hop markers (recorded as hops) and no hop duplicates; `count`
        duplicates and undecidable events, and record hops, on one pass only."""
        for event in events:
            if event.op == HOP_MARKER:
                if count and event.after:
                    self.tracker.hop_announced(json.loads(event.after))
                continue
            if event.dedup in DROPPED_VERDICTS:  # a copy delivered already, or read later
                if count:
                    self.tracker.count_duplicate(event.dedup)
                continue
            if event.dedup is not None and count:  # delivered, counted: "unknown", "straddle"
                self.tracker.count_duplicate(event.dedup)
            yield event

    def _write(
        self,
        sink: Sink,
        events: Callable[[bool], Iterator[ChangeEvent]],
        ctx: BatchContext,
    ) -> SinkResult:
        """`sink.write_batch` of `events(again)`; an attempt after a failed one is a replay."""

        def attempt(again: bool) -> SinkResult:
            return sink.write_batch(events(again), replace(ctx, replay=True) if again else ctx)

        return self._attempts(sink, attempt, ctx)

    def _attempts(
        self, sink: Sink, attempt: Callable[[bool], SinkResult], ctx: BatchContext
    ) -> SinkResult:
        if self.retry is None:
            return attempt(False)
        index = self.sinks.index(sink)
        return self.retry.write(
            attempt, index=index, batch_id=ctx.batch_id, waiting=self.tracker.wait_for_sink
        )

    def deliver(self, frame: Any, ctx: BatchContext, phases: BatchPhases) -> None:
        """Read the batch `frame` and write it to every sink (see the module docstring)."""
        remote = [sink for sink in self.sinks if writes_from_executors(sink)]
        if not remote:
            self._in_driver(frame, self.sinks, ctx, phases, persisted=False)
            return
        local = [sink for sink in self.sinks if sink not in remote]
        pool = self._threads()
        frame.persist()
        try:
            futures = [pool.submit(self._from_executors, sink, frame, ctx) for sink in remote]
            failure: BaseException | None = None
            try:
                self._in_driver(frame, local, ctx, phases, persisted=True)
            except BaseException as exc:  # the tasks' writes end first
                failure = exc
            failure = self._results(remote, futures, phases, failure)
            if failure is not None:
                raise failure
        finally:
            frame.unpersist()

    def _from_executors(
        self, sink: Sink, frame: Any, ctx: BatchContext
    ) -> tuple[SinkResult, float]:
        began = time.perf_counter()

        def attempt(again: bool) -> SinkResult:
            return cast(ExecutorWritten, sink).write_frame(
                frame, replace(ctx, replay=True) if again else ctx
            )

        return self._attempts(sink, attempt, ctx), time.perf_counter() - began

    def _in_driver(
        self,
        frame: Any,
        sinks: list[Sink],
        ctx: BatchContext,
        phases: BatchPhases,
        *,
        persisted: bool,
    ) -> None:
        """Write the batch to the sinks that take it in the driver (the batch's progress is
        recorded here, on the first pass, even with none)."""
        began = time.perf_counter()
        if not sinks:  # the progress only: no row's images come to the driver
            self._progress_only(frame)
            phases.read_s = time.perf_counter() - began
            return
        head = _head(frame, self.single_pass_events)
        if len(head) <= self.single_pass_events:  # the usual batch: held, one Spark job
            events = (ChangeEvent.from_row(row.asDict()) for row in head)
            held = list(self.tracker.observe(self.deduplicated(events)))
            phases.read_s = time.perf_counter() - began
            self._write_held(sinks, held, ctx, phases)
            return
        del head  # too large to hold: each sink reads it (from the persisted batch if several)
        phases.read_s = time.perf_counter() - began
        if len(sinks) == 1 or persisted:
            self._in_turn(sinks, frame, ctx, phases)
            return
        frame.persist()
        try:
            self._in_turn(sinks, frame, ctx, phases)
        finally:
            frame.unpersist()

    def _progress_only(self, frame: Any) -> None:
        """Record the batch's progress from `progress_rows`: its changes one by one, in stream
        order, and its existing rows as counts."""

        def changes() -> Iterator[ChangeEvent]:
            for row in progress_rows(frame).toLocalIterator(prefetchPartitions=True):
                fields = row.asDict()
                rows = fields.pop(COUNTED)
                event = ChangeEvent.from_row(fields)
                if event.op not in SNAPSHOT_OPS:
                    yield event
                    continue
                if event.dedup is not None:  # as `deduplicated` counts them
                    self.tracker.count_duplicate(event.dedup, rows)
                if event.dedup not in DROPPED_VERDICTS:
                    self.tracker.observe_existing(event.shard, event.op, rows)

        for _ in self.tracker.observe(self.deduplicated(changes())):
            pass

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:  # a thread for every sink: each may wait at the same time
            self._pool = ThreadPoolExecutor(len(self.sinks), thread_name_prefix="sink")
        return self._pool

    def _results(
        self,
        sinks: list[Sink],
        futures: list[Future[tuple[SinkResult, float]]],
        phases: BatchPhases,
        failure: BaseException | None = None,
    ) -> BaseException | None:
        """Every sink's result recorded once all returned; the first failure, if any."""
        for sink, future in zip(sinks, futures, strict=True):
            try:
                result, seconds = future.result()
            except BaseException as exc:  # every sink returns first; the first failure wins
                failure = failure or exc
                continue
            self.tracker.sink_result(sink.name, result)
            phases.sinks_s[sink.name] = seconds
        return failure

    def _write_held(
        self, sinks: list[Sink], held: list[ChangeEvent], ctx: BatchContext, phases: BatchPhases
    ) -> None:
        def write(sink: Sink) -> tuple[SinkResult, float]:
            began = time.perf_counter()
            result = self._write(sink, lambda _again: iter(held), ctx)
            return result, time.perf_counter() - began

        if len(sinks) == 1:  # in this thread
            result, phases.sinks_s[sinks[0].name] = write(sinks[0])
            self.tracker.sink_result(sinks[0].name, result)
            return
        pool = self._threads()
        phases.concurrent = True
        futures = [pool.submit(write, sink) for sink in sinks]
        failure = self._results(sinks, futures, phases)
        if failure is not None:
            raise failure

    def _in_turn(
        self, sinks: list[Sink], frame: Any, ctx: BatchContext, phases: BatchPhases
    ) -> None:
        for index, sink in enumerate(sinks):
            began = time.perf_counter()

            def events(again: bool, index: int = index) -> Iterator[ChangeEvent]:
                if index == 0 and not again:  # counted on the first sink's first pass only
                    return self.tracker.observe(self.deduplicated(_events(frame)))
                return self.deduplicated(_events(frame), count=False)

            self.tracker.sink_result(sink.name, self._write(sink, events, ctx))
            phases.sinks_s[sink.name] = time.perf_counter() - began


# What the progress and the hop bookkeeping read of an event (`ProgressTracker.observe`,
# `BatchDelivery.deduplicated`): every column, but the row images and the key only where a hop
# marker carries its hop in `after`.
_PROGRESS_COLUMNS = (
    "keyspace", "shard", "op", "`table`", "CAST(NULL AS STRING) AS pk", "keyspace_id",
    "CAST(NULL AS STRING) AS before", f"IF(op = '{HOP_MARKER}', after, NULL) AS after",
    "token", "timestamp", "gtid", "tx_index", "source_shard", "source_gtid", "source_timestamp",
    "dedup",
)  # fmt: skip


def progress_columns(frame: Any) -> Any:
    """The batch `frame` without what its progress and hop bookkeeping do not read."""
    return frame.selectExpr(*_PROGRESS_COLUMNS)


COUNTED = "counted"  # `progress_rows`: how many events a row stands for
_EXISTING = "op IN ({})".format(", ".join(f"'{op}'" for op in sorted(SNAPSHOT_OPS)))


def progress_rows(frame: Any) -> Any:
    """What the driver reads of the batch `frame` when every sink writes from the executors:
    its changes as `progress_columns`, in order, each `counted` 1, then its existing rows (a
    snapshot's: they count, but move no shard's progress) as one row per shard, op and dedup
    verdict, `counted` how many. A snapshot's batch of millions of rows comes to the driver as
    a few rows, not as results large enough for Spark to lose on their way."""
    changes = progress_columns(frame.where(f"NOT ({_EXISTING})")).selectExpr(
        "*", f"1L AS {COUNTED}"
    )
    grouped = frame.where(_EXISTING).groupBy("keyspace", "shard", "op", "dedup").count()
    existing = grouped.withColumnRenamed("count", COUNTED)
    return changes.unionByName(existing, allowMissingColumns=True)


def _head(frame: Any, most: int) -> list[Any]:
    """The batch's first `most` + 1 rows, in order, in one Spark job: a `collect` under a limit
    takes half the time of `toLocalIterator` over a persisted batch (one job per partition, and
    the cache written) for the usual micro-batch of a few hundred rows (`bench-read-back`)."""
    return cast(list[Any], frame.limit(most + 1).collect())


def _events(frame: Any) -> Iterator[ChangeEvent]:
    # one Spark job per partition: the next one runs while this one is taken
    for row in frame.toLocalIterator(prefetchPartitions=True):
        yield ChangeEvent.from_row(row.asDict())
