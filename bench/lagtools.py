"""End-to-end lag of a change stream, event by event, against the traffic ledger.

`TimedSink` wraps one of the job's sinks: it passes the batch through unchanged, notes which
transactions (shard, GTID) the batch carried, and the wall-clock time at which the wrapped
sink's `write_batch` returned. `event_lags` then gives, for every row change of a ledger, the
time its batch's sink write completed minus the commit time the ledger recorded for it.
`cdcv2_complete_times` gives, for the CDCv2 sink, the time at which each transaction's second
was declared complete by a progress statement (readers only trust times below the frontier).
`fast_lane_times` gives when the memcached fast lane applied each transaction's invalidations,
from the job's `fastLaneLog`.
"""

from __future__ import annotations

import bisect
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from updatestream_cli.devcluster.ledger import LedgerEntry
from updatestream_jobs.sinks.sink import BatchContext, Sink, SinkResult

from updatestream.binlog.events import ChangeEvent
from updatestream.cdcv2.format import Progress, batch_id_of, read_file, stream_files

TxKey = tuple[str, str]  # (shard, the transaction's GTID, `domain-server-seq`)


@dataclass
class BatchRecord:
    batch_id: int
    started_at: float  # when write_batch was called (the batch's rows are read lazily after)
    read_at: float  # when the sink had taken the batch's last event
    completed_at: float  # unix seconds, when the wrapped sink's write_batch returned
    transactions: Counter[TxKey]  # change events per transaction in the batch
    timestamps: dict[TxKey, int]  # each transaction's binlog timestamp
    written: int = 0  # events the wrapped sink reported written (`SinkResult.written`)
    taken: int = 0  # events the wrapped sink took: written or skipped (`SinkResult`)


def gtid_candidates(position: str) -> list[str]:
    """The GTIDs a position may name its transaction by: MariaDB's position holds one GTID per
    domain (`domain-server-seq`), one of them the transaction's; MySQL's is the executed GTID
    set (`uuid:1-N`), whose transaction is the end of one source's last interval (`uuid:N`)."""
    found = []
    for part in (p.strip() for p in position.split(",")):
        if ":" in part:  # MySQL: uuid:interval[:interval...]
            uuid, _, intervals = part.partition(":")
            part = f"{uuid}:{intervals.rsplit(':', 1)[-1].rsplit('-', 1)[-1]}"
        if part:
            found.append(part)
    return found


def transaction_keys(event: ChangeEvent) -> list[TxKey]:
    """The GTIDs an event's position may name its transaction by (one per domain or source)."""
    return [(event.shard, gtid) for gtid in gtid_candidates(event.gtid)]


@dataclass
class TimedSink:
    """A sink that records when each batch's write completed (see the module docstring).

    A sink written from the executors (`write_frame`) never sees the batch's events in the
    driver: its `peer`, a sink of the same job written in the driver, tells which transactions
    each batch id carried, and this sink's own write tells when it completed."""

    inner: Sink
    clock: Callable[[], float] = time.time
    records: list[BatchRecord] = field(default_factory=list)
    peer: TimedSink | None = None

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def writes_from_executors(self) -> bool:
        return bool(getattr(self.inner, "writes_from_executors", False))

    @property
    def batches(self) -> list[BatchRecord]:
        if self.peer is None:
            return self.records
        carried = {b.batch_id: b for b in self.peer.records}
        return [
            BatchRecord(
                r.batch_id, r.started_at, r.read_at, r.completed_at,
                carried[r.batch_id].transactions, carried[r.batch_id].timestamps, r.written,
                r.taken,
            )
            for r in self.records
            if r.batch_id in carried
        ]  # fmt: skip

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def write_frame(self, frame: object, ctx: BatchContext) -> SinkResult:
        started = self.clock()
        result: SinkResult = self.inner.write_frame(frame, ctx)  # type: ignore[attr-defined]
        done = self.clock()
        taken = result.written + result.skipped
        record = BatchRecord(
            ctx.batch_id, started, done, done, Counter(), {}, result.written, taken
        )
        self.records.append(record)
        return result

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult:
        seen: Counter[TxKey] = Counter()
        stamps: dict[TxKey, int] = {}
        read: list[float] = []

        def tap() -> Iterator[ChangeEvent]:
            for event in events:
                if event.op != "heartbeat":
                    for key in transaction_keys(event):
                        seen[key] += 1
                        stamps.setdefault(key, event.timestamp)
                yield event
            read.append(self.clock())

        started = self.clock()
        result = self.inner.write_batch(tap(), ctx)
        done = self.clock()
        record = BatchRecord(
            ctx.batch_id, started, read[0] if read else done, done, seen, stamps, result.written,
            result.written + result.skipped,
        )  # fmt: skip
        self.records.append(record)
        return result

    def delivered_at(self) -> dict[TxKey, float]:
        """Transaction -> when the first batch that carried it was written."""
        done: dict[TxKey, float] = {}
        for batch in self.batches:
            for key in batch.transactions:
                done.setdefault(key, batch.completed_at)
        return done

    def rows(self, since: float = 0.0) -> int:
        """Change events written in batches completed at or after `since`."""
        return sum(sum(b.transactions.values()) for b in self.batches if b.completed_at >= since)


