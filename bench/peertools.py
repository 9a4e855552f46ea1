"""The peers benchmark's bookkeeping: the Debezium harness's output lines and the figures.

The harness (`bench/peers/debezium`) prints one JSON object per line: `jvm` (when the JVM and
its `main` started), `started` (the connector task runs), `change` (one row change: when the
harness received it, its GTID and binlog coordinates), `done` (catch-up: how many row changes,
the first and last receive times), `stopped` and `error`. Other lines (a stray log line) are
kept aside, never fatal. Everything here is pure: no process, no server.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from updatestream_jobs.job import BatchPhases

from bench.lagtools import BatchRecord, TxKey


@dataclass
class HarnessOutput:
    jvm_start: float | None = None  # the JVM's own start time (unix seconds)
    main_at: float | None = None  # when the harness's main began (JVM start behind it)
    started_at: float | None = None  # when the connector task started
    done: dict[str, Any] | None = None  # catch-up: count, batches, first, last
    changes: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stopped: dict[str, Any] | None = None
    other: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        """Take one line of the harness's standard output."""
        text = line.strip()
        if not text:
            return
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            self.other.append(text)
            return
        if not isinstance(record, dict):
            self.other.append(text)
            return
        kind = record.get("type")
        if kind == "jvm":
            self.jvm_start = float(record["jvm_start"])
            self.main_at = float(record["main"])
        elif kind == "started":
            self.started_at = float(record["t"])
        elif kind == "change":
            self.changes.append(record)
        elif kind == "done":
            self.done = record
        elif kind == "stopped":
            self.stopped = record
        elif kind == "error":
            self.errors.append(f"{record.get('message')} {record.get('error') or ''}".strip())
        else:
            self.other.append(text)


def parse_lines(lines: Iterable[str]) -> HarnessOutput:
    out = HarnessOutput()
    for line in lines:
        out.add(line)
    return out


@dataclass(frozen=True)
class CatchUp:
    rows: int
    first_to_last_rows_per_s: float  # first to last row change received
    with_engine_start_rows_per_s: float  # from the harness's main (JVM start excluded)
    with_jvm_start_rows_per_s: float  # from the JVM's start
    engine_start_s: float  # main to the first row change received


def catch_up(out: HarnessOutput, expected: int) -> CatchUp:
    """Rows per second of a catch-up run; raises when the harness did not count `expected`."""
    if out.errors:
        raise ValueError(f"Debezium failed: {out.errors[0]}")
    if out.done is None or out.main_at is None or out.jvm_start is None:
        raise ValueError("the harness did not finish its catch-up")
    rows = int(out.done["count"])
    if rows != expected:
        raise ValueError(f"Debezium counted {rows} row changes, expected {expected}")
    first, last = float(out.done["first"]), float(out.done["last"])
    return CatchUp(
        rows=rows,
        first_to_last_rows_per_s=rows / max(last - first, 1e-9),
        with_engine_start_rows_per_s=rows / max(last - out.main_at, 1e-9),
        with_jvm_start_rows_per_s=rows / max(last - out.jvm_start, 1e-9),
        engine_start_s=first - out.main_at,
    )


def received_at(out: HarnessOutput, shard: str) -> dict[TxKey, float]:
    """Transaction (shard, GTID) -> when the harness first received one of its row changes."""
    first: dict[TxKey, float] = {}
    for change in out.changes:
        gtid = change.get("gtid")
        if gtid:
            first.setdefault((shard, str(gtid)), float(change["t"]))
    return first


def medians(rounds: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Per key, the median over rounds of the values that are there (None when none are)."""
    keys = {key for r in rounds for key in r}
    out: dict[str, float | None] = {}
    for key in sorted(keys):
        values = [v for r in rounds if (v := r.get(key)) is not None]
        out[key] = round(float(statistics.median(values)), 3) if values else None
    return out


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs to two decimals; None when either is missing or theirs is zero."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return round(ours / theirs, 2)


def sink_phases(
    batches: Mapping[str, list[BatchRecord]], since: float, until: float
) -> dict[str, Any]:
    """The per-batch cost in the driver, for batches whose first sink call started within
    [since, until]: batches per second, median rows, median time from the first sink's call to
    the last sink's return, and per sink (in order) the median time to take the batch's rows
    (the first sink: reading them from Spark) and to write them."""
    labels = list(batches)
    if not labels:
        return {}

    def window(records: list[BatchRecord]) -> list[BatchRecord]:
        return [b for b in records if since <= b.started_at <= until]

    first = window(batches[labels[0]])
    ends = {b.batch_id: b.completed_at for b in batches[labels[-1]]}
    spans = [ends[b.batch_id] - b.started_at for b in first if b.batch_id in ends]
    rows = [sum(b.transactions.values()) for b in first]

    def mid(values: list[float]) -> float:
        return round(float(statistics.median(values)), 4) if values else 0.0

    return {
        "batches_per_s": round(len(first) / max(until - since, 1e-9), 2),
        "median_batch_rows": mid([float(r) for r in rows]),
        "median_batch_s": mid(spans),
        "sinks": {
            label: {
                "take_s": mid([b.read_at - b.started_at for b in window(batches[label])]),
                "write_s": mid([b.completed_at - b.read_at for b in window(batches[label])]),
            }
            for label in labels
        },
    }


def driver_phases(
    records: Iterable[BatchPhases], labels: Sequence[str], since: float, until: float
) -> dict[str, float]:
    """Median seconds of each phase of the job's batch function (`Job.batch_phases`) over the
    batches that started within [since, until]: the read from Spark, each
    sink's write (named by `labels`, in the job's sink order), the finish, the whole."""
    window = [p for p in records if since <= p.started_at <= until]
    if not window:
        return {}
    columns: dict[str, list[float]] = {"read_s": [], "finish_s": [], "total_s": []}
    for phases in window:
        columns["read_s"].append(phases.read_s)
        columns["finish_s"].append(phases.finish_s)
        columns["total_s"].append(phases.total_s)
        for label, seconds in zip(labels, phases.sinks_s.values(), strict=True):
            columns.setdefault(f"{label}_write_s", []).append(seconds)
    return {key: round(float(statistics.median(v)), 4) for key, v in columns.items()}
