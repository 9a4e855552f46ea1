"""The CDCv2 sink: the change stream as update and progress statements in files.

Each row change becomes update statements ``(data, time, diff)`` with ``data`` =
``{"table", "pk", "row"}`` and ``time`` = the event's source timestamp: an insert ``+1`` of the
after image, a delete ``-1`` of the before image, an update both. Files live in
``<path>/<stream>/range=<key range>/``, one per batch id; see :mod:`updatestream.cdcv2.writer`
for when times complete and progress is written, and :mod:`updatestream.cdcv2.reader` to read
them back.
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

    def open(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SinkError(f"{self.name}: cannot create {self.root}: {exc.strerror}") from None

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult:
        directory = stream_directory(self.root, ctx)
        changes: list[Change] = []
        heartbeats: dict[str, int] = {}
        for event in events:
            if event.op == "heartbeat":
                heartbeats[event.shard] = max(heartbeats.get(event.shard, 0), event.timestamp)
            else:
                changes.append(change_of(event))
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
            skipped=report.duplicates,
            late=report.late,
            duplicates_delivered=delivered,
        )

    def close(self) -> None:
        pass
