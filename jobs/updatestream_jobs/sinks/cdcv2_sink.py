"""The CDCv2 sink: the change stream as update and progress statements in files.

Each row change becomes update statements ``(data, time, diff)`` with ``data`` =
``{"table", "pk", "row"}`` and ``time`` = the event's source timestamp: an insert ``+1`` of the
after image, a delete ``-1`` of the before image, an update both. Files live in
``<path>/<stream>/range=<key range>/``, one per batch id; see :mod:`updatestream.cdcv2.writer`
for when times complete and progress is written, and :mod:`updatestream.cdcv2.reader` to read
them back.

A ``snapshot`` row (the stream's starting snapshot) is an update ``+1`` of the row: the
collection holds nothing of its key yet. A ``reread`` row (a snapshot on demand) is refused: to
leave the collection equal to the shards' rows, a re-read would have to write, per key, the
updates from the rows the collection holds to the row re-read, and what the collection holds
is only in the files written so far (reading all of them back for every re-read is not done).
The stream delivers every change during a re-read, so refusing it leaves the collection exactly
what it was: the shards' rows for a stream that started with a snapshot into a new path.

With ``writeFrom: executors`` the batch is not brought to the driver: Spark's tasks write the
update statements in ``writePartitions`` parts of the data at the same time and the driver
writes the progress statement once every part has written (`write_frame`;
:mod:`updatestream.cdcv2.parallel_writer` for the rules, `cdcv2_tasks` for the Spark side). The
statements are the same as one writer's, spread over a file per part and batch. A path keeps
the mode and the number of parts it was started with: the writers refuse another.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.cdcv2.format import CDCv2FormatError
from updatestream.cdcv2.parallel_writer import (
    PartReport,
    ProgressWriter,
    write_in_parts,
)
from updatestream.cdcv2.writer import BatchReport, Change, StreamWriter
from updatestream_jobs.sinks.cdcv2_tasks import (
    BatchOfParts,
    PartTask,
    change_of,
    routed_updates,
)
from updatestream_jobs.sinks.executor_tasks import run_partitions
from updatestream_jobs.sinks.sink import (
    BatchContext,
    ReplayGuard,
    SinkContext,
    SinkError,
    SinkResult,
)

log = logging.getLogger(__name__)


def stream_directory(root: Path, ctx: BatchContext) -> Path:
    return root / ctx.stream / f"range={ctx.key_range}"


class CDCv2Sink:
    """Writes each batch into one file of the stream's directory (see the module docstring)."""

    @classmethod
    def from_spec(cls, config: spec.CDCv2Sink, context: SinkContext) -> CDCv2Sink:
        return cls(config)

    def __init__(self, config: spec.CDCv2Sink) -> None:
        self.config = config
        self.root = Path(config.path)
        self.file_format = config.format
        self.lateness = config.allowed_lateness
        self.name = f"cdcv2({self.root})"
        self._replays = ReplayGuard()
        self._refusing = False  # the last batch held re-read rows (one warning per re-read)

    def open(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SinkError(f"{self.name}: cannot create {self.root}: {exc.strerror}") from None

    @property
    def writes_from_executors(self) -> bool:
        return self.config.write_from == "executors"

    def _parallel(self, directory: Path) -> ProgressWriter:
        return ProgressWriter(
            directory,
            parts=self.config.write_partitions,
            lateness=self.lateness,
            file_format=self.file_format,
        )

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult:
        directory = stream_directory(self.root, ctx)
        changes: list[Change] = []
        heartbeats: dict[str, int] = {}
        refused = 0
        for event in events:
            if event.op == "heartbeat":
                heartbeats[event.shard] = max(heartbeats.get(event.shard, 0), event.timestamp)
            elif event.op == "reread":
                refused += 1
            else:
                changes.append(change_of(event))
        self._refuse(refused, ctx)
        with self._errors(ctx, directory):
            if self.writes_from_executors:  # the same files as the executors write
                parallel = self._parallel(directory)
                report = write_in_parts(parallel, ctx.batch_id, changes, heartbeats)
            else:
                writer = StreamWriter(
                    directory, lateness=self.lateness, file_format=self.file_format
                )
                report = writer.write_batch(ctx.batch_id, changes, heartbeats)
        return self._result(report, refused, ctx)

    def write_frame(self, frame: Any, ctx: BatchContext) -> SinkResult:
        """``writeFrom: executors``: the parts of the batch `frame` written by Spark's tasks at
        the same time, the progress statement by the driver once all have (`cdcv2_tasks`)."""
        directory = stream_directory(self.root, ctx)
        parallel = self._parallel(directory)
        with self._errors(ctx, directory):
            state = parallel.load(ctx.batch_id)
            batch = BatchOfParts(ctx.batch_id, state, self.lateness)
            task = PartTask(self.name, str(directory), self.file_format, batch)
            found = run_partitions(routed_updates(frame, parallel.parts), task)
            reports = [PartReport.from_json(report) for report in found]
            plan = parallel.agreed_plan(ctx.batch_id, state, reports)
            report = parallel.finish(plan, reports)
        refused = sum(r.refused for r in reports)
        self._refuse(refused, ctx)
        return self._result(report, refused, ctx)

    @contextlib.contextmanager
    def _errors(self, ctx: BatchContext, directory: Path) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise SinkError(
                f"{self.name}: cannot write batch {ctx.batch_id} into {directory}: "
                f"{exc.strerror or exc}"
            ) from None
        except CDCv2FormatError as exc:
            raise SinkError(f"{self.name}: {exc}") from None

    def _result(self, report: BatchReport, refused: int, ctx: BatchContext) -> SinkResult:
        if report.late:
            log.warning(
                "%s: %d changes of batch %d arrived after their time had completed; written at "
                "%d. Raise allowedLatenessSeconds if this recurs",
                self.name,
                report.late,
                ctx.batch_id,
                report.frontier,
            )
        # The writer recognises a change taken earlier (its identity, while its time is open).
        # A replay is recomputed from the state before it and finds the same ones again: they
        # were counted when the batch first ran, so a replay counts nothing.
        delivered = 0 if self._replays.may_repeat(ctx) else report.duplicates
        self._replays.written(ctx)
        return SinkResult(
            written=report.taken,
            skipped=report.duplicates + refused,
            late=report.late,
            duplicates_delivered=delivered,
        )

    def _refuse(self, refused: int, ctx: BatchContext) -> None:
        """Say that a snapshot on demand is not written here (see the module)."""
        if refused and not self._refusing:
            log.warning(
                "%s: refuses the rows a snapshot on demand re-reads (%d in batch %d, more may "
                "follow): a CDCv2 collection can take a re-read only as the updates from the "
                "rows it holds, which are in its files, not known to the writer. Every change "
                "is still written, so the collection stays what it was; to load existing rows "
                "into CDCv2, start a stream with a snapshot into a new path",
                self.name,
                refused,
                ctx.batch_id,
            )
        elif refused:
            log.info("%s: refused %d re-read rows of batch %d", self.name, refused, ctx.batch_id)
        self._refusing = refused > 0

    def close(self) -> None:
        pass