@dataclass(frozen=True)
class LagReport:
    events: int  # ledger row changes that were delivered
    missing: int  # ledger row changes never seen by the sink
    p50_s: float | None
    p99_s: float | None
    max_s: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "events": self.events,
            "missing": self.missing,
            "p50_s": self.p50_s,
            "p99_s": self.p99_s,
            "max_s": self.max_s,
        }


def event_lags(
    ledger: Iterable[LedgerEntry], delivered: Mapping[TxKey, float]
) -> tuple[list[float], int]:
    """Per ledger row change: delivered time minus commit time; and how many were missing."""
    lags: list[float] = []
    missing = 0
    for entry in ledger:
        done = delivered.get((entry.shard, entry.gtid))
        if done is None:
            missing += 1
        else:
            lags.append(done - entry.commit_time)
    return lags, missing


def summarize(lags: list[float], missing: int = 0) -> LagReport:
    """p50, p99 and max (seconds, 3 decimals; None when nothing was delivered)."""
    if not lags:
        return LagReport(0, missing, None, None, None)
    p50, p99 = np.percentile(np.asarray(lags), [50, 99])
    return LagReport(len(lags), missing, round(float(p50), 3), round(float(p99), 3),
                     round(max(lags), 3))  # fmt: skip


def cdcv2_complete_times(directory: Path, sink: TimedSink) -> dict[TxKey, float]:
    """Transaction -> when a CDCv2 progress statement first declared its second complete.

    A batch file's progress statement says every time below its `upper` is complete; the
    moment is when that batch's write returned (recorded by `sink`). A transaction still open
    at the end of the run is left out.
    """
    written = {b.batch_id: b.completed_at for b in sink.batches}
    frontiers: list[tuple[int, float]] = []  # (upper, completed at), in batch order
    for path in stream_files(directory):
        batch_id = batch_id_of(path)
        if batch_id not in written:
            continue
        for statement in read_file(path):
            if isinstance(statement, Progress) and statement.upper is not None:
                frontiers.append((statement.upper, written[batch_id]))
    # the frontier never moves back: the first batch whose upper passes `ts` completes it
    uppers = list(np.maximum.accumulate([u for u, _ in frontiers])) if frontiers else []
    complete: dict[TxKey, float] = {}
    for batch in sink.batches:
        for key, ts in batch.timestamps.items():
            index = bisect.bisect_right(uppers, ts)
            if key not in complete and index < len(frontiers):
                complete[key] = frontiers[index][1]
    return complete


def fast_lane_times(log: Path, moment: str = "appliedAt") -> dict[TxKey, float]:
    """Transaction -> when a fast lane first applied its invalidations (the source option
    `fastLaneLog`: one JSON line per transaction; empty when the file is absent). `moment`
    "tailedAt": when the shard's binlog tail had read the transaction's end instead."""
    applied: dict[TxKey, float] = {}
    if not log.exists():
        return applied
    with log.open(encoding="utf-8") as lines:
        for line in lines:
            if line.endswith("\n"):  # a line being written is left for the next read
                entry = json.loads(line)
                if entry.get(moment) is None:
                    continue
                for gtid in gtid_candidates(str(entry["gtid"])):
                    applied.setdefault((entry["shard"], gtid), entry[moment])
    return applied
