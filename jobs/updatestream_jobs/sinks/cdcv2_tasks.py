"""The CDCv2 sink's writes from the executors: the Spark side of the parallel writers.

`updatestream.cdcv2.parallel_writer` spreads a stream over part writers, each owning the
updates of some data, and one progress writer. With ``writeFrom: executors`` a batch runs as:

1. `frame_marks`: the driver reads each shard's largest timestamp in the batch (and how many
   re-read rows it refuses) with one small aggregation, and plans the batch's watermarks.
2. `routed_updates`: every task of the batch turns its own rows into update statements and
   routes each to its part by its datum (`RouteTask`); Spark brings every part's updates
   together (a shuffle) with one marker row per part, so a part with nothing new in the batch
   still runs and writes what completed in it.
3. `PartTask`: each part writer takes its updates, writes its file and reports its counts,
   all parts at the same time; the driver then writes the progress statement.

A failure in any task fails the batch, which is written again from the states before it.
The stream's directory must be one filesystem for the driver and every executor (a shared
volume on a cluster).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from updatestream.binlog.events import HOP_MARKER, ChangeEvent
from updatestream.cdcv2.parallel_writer import (
    BatchPlan,
    PartUpdate,
    PartWriter,
    part_updates,
    route_of,
)
from updatestream.cdcv2.writer import Change
from updatestream.core.dedup import DROPPED_VERDICTS
from updatestream_jobs.sinks.common import identity_text, pk_of, row_images
from updatestream_jobs.sinks.executor_tasks import kept_events, task_failure
from updatestream_jobs.sinks.sink import SinkError

UPDATE_COLUMNS = (
    ("part", "INT"),
    ("marker", "BOOLEAN"),
    ("data", "STRING"),
    ("time", "BIGINT"),
    ("diff", "INT"),
    ("identity", "STRING"),
    ("first", "BOOLEAN"),
)
UPDATE_SCHEMA = ", ".join(f"`{name}` {kind}" for name, kind in UPDATE_COLUMNS)
_NOT_DROPPED = "dedup IS NULL OR dedup NOT IN ({})".format(
    ", ".join(f"'{v}'" for v in sorted(DROPPED_VERDICTS))
)


def change_of(event: ChangeEvent) -> Change:
    """The CDCv2 change of one row event."""
    pk, before, after = row_images(event)
    updates: list[tuple[Any, int]] = []
    if before is not None:
        updates.append(({"table": event.table, "pk": pk_of(before, pk), "row": before}, -1))
    if after is not None:
        updates.append(({"table": event.table, "pk": pk_of(after, pk), "row": after}, +1))
    return Change(identity_text(event), event.shard, event.timestamp, tuple(updates))


def frame_marks(frame: Any) -> tuple[dict[str, int], int]:
    """(each shard's largest timestamp among the batch's changes and heartbeats, how many
    re-read rows the batch holds): what the sink keeps of `frame` in the driver (step 1)."""
    rows = (
        frame.where(f"op != '{HOP_MARKER}' AND ({_NOT_DROPPED})")
        .selectExpr(
            "shard",
            "CASE WHEN op != 'reread' THEN timestamp END AS mark",
            "CASE WHEN op = 'reread' THEN 1 ELSE 0 END AS refused",
        )
        .groupBy("shard")
        .agg({"mark": "max", "refused": "sum"})
        .collect()
    )
    marks = {r["shard"]: int(r["max(mark)"]) for r in rows if r["max(mark)"] is not None}
    return marks, sum(int(r["sum(refused)"] or 0) for r in rows)


class RouteTask:
    """One task's rows as update rows, each with its part (step 2). Holds only `parts`."""

    def __init__(self, parts: int) -> None:
        self.parts = parts

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow

        schema = arrow_schema()
        for batch in batches:
            found: list[dict[str, Any]] = []
            for event in kept_events(batch.to_pylist()):
                if event.op in ("heartbeat", "reread"):
                    continue
                for update in part_updates(change_of(event)):
                    found.append(self._row(update))
            if found:
                yield pyarrow.RecordBatch.from_pylist(found, schema=schema)

    def _row(self, update: PartUpdate) -> dict[str, Any]:
        return {
            "part": route_of(update.data) % self.parts,
            "marker": False,
            "data": update.data,
            "time": update.time,
            "diff": update.diff,
            "identity": update.identity,
            "first": update.first,
        }


def arrow_schema() -> Any:
    import pyarrow

    kinds = {"INT": pyarrow.int32(), "BOOLEAN": pyarrow.bool_(), "STRING": pyarrow.string()}
    kinds["BIGINT"] = pyarrow.int64()
    return pyarrow.schema([(name, kinds[kind]) for name, kind in UPDATE_COLUMNS])


def routed_updates(frame: Any, parts: int) -> Any:
    """The batch `frame` as update rows in `parts` Spark partitions, each part's updates and
    its marker row in one of them."""
    updates = frame.mapInArrow(RouteTask(parts), UPDATE_SCHEMA)
    markers = frame.sparkSession.range(parts).selectExpr(
        "CAST(id AS INT) AS part",
        "true AS marker",
        "CAST(NULL AS STRING) AS data",
        "CAST(NULL AS BIGINT) AS time",
        "CAST(NULL AS INT) AS diff",
        "CAST(NULL AS STRING) AS identity",
        "CAST(NULL AS BOOLEAN) AS first",
    )
    return updates.unionByName(markers).repartition(parts, "part")


class PartTask:
    """What one task of step 3 runs: each part whose marker it holds writes its updates with
    the batch's plan, and reports. Holds only text, so Spark ships it to the executors."""

    def __init__(self, name: str, directory: str, file_format: str, plan: BatchPlan) -> None:
        self.name, self.directory, self.file_format = name, directory, file_format
        self.plan = json.dumps([plan.batch_id, plan.before, plan.after, plan.marks, plan.late])

    def __call__(self, rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        batch_id, before, after, marks, late = json.loads(self.plan)
        plan = BatchPlan(batch_id, before, after, marks, late)
        by_part: dict[int, list[PartUpdate]] = {}
        for row in rows:
            taken = by_part.setdefault(int(row["part"]), [])
            if not row["marker"]:
                update = (row["data"], row["time"], row["diff"], row["identity"], row["first"])
                taken.append(PartUpdate(*update))
        for part, updates in sorted(by_part.items()):
            writer = PartWriter(Path(self.directory), part, file_format=self.file_format)
            try:
                yield writer.write_batch(plan, updates).to_json()
            except OSError as exc:
                raise task_failure(
                    SinkError(
                        f"{self.name}: cannot write part {part} of batch {batch_id} into "
                        f"{self.directory}: {exc.strerror or exc}"
                    )
                ) from None
