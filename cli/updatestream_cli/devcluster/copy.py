"""The copy phase of a reshard: a consistent snapshot of a source shard into its destinations.

The source is read inside `START TRANSACTION WITH CONSISTENT SNAPSHOT`; MariaDB reports the
binlog coordinates of exactly that snapshot (`Binlog_snapshot_file`/`_position`), which
`BINLOG_GTID_POS()` turns into the source GTID position the copy stands for.
Rows are routed by keyspace id to the destinations whose key range contains it and written in
batches; each batch commits together with the destination's `_vt.vreplication` row (source
position of the snapshot, rows copied so far), so progress and data never disagree.

Copied rows are written with `sql_log_bin=0`: they are not changes of the keyspace, only a new
home for rows that already exist, so they must not appear as inserts in the destination's binlog
(a change stream reading the destination would otherwise deliver every row a second time).
Filtered replication, which starts from the snapshot position, is logged normally.

The batch that finishes a destination (`copy_done = 1`) also writes `start_pos` and sets `pos` to
the position filtered replication starts from: the snapshot position, or an earlier one chosen by
`start_position` (a replay window, see `replay`). In that case the same transaction first takes
the rows the window touched back to their state at that position (unlogged, like the copy), so
that replication re-applies the window's transactions to rows in the state the source had, and
logs the same row changes the source did.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql.cursors

from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema
from updatestream_cli.devcluster import sample_rows as rowsql
from updatestream_cli.devcluster import sample_schema as schema
from updatestream_cli.devcluster.errors import ReshardError
from updatestream_cli.devcluster.local_server import Connection

COPY_UPSERT = (
    "INSERT INTO `_vt`.`vreplication` (id, workflow, source_shard, pos, start_pos, "
    "transaction_timestamp, time_updated, state, rows_copied, copy_done) "
    "VALUES (%s, %s, %s, %s, %s, 0, %s, %s, %s, %s) "
    "ON DUPLICATE KEY UPDATE pos = VALUES(pos), start_pos = VALUES(start_pos), "
    "time_updated = VALUES(time_updated), state = VALUES(state), "
    "rows_copied = VALUES(rows_copied), copy_done = VALUES(copy_done)"
)


@dataclass(frozen=True)
class ReplicationStart:
    """Where filtered replication starts after a copy, and the statements that take a target's
    copied rows back to that position (none when it is the snapshot itself)."""

    position: str
    rewind: Callable[[KeyRange], Sequence[tuple[str, Sequence[Any]]]] = lambda _: ()


@dataclass
class CopyTarget:
    shard: str
    key_range: KeyRange
    vrep_id: int
    conn: Connection  # admin, autocommit off; sql_log_bin=0 is set here
    rows_copied: int = 0


def snapshot_position(cur: Any) -> str:
    """The source GTID position of the current consistent snapshot.

    MariaDB 10.11 reports the snapshot's binlog coordinates as the session status variables
    `Binlog_snapshot_file` / `Binlog_snapshot_position` (taken atomically with the snapshot);
    `BINLOG_GTID_POS()` turns those into the GTID position. `@@gtid_binlog_pos` would not do:
    it moves with commits that happen after the snapshot.
    """
    cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
    status = {str(name).lower(): value for name, value in cur.fetchall()}
    if "binlog_snapshot_gtid_pos" in status:
        return str(status["binlog_snapshot_gtid_pos"])
    file, offset = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or offset is None:
        raise ReshardError(
            "the source server reports no Binlog_snapshot_file/position; "
            "run it with --log-bin (MariaDB 10.0 or later)"
        )
    cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, int(offset)))
    row = cur.fetchone()
    if row is None or row[0] is None:
        raise ReshardError(f"BINLOG_GTID_POS({file}, {offset}) returned nothing on the source")
    return str(row[0])


def reset_target(conn: Connection, workflow: str) -> None:
    """Remove a partial copy (after a crash mid-copy): its rows and vreplication rows."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        conn.begin()
        for table in schema.COLUMNS:
            cur.execute(f"DELETE FROM `{schema.DATABASE}`.`{table}`")
        cur.execute("DELETE FROM `_vt`.`vreplication` WHERE workflow = %s", (workflow,))
        conn.commit()
        cur.execute("SET SESSION sql_log_bin = 1")


def upgrade_vreplication(conn: Connection, workflow: str, snapshots: dict[str, str]) -> None:
    """Bring `_vt.vreplication` (maybe created by an earlier version) to the current columns;
    idempotent, and not logged (workflow bookkeeping, not a change of the keyspace).

    A copy finished before `start_pos` existed started replication at its snapshot, so a column
    added here is filled, for `workflow`, with the snapshot position per source in `snapshots`.
    """
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = '_vt' "
            "AND table_name = 'vreplication' AND column_name = 'start_pos'"
        )
        row = cur.fetchone()
        if row and row[0]:
            return
        cur.execute("SET SESSION sql_log_bin = 0")
        try:
            for statement in schema.VREPLICATION_UPGRADES:
                cur.execute(statement)
            for source, position in snapshots.items():
                cur.execute(
                    "UPDATE `_vt`.`vreplication` SET start_pos = %s "
                    "WHERE workflow = %s AND source_shard = %s AND copy_done = 1",
                    (position, workflow, source),
                )
            conn.commit()
        finally:
            cur.execute("SET SESSION sql_log_bin = 1")


