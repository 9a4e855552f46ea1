"""The replay window of a reshard: filtered replication that starts before the copy's snapshot.

A change stream stopped before a reshard resumes, once the source shards are retired, from the
destination shards' binlogs; they must hold every source transaction after the stream's last
delivered source position. By default a destination's binlog starts at the copy's snapshot
(copied rows are not logged). With a replay window of N seconds, filtered replication starts at
the source position just before the first transaction whose binlog timestamp is at or after
`snapshot time - N`, and re-applies the transactions up to the snapshot over the copied rows:
they carry full row images and are applied as upserts and deletes by primary key, so every row is
back at its snapshot state once the snapshot position is passed again, and each of them is in the
destination binlog with its source provenance like any replicated transaction.

Applied to rows that are already at their snapshot state, many of those changes would change
nothing, and MariaDB logs no row event for them: an insert of a row the copy already has, a delete
of a row the copy no longer has. A stream reading the destination would miss them. So the copy's
last transaction first rewinds the rows: every row the window touches is put back (unlogged, like
the copy) to its state at the window's start, taken from the before image of its first change in
the source binlog (or removed, when its first change inserted it). Replication then applies each
window transaction to the rows the source had, and logs the same row changes the source did.

The start is found by a binary search over the source's binlog files by time
(`updatestream.binlog.start_positions`). When the source no longer holds binlogs that old, the
window starts at the oldest position it still has, and says so.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from updatestream.binlog.config import ReaderConfig, ShardEndpoint, endpoints_of
from updatestream.binlog.errors import BinlogPurged, SourceError
from updatestream.binlog.session import (
    BinlogStream,
    ShardSession,
    connection_settings,
    server_id,
)
from updatestream.binlog.start_positions import earliest_start, find_start_by_timestamp
from updatestream.core.gtid import MariaDBGTID, MariaDBPosition
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema
from updatestream.spec import Keyspace
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.copy import ReplicationStart
from updatestream_cli.devcluster.errors import ReshardError
from updatestream_cli.devcluster.rowchanges import (
    TRANSACTION_EVENTS,
    RowChange,
    row_images,
    row_statements,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayWindow:
    """Where filtered replication from one source starts, relative to the copy's snapshot."""

    source: str
    snapshot_pos: str
    snapshot_time: int  # the source's clock when the snapshot was taken (seconds)
    since: int  # the requested start: snapshot time - replay seconds
    start_pos: str  # where replication starts; `_vt.vreplication.start_pos`
    transactions: int  # source transactions between start_pos and the snapshot
    oldest_time: int | None = None  # set when the binlog did not reach back to `since`

    @property
    def truncated(self) -> bool:
        return self.oldest_time is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_transactions(start: MariaDBPosition, end: MariaDBPosition) -> int:
    """Source transactions after `start` up to `end` (sequence numbers grow by one per
    transaction within a domain)."""
    return sum(max(0, gtid.seq - (start.domain_seq(gtid.domain) or 0)) for gtid in end)


def _endpoint(
    keyspace: Keyspace, secrets_dir: Path, source: str
) -> tuple[ShardEndpoint, ReaderConfig]:
    shard = keyspace.spec.shard(source)
    endpoint = next(e for e in endpoints_of(keyspace) if e.shard == shard.name)
    config = ReaderConfig(
        keyspace=keyspace.metadata.name,
        vschema_json=json.dumps(keyspace.spec.vschema),
        secrets_dir=str(secrets_dir),
    )
    return endpoint, config


def find_replay_window(
    keyspace: Keyspace,
    secrets_dir: Path,
    source: str,
    snapshot_pos: str,
    snapshot_time: int,
    seconds: float,
) -> ReplayWindow:
    """The replay window of `source` for a snapshot; empty (start = snapshot) for 0 seconds."""
    snapshot = MariaDBPosition.parse(snapshot_pos)
    if seconds <= 0:
        return ReplayWindow(source, snapshot_pos, snapshot_time, snapshot_time, snapshot_pos, 0)
    since = math.ceil(snapshot_time - seconds)  # binlog timestamps are whole seconds
    endpoint, config = _endpoint(keyspace, secrets_dir, source)
    oldest_time: int | None = None
    try:
        with ShardSession(endpoint, config) as session:
            try:
                found = find_start_by_timestamp(
                    session, connection_settings(endpoint, config), since
                )
            except BinlogPurged:
                found, oldest_time = earliest_start(session)
    except SourceError as exc:
        raise ReshardError(
            f"cannot find where the replay window of source shard {source} starts: {exc}; "
            "fix the cause and rerun the reshard"
        ) from None
    if not isinstance(found, MariaDBPosition):
        raise ReshardError(f"source shard {source} answered a non-MariaDB position {found}")
    # Timestamps may step back a little along a binlog (a source that was itself filled by
    # filtered replication); a start after the snapshot means the window is empty.
    start = found if snapshot.contains(found) else snapshot
    window = ReplayWindow(
        source=source,
        snapshot_pos=snapshot_pos,
        snapshot_time=snapshot_time,
        since=since,
        start_pos=str(start),
        transactions=window_transactions(start, snapshot),
        oldest_time=oldest_time,
    )
    if window.truncated:
        log.warning(
            "the binlog of source shard %s reaches back only to %s (oldest binlog opened at %s), "
            "not to %s; replaying from there",
            source,
            window.start_pos or "(empty position)",
            oldest_time,
            since,
        )
    return window


