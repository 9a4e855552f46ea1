"""The CDCv2 sink's writes from the executors: the Spark side of the parallel writers.

`updatestream.cdcv2.parallel_writer` spreads a stream over part writers, each owning the
updates of some data, and one progress writer. With ``writeFrom: executors`` a batch is one
Spark job of two stages, and only the parts' reports come to the driver:

1. `RouteTask`, in every task of the batch: its rows become update rows, each routed to its
   part by its datum, and the task's marks (each shard's largest timestamp among its changes
   and heartbeats) go to every part, its count of refused re-read rows to part 0.
2. Spark brings each part's rows together (a shuffle, `routed_updates`), with one marker row
   per part, so a part with nothing new in the batch still runs and writes what completed.
3. `PartTask`: each part plans the batch from the writer's state before it (sent by the
   driver) and the batch's marks, all parts alike (`plan_of`); it takes its updates, writes its
   file and reports its counts and the marks it planned by, all parts at the same time. The
   driver checks the parts planned alike and writes the progress statement.

A failure in any task fails the batch, which is written again from the states before it.
The stream's directory must be one filesystem for the driver and every executor (a shared
volume on a cluster).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updatestream.binlog.events import ChangeEvent
from updatestream.cdcv2.parallel_writer import (
    PartUpdate,
    PartWriter,
    WriterState,
    part_updates,
    plan_of,
    route_of,
)
from updatestream.cdcv2.writer import Change
from updatestream_jobs.sinks.common import identity_text, pk_of, row_images
from updatestream_jobs.sinks.executor_tasks import kept_events, task_failure
from updatestream_jobs.sinks.sink import SinkError

UPDATE, MARKER, MARK, REFUSED = "update", "marker", "mark", "refused"  # what a row is
UPDATE_COLUMNS = (
    ("part", "INT"),
    ("kind", "STRING"),
    ("data", "STRING"),
    ("time", "BIGINT"),
    ("diff", "INT"),
    ("identity", "STRING"),
    ("first", "BOOLEAN"),
)
UPDATE_SCHEMA = ", ".join(f"`{name}` {kind}" for name, kind in UPDATE_COLUMNS)


def change_of(event: ChangeEvent) -> Change:
    """The CDCv2 change of one row event."""
    pk, before, after = row_images(event)
    updates: list[tuple[Any, int]] = []
    if before is not None:
        updates.append(({"table": event.table, "pk": pk_of(before, pk), "row": before}, -1))
    if after is not None:
        updates.append(({"table": event.table, "pk": pk_of(after, pk), "row": after}, +1))
    return Change(identity_text(event), event.shard, event.timestamp, tuple(updates))


class RouteTask:
    """One task's rows as rows for the parts (step 1). Holds only `parts`."""

    def __init__(self, parts: int) -> None:
        self.parts = parts

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow

        schema = arrow_schema()
        marks: dict[str, int] = {}
        refused = 0
        for batch in batches:
            found: list[dict[str, Any]] = []
            for event in kept_events(batch.to_pylist()):
                if event.op == "reread":
                    refused += 1
                    continue
                marks[event.shard] = max(marks.get(event.shard, event.timestamp), event.timestamp)
                if event.op != "heartbeat":
                    found += (self._update(u) for u in part_updates(change_of(event)))
            if found:
                yield pyarrow.RecordBatch.from_pylist(found, schema=schema)
        told = [
            _row(p, MARK, identity=s, time=t) for p in range(self.parts) for s, t in marks.items()
        ]
        if refused:
            told.append(_row(0, REFUSED, diff=refused))
        if told:
            yield pyarrow.RecordBatch.from_pylist(told, schema=schema)

    def _update(self, update: PartUpdate) -> dict[str, Any]:
        part = route_of(update.data) % self.parts
        return _row(
            part, UPDATE, data=update.data, time=update.time, diff=update.diff,
            identity=update.identity, first=update.first,
        )  # fmt: skip


def _row(part: int, kind: str, **values: Any) -> dict[str, Any]:
    return {"part": part, "kind": kind, **values}


def arrow_schema() -> Any:
    import pyarrow

    kinds = {
        "INT": pyarrow.int32(),
        "BIGINT": pyarrow.int64(),
        "BOOLEAN": pyarrow.bool_(),
        "STRING": pyarrow.string(),
    }
    return pyarrow.schema([(name, kinds[kind]) for name, kind in UPDATE_COLUMNS])


def routed_updates(frame: Any, parts: int) -> Any:
    """The batch `frame` as rows for the parts in `parts` Spark partitions, each part's rows
    (its updates, the marks, its marker) in one of them."""
    updates = frame.mapInArrow(RouteTask(parts), UPDATE_SCHEMA)
    markers = frame.sparkSession.range(parts).selectExpr(
        "CAST(id AS INT) AS part",
        f"'{MARKER}' AS kind",
        "CAST(NULL AS STRING) AS data",
        "CAST(NULL AS BIGINT) AS time",
        "CAST(NULL AS INT) AS diff",
        "CAST(NULL AS STRING) AS identity",
        "CAST(NULL AS BOOLEAN) AS first",
    )
    return updates.unionByName(markers).repartition(parts, "part")


class PartTask:
    """What one task of step 3 runs: each part whose marker it holds plans the batch, writes
    its updates and reports. Holds only text, so Spark ships it to the executors."""

    def __init__(self, name: str, directory: str, file_format: str, batch: BatchOfParts) -> None:
        self.name, self.directory, self.file_format = name, directory, file_format
        state = batch.state
        self.batch = json.dumps(
            [batch.batch_id, state.frontier, state.marks, state.late, batch.lateness]
        )

    def __call__(self, rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        batch_id, frontier, marks, late, lateness = json.loads(self.batch)
        state = WriterState(frontier, marks, late)
        parts: dict[int, _PartRows] = {}
        for row in rows:
            parts.setdefault(int(row["part"]), _PartRows()).take(row)
        for part, taken in sorted(parts.items()):
            plan = plan_of(batch_id, state, taken.marks, lateness)
            writer = PartWriter(Path(self.directory), part, file_format=self.file_format)
            try:
                report = writer.write_batch(plan, taken.updates)
            except OSError as exc:
                raise task_failure(
                    SinkError(
                        f"{self.name}: cannot write part {part} of batch {batch_id} into "
                        f"{self.directory}: {exc.strerror or exc}"
                    )
                ) from None
            yield {**report.to_json(), "marks": taken.marks, "refused": taken.refused}


@dataclass(frozen=True)
class BatchOfParts:
    """What the driver tells every part of a batch: its id, the progress writer's state before
    it, and the stream's lateness."""

    batch_id: int
    state: WriterState
    lateness: int


@dataclass
class _PartRows:
    updates: list[PartUpdate] = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)
    refused: int = 0

    def take(self, row: dict[str, Any]) -> None:
        kind = row["kind"]
        if kind == UPDATE:
            found = (row["data"], row["time"], row["diff"], row["identity"], row["first"])
            self.updates.append(PartUpdate(*found))
        elif kind == MARK:
            shard, time = row["identity"], int(row["time"])
            self.marks[shard] = max(self.marks.get(shard, time), time)
        elif kind == REFUSED:
            self.refused += int(row["diff"])
