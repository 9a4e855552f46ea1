"""The Version Stream sink: every row change appended as the next version of one stream.

Each change becomes a version of the entity ``<table>:<primary key JSON>`` with the after image
as ``data`` (NULL for a delete: a tombstone). An update that changes the primary key first
writes a tombstone for the old key. A batch is appended in one transaction (see
:mod:`updatestream.versionstream.repository`): gapless versions in stream order, each change at
most once, recognised by its source identity, so replayed batches and hop duplicates append
nothing. An identity already present in a batch that is no replay is reported as a duplicate
delivered (`SinkResult.duplicates_delivered`): the hop dedup should have dropped it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pymysql

from updatestream import spec
from updatestream.binlog.events import SNAPSHOT_OPS, ChangeEvent
from updatestream.core.errors import UpdateStreamError
from updatestream.mysql_connections import connection_arguments, describe_error
from updatestream.versionstream.partitioned_stream import PartitionedAppend, PartitionedStream
from updatestream.versionstream.repository import (
    AppendResult,
    Origin,
    Record,
    VersionStreamRepository,
    entity_name,
)
from updatestream_jobs.sinks.common import identity, loads_object, pk_of
from updatestream_jobs.sinks.server_outage import sink_failure
from updatestream_jobs.sinks.sink import (
    BatchContext,
    ReplayGuard,
    SinkContext,
    SinkError,
    SinkResult,
)


def records_of(event: ChangeEvent) -> list[Record]:
    """The versions one row change appends."""
    shard, gtid, _table, _pk, index = identity(event)
    # A snapshot (or re-read) row's origin is the position it was read at, marked as a
    # snapshot: it can never be mistaken for the change that wrote the row at that position.
    origin = Origin(shard, gtid, index, snapshot=event.op in SNAPSHOT_OPS)
    table = event.table or ""
    entity = f"{table}:{event.pk}"  # the pk of the after image, or of the before for a delete
    if event.after is None:
        return [Record(entity, None, origin)]
    record = Record(entity, event.after, origin)
    if event.before is None:
        return [record]
    pk = loads_object(event.pk, "pk", event)
    old_pk = pk_of(loads_object(event.before, "before", event), pk)
    if old_pk == pk:
        return [record]
    tombstone = origin._replace(part=1)
    return [Record(entity_name(table, old_pk), None, tombstone), record]


class VersionStreamSink:
    """Appends each batch to ``<database>.<table>``, stream ``stream`` (see the module)."""

    @classmethod
    def from_spec(cls, config: spec.VersionStreamSink, context: SinkContext) -> VersionStreamSink:
        return cls(config, secrets_dir=context.secrets_dir)

    def __init__(self, config: spec.VersionStreamSink, *, secrets_dir: Path) -> None:
        self.config = config
        self.secrets_dir = secrets_dir
        endpoint = config.mysql
        self.address = f"{endpoint.host}:{endpoint.port}"
        parts = f", {config.partitions} partitions" if config.partitions > 1 else ""
        self.name = (
            f"versionstream({self.address}/{config.database}.{config.table} "
            f"stream {config.stream}{parts})"
        )
        self._repository: VersionStreamRepository | PartitionedStream | None = None
        self._replays = ReplayGuard()

    def _settings(self) -> dict[str, Any]:
        return connection_arguments(
            self.config.mysql, self.secrets_dir, self.config.credentials_secret, autocommit=False
        )

    @property
    def repository(self) -> VersionStreamRepository | PartitionedStream:
        """One stream, or with `partitions` > 1 the partitions written in parallel."""
        if self._repository is None:
            settings = self._settings()
            config = self.config
            table: dict[str, Any] = {
                "table": config.table,
                "database": config.database,
                "stream": config.stream,
                "where": self.name,
            }
            if config.partitions > 1:
                self._repository = PartitionedStream(
                    lambda: pymysql.connect(**settings), partitions=config.partitions, **table
                )
            else:
                self._repository = VersionStreamRepository(
                    lambda: pymysql.connect(**settings), **table
                )
        return self._repository

    def open(self) -> None:
        try:
            self.repository.create_table()
        except (pymysql.err.MySQLError, OSError, UpdateStreamError) as exc:
            raise self._failure(exc, "cannot create the Version Stream table") from None

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult:
        records: list[Record] = []
        reads: list[Record] = []  # snapshot and re-read rows: a batch has them after its changes
        changes = rows = 0
        for event in events:
            if event.op in SNAPSHOT_OPS:
                rows += 1
                reads += records_of(event)
            elif event.op != "heartbeat":
                changes += 1
                records += records_of(event)
        skipped = min(changes, self._append(records, ctx).skipped) if records else 0
        # A row read again at the position the stream holds it from (a second re-read of a
        # quiet table) appends nothing; it is the state held, not a change delivered twice.
        unchanged = min(rows, self._append(reads, ctx).skipped) if reads else 0
        # An origin the stream already holds came again: unless this batch may repeat an
        # earlier write, the stream delivered a duplicate (the append kept it out).
        delivered = 0 if self._replays.may_repeat(ctx) else skipped
        self._replays.written(ctx)
        return SinkResult(
            written=changes + rows - skipped - unchanged,
            skipped=skipped + unchanged,
            duplicates_delivered=delivered,
        )

    def _append(self, records: list[Record], ctx: BatchContext) -> AppendResult | PartitionedAppend:
        """Append in one transaction; changes and the rows read after them go in turn, each
        at most once, so a failure between the two is repaired by the batch's replay."""
        try:
            return self.repository.append(records)
        except (pymysql.err.MySQLError, OSError, UpdateStreamError) as exc:
            # partitions commit on their own: some may hold their share, which the batch's
            # next attempt skips by origin, as the replay it then is
            self._replays.written(ctx)
            appended = "nothing of them was appended"
            if self.config.partitions > 1:
                appended = "partitions that committed keep their share"
            raise self._failure(
                exc, f"cannot append batch {ctx.batch_id} ({len(records)} versions); {appended}"
            ) from None

    def _failure(self, exc: BaseException, what: str) -> SinkError:
        return sink_failure(
            exc, what, name=self.name, kind="versionStream", address=self.address,
            cause=describe_error(exc),
        )  # fmt: skip

    def close(self) -> None:
        if self._repository is not None:
            self._repository.close()
