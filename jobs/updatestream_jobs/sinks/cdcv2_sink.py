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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.cdcv2.format import CDCv2FormatError
from updatestream.cdcv2.writer import Change, StreamWriter
from updatestream_jobs.sinks.common import identity_text, pk_of, row_images
from updatestream_jobs.sinks.sink import (
    BatchContext,
    ReplayGuard,
    SinkContext,
    SinkError,
    SinkResult,
)

log = logging.getLogger(__name__)


def change_of(event: ChangeEvent) -> Change:
    """The CDCv2 change of one row event."""
    pk, before, after = row_images(event)
    updates: list[tuple[Any, int]] = []
    if before is not None:
        updates.append(({"table": event.table, "pk": pk_of(before, pk), "row": before}, -1))
    if after is not None:
        updates.append(({"table": event.table, "pk": pk_of(after, pk), "row": after}, +1))
    return Change(identity_text(event), event.shard, event.timestamp, tuple(updates))


def stream_directory(root: Path, ctx: BatchContext) -> Path:
    return root / ctx.stream / f"range={ctx.key_range}"


class CDCv2Sink:
    """Writes each batch into one file of the stream's directory (see the module docstring)."""

    @classmethod
    def from_spec(cls, config: spec.CDCv2Sink, context: SinkContext) -> CDCv2Sink:
        return cls(config)

    def __init__(self, config: spec.CDCv2Sink) -> None:
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
        try:
            writer = StreamWriter(directory, lateness=self.lateness, file_format=self.file_format)
            report = writer.write_batch(ctx.batch_id, changes, heartbeats)
        except OSError as exc:
            raise SinkError(
                f"{self.name}: cannot write batch {ctx.batch_id} into {directory}: "
                f"{exc.strerror or exc}"
            ) from None
        except CDCv2FormatError as exc:
            raise SinkError(f"{self.name}: {exc}") from None
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