def vreplication_rows(conn: Connection, workflow: str) -> dict[str, dict[str, Any]]:
    """A target's `_vt.vreplication` rows of `workflow`, by source shard, bytes decoded."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SELECT * FROM `_vt`.`vreplication` WHERE workflow = %s", (workflow,))
        return {
            row["source_shard"].decode(): {
                k: (v.decode() if isinstance(v, bytes) else v) for k, v in row.items()
            }
            for row in cur.fetchall()
        }


def holds_rows(conn: Connection) -> bool:
    """Whether any sample table of the keyspace's database holds a row."""
    counts = " + ".join(f"(SELECT COUNT(*) FROM `{t}`)" for t in schema.COLUMNS)
    with conn.cursor() as cur:
        cur.execute(f"SELECT {counts}")
        row = cur.fetchone()
        return bool(row and row[0])


@dataclass
class _Batches:
    """Copied rows waiting for each target; a flush writes them in one transaction with the
    target's vreplication row, so progress and data never disagree."""

    workflow: str
    source_shard: str
    snapshot: str
    start: ReplicationStart
    throttle: float = 0.0
    progress: Callable[[str, int], None] | None = None
    pending: dict[str, list[tuple[str, list[Any]]]] = field(default_factory=dict)

    def add(self, target: CopyTarget, table: str, values: list[Any], batch_size: int) -> None:
        batch = self.pending.setdefault(target.shard, [])
        batch.append((table, values))
        if len(batch) >= batch_size:
            self.flush(target)

    def flush(self, target: CopyTarget, done: bool = False) -> None:
        batch = self.pending.setdefault(target.shard, [])
        with target.conn.cursor() as cur:
            target.conn.begin()
            _insert_rows(cur, batch)
            target.rows_copied += len(batch)
            if done:
                for sql, args in self.start.rewind(target.key_range):
                    cur.execute(sql, args)
            cur.execute(COPY_UPSERT, self._vreplication_row(target, done))
            target.conn.commit()
        batch.clear()
        if self.progress is not None:
            self.progress(target.shard, target.rows_copied)
        if self.throttle:
            time.sleep(self.throttle)

    def _vreplication_row(self, target: CopyTarget, done: bool) -> tuple[Any, ...]:
        return (
            target.vrep_id,
            self.workflow,
            self.source_shard,
            self.start.position if done else self.snapshot,
            self.start.position if done else "",
            int(time.time()),
            "Running" if done else "Copying",
            target.rows_copied,
            1 if done else 0,
        )


def _insert_rows(cur: Any, batch: Sequence[tuple[str, list[Any]]]) -> None:
    by_table: dict[str, list[list[Any]]] = {}
    for table, params in batch:
        by_table.setdefault(table, []).append(params)
    for table, rows in by_table.items():
        for first in range(0, len(rows), 500):
            chunk = rows[first : first + 500]
            cur.execute(rowsql.insert_sql(table, len(chunk)), [p for r in chunk for p in r])


def _log_bin(targets: Sequence[CopyTarget], on: bool) -> None:
    for target in targets:
        with target.conn.cursor() as cur:
            cur.execute(f"SET SESSION sql_log_bin = {int(on)}")


def _take_snapshot(source: Connection, cur: Any) -> tuple[str, int]:
    """Open the consistent snapshot on `cur`; its source GTID position and the server's time."""
    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    with source.cursor() as status_cur:
        position = snapshot_position(status_cur)
        status_cur.execute("SELECT UNIX_TIMESTAMP()")
        now = status_cur.fetchone()
    return position, int(now[0]) if now else int(time.time())


def _route_rows(
    cur: Any,
    source_shard: str,
    targets: Sequence[CopyTarget],
    vschema: VSchema,
    batches: _Batches,
    batch_size: int,
) -> None:
    """Read every sample row of the snapshot and hand it to the targets that own it."""
    for table, columns in schema.COLUMNS.items():
        names = ", ".join(f"`{c}`" for c in columns)
        cur.execute(f"SELECT {names} FROM `{schema.DATABASE}`.`{table}`")
        for values in cur:
            row = dict(zip(columns, values, strict=True))
            ksid = vschema.keyspace_id_for(table, row)
            if ksid is None:
                raise ReshardError(f"row of {table} on {source_shard} has a NULL vindex column")
            for target in targets:
                if target.key_range.contains(ksid):
                    batches.add(target, table, list(values), batch_size)


def copy_source(
    *,
    workflow: str,
    source_shard: str,
    source: Connection,
    targets: Sequence[CopyTarget],
    vschema: VSchema,
    batch_size: int = 1000,
    throttle: float = 0.0,
    progress: Callable[[str, int], None] | None = None,
    start_position: Callable[[str, int], ReplicationStart] | None = None,
) -> str:
    """Copy the source rows each target owns; returns the snapshot's source GTID position.

    `start_position(snapshot position, snapshot time)` is called once the snapshot is taken,
    before any row is written; it says where replication will start (written as `pos` and
    `start_pos` with `copy_done`, after its rewind statements). Without it, at the snapshot.
    """
    _log_bin(targets, on=False)
    with source.cursor(pymysql.cursors.SSCursor) as cur:
        position, snapshot_time = _take_snapshot(source, cur)
        start = ReplicationStart(position)
        if start_position is not None:
            start = start_position(position, snapshot_time)
        batches = _Batches(workflow, source_shard, position, start, throttle, progress)
        _route_rows(cur, source_shard, targets, vschema, batches, batch_size)
        with contextlib.suppress(Exception):
            source.rollback()
        for target in targets:
            batches.flush(target, done=True)
    _log_bin(targets, on=True)
    return position