@dataclass
class Rewind:
    """The state at a replay window's start of every row the window touches: the before image
    of its first change there, or None when that change inserted it."""

    vschema: VSchema
    states: dict[tuple[str, tuple[Any, ...]], dict[str, Any] | None] = field(default_factory=dict)

    def touch(
        self, table: str, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> None:
        keys = sample_schema.PRIMARY_KEYS[table]
        if before is not None:
            self.states.setdefault((table, tuple(before[k] for k in keys)), before)
        if after is not None:  # a row first seen in an after image did not exist before
            self.states.setdefault((table, tuple(after[k] for k in keys)), None)

    def statements(self, key_range: KeyRange) -> list[tuple[str, list[Any]]]:
        """Statements that put the rows of `key_range` back to their state at the window start."""
        changes = []
        for (table, key), image in self.states.items():
            ksid = None if image is None else self.vschema.keyspace_id_for(table, image)
            if image is not None and ksid is not None and key_range.contains(ksid):
                changes.append(RowChange(table, "write", image, ksid))
            else:
                pk = dict(zip(sample_schema.PRIMARY_KEYS[table], key, strict=True))
                changes.append(RowChange(table, "delete", pk, b""))
        changes.sort(key=lambda change: (change.table, change.op))
        return row_statements(changes)


def read_rewind(keyspace: Keyspace, secrets_dir: Path, window: ReplayWindow) -> Rewind:
    """Read the source binlog from the window's start to the snapshot (the snapshot is in the
    binlog already, so this ends) and keep each touched row's state at the start."""
    rewind = Rewind(VSchema.from_dict(keyspace.spec.vschema))
    position = MariaDBPosition.parse(window.start_pos)
    end = MariaDBPosition.parse(window.snapshot_pos)
    if position.contains(end):
        return rewind
    endpoint, config = _endpoint(keyspace, secrets_dir, window.source)
    connects = 0

    def connect(**kwargs: Any) -> Any:
        nonlocal connects
        if kwargs.get("db") != "information_schema":  # the stream, not the control connection
            connects += 1
        return pymysql.connect(**kwargs)

    stream = BinlogStream(
        connection_settings=connection_settings(endpoint, config),
        server_id=server_id(),
        blocking=True,
        is_mariadb=True,
        auto_position=str(position),
        pymysql_wrapper=connect,
        only_events=list(TRANSACTION_EVENTS),
    )
    gtid: MariaDBGTID | None = None
    standalone = False
    try:
        for event in stream:
            if connects > 1:  # python-mysql-replication reconnected by itself, from the start
                raise ReshardError(
                    f"the binlog stream of source shard {window.source} dropped while reading "
                    f"the replay window at {position}; rerun the reshard"
                )
            if isinstance(event, MariadbGtidEvent):
                gtid = MariaDBGTID(event.domain_id, event.server_id, event.gtid_seq_no)
                standalone = bool(event.flags & 1)
            elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                if event.schema == sample_schema.DATABASE and event.table in sample_schema.COLUMNS:
                    for row in event.rows:
                        rewind.touch(event.table, *row_images(event, row))
            elif gtid is not None and (
                isinstance(event, XidEvent)
                or (isinstance(event, QueryEvent) and (standalone or event.query == "COMMIT"))
            ):
                position = position.advance(gtid)
                gtid = None
                if position.contains(end):
                    break
    finally:
        stream.close()
    return rewind


def replication_start(
    keyspace: Keyspace, secrets_dir: Path, window: ReplayWindow
) -> ReplicationStart:
    """Where replication starts after the copy, with the rewind of the rows (if any window)."""
    if window.start_pos == window.snapshot_pos:
        return ReplicationStart(window.snapshot_pos)
    return ReplicationStart(window.start_pos, read_rewind(keyspace, secrets_dir, window).statements)
