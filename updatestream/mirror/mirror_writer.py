"""Apply-if-newer in bulk: a batch of mirror changes into the mirror tables.

Per table, in one transaction:

1. the stored tokens of the batch's keys are read in bulk (``SELECT ... WHERE pk IN (...) FOR
   UPDATE``, 1000 keys a statement) to count what is older, equal or of unknown order;
2. the changes newer than what is stored (or of unknown order, see ``order``) are written with
   multi-row ``INSERT ... ON DUPLICATE KEY UPDATE``, every assignment guarded by the order
   rule (``order.update_assignments``): a change never moves a row backward, whatever another
   writer did between the read and the write, and a replayed batch changes nothing.

A delete writes a tombstone: the key, the token, ``_us_deleted = 1`` and NULL elsewhere; a
later-arriving older insert of the key compares older and is ignored. :meth:`purge` deletes
tombstones whose origin timestamp is older than the horizon.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysql.constants import SERVER_STATUS
from pymysql.converters import escape_string

from updatestream.binlog.events import encode_value
from updatestream.mirror.changes import Change, Collapsed, key_of
from updatestream.mirror.mirror_tables import (
    INTERNAL_PREFIX,
    MirrorSchemaError,
    SourceSchemas,
    TableSchema,
    add_columns_sql,
    check_name,
    create_table_sql,
    differences,
    read_table,
    source_columns,
    view_sql,
)
from updatestream.mirror.order import (
    ROW_ALIAS,
    Order,
    Verdict,
    classify,
    ignore_cause,
    update_assignments,
)
from updatestream.mirror.values import to_sql

Connect = Callable[[], Any]
READ_CHUNK = 1000
WRITE_CHUNK = 2000  # rows per INSERT statement (well below max_allowed_packet for most rows)
_DUPLICATE_COLUMN = 1060  # ER_DUP_FIELDNAME: ALTER TABLE ... ADD COLUMN of a column it has
PROVENANCE = ("_us_deleted", "_us_gtid", "_us_read_from")
TOKEN_COLUMNS = (*PROVENANCE, "_us_idx", "_us_seq", "_us_shard", "_us_ts")  # after a row's data


@dataclass
class ApplyResult:
    applied: int = 0  # rows written (upserts and tombstones)
    tombstones: int = 0  # of which tombstones
    ignored: Counter[str] = field(default_factory=Counter)  # by cause: older, equal, superseded
    unknown: int = 0  # applied although their order against the stored row is unknown

    def add(self, other: ApplyResult) -> None:
        self.applied += other.applied
        self.tombstones += other.tombstones
        self.ignored.update(other.ignored)
        self.unknown += other.unknown


def without_gap_locks(conn: Any) -> Any:
    """`conn` in READ COMMITTED: the bulk read of stored tokens (`FOR UPDATE`) then locks the
    rows it finds, not the gaps around the keys it does not; two writers of one mirror (two
    Spark tasks of a batch) inserting interleaved new keys would otherwise each hold the gap
    the other inserts into, a deadlock (every chunk of a snapshot's two shards met it). The
    guarded upserts need no more (see the module). Left as it is on a server that logs
    statements (`binlog_format=STATEMENT`), where InnoDB refuses READ COMMITTED writes."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@SESSION.binlog_format")
        (binlog_format,) = cur.fetchone()
        if str(binlog_format).upper() != "STATEMENT":
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


class MirrorWriter:
    """Writes changes into ``<database>.<prefix><table>`` tables (see the module)."""

    def __init__(
        self,
        connect: Connect,
        sources: SourceSchemas,
        *,
        database: str,
        prefix: str = "",
        where: str = "mirror",
    ) -> None:
        self.connect = connect
        self.sources = sources
        self.database = check_name(database, "database")
        self.prefix = prefix
        self.where = where
        self._conn: Any = None
        self._tables: dict[str, TableSchema] = {}  # source table -> the mirror's source columns

    # -- connection -------------------------------------------------------------------------

    @property
    def conn(self) -> Any:
        if self._conn is None:
            self._conn = without_gap_locks(self.connect())
        return self._conn

    @property
    def flavor(self) -> str:
        """The mirror server's flavor, from its version string."""
        return "mariadb" if "mariadb" in str(self.conn.get_server_info()).lower() else "mysql"

    @property
    def row_alias(self) -> str | None:
        """How the upsert names the incoming row: MySQL's row alias, MariaDB's ``VALUES()``."""
        return None if self.flavor == "mariadb" else ROW_ALIAS

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection is closed all the same
                self._conn.close()
            self._conn = None

    def create_database(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.database}` CHARACTER SET utf8mb4")
        self.conn.commit()

    # -- tables -----------------------------------------------------------------------------

    def mirror_name(self, table: str) -> str:
        name = check_name(f"{self.prefix}{table}", "mirror table")
        check_name(f"{name}_live", "mirror view")
        return name

    def table(self, table: str, columns: Iterable[str] = ()) -> TableSchema:
        """The mirror table of source ``table``, created or checked, with ``columns``."""
        known = self._tables.get(table)
        wanted = set(columns)
        if known is not None and wanted <= set(known.names):
            return known
        if known is not None:
            self.sources.forget(table)  # columns appeared: read the source schema again
        self._tables[table] = self._prepare(table)
        missing = wanted - set(self._tables[table].names)
        if missing:
            raise MirrorSchemaError(
                f"{self.where}: table {table}: events carry columns {sorted(missing)} that "
                f"source table {table} does not have; check the sink's source database"
            )
        return self._tables[table]

    def _prepare(self, table: str) -> TableSchema:
        """`_prepare_once`, and again once when another writer of the mirror (a Spark task of
        the same batch) added the same new column between this one's read and its ALTER."""
        try:
            return self._prepare_once(table)
        except pymysql.err.MySQLError as exc:
            if not (exc.args and exc.args[0] == _DUPLICATE_COLUMN):
                raise
            return self._prepare_once(table)

    def _prepare_once(self, table: str) -> TableSchema:
        source = self.sources.table(table)
        mirror = self.mirror_name(table)
        where = f"{self.where}: mirror table {self.database}.{mirror}"
        with self.conn.cursor() as cur:
            found = read_table(cur, self.database, mirror)
            if found is None:
                cur.execute(create_table_sql(self.database, mirror, source, self.flavor))
                cur.execute(view_sql(self.database, mirror, source.names))
                return source
            current = source_columns(found)
            added = differences(current, source, where)
            if added:
                cur.execute(add_columns_sql(self.database, mirror, added, self.flavor))
                current = TableSchema(
                    current.name, current.columns + tuple(added), source.primary_key
                )
                cur.execute(view_sql(self.database, mirror, current.names))
            return current

    def check_rows(self, schema: TableSchema, table: str, changes: Sequence[Change]) -> None:
        """An upsert that lacks a mirror column is fine when the source still has the column
        (a change from before it was added: the column keeps its value, or gets the
        default); when the source dropped it, writing NULL there would be a silent wrong
        value, so it is an error."""
        names = set(schema.names)
        lacking = {c for ch in changes if ch.row is not None for c in names - ch.row.keys()}
        if not lacking:
            return
        self.sources.forget(table)
        dropped = sorted(c for c in lacking if self.sources.table(table).column(c) is None)
        if dropped:
            raise MirrorSchemaError(
                f"{self.where}: table {table}: source table {table} no longer has columns "
                f"{dropped} (dropped at the source); drop them from mirror table "
                f"{self.database}.{self.mirror_name(table)} (ALTER TABLE ... DROP COLUMN) "
                "and restart the stream"
            )

    # -- applying ---------------------------------------------------------------------------

    def apply(self, batch: Collapsed) -> ApplyResult:
        """Write a collapsed batch; one transaction per table, committed in turn."""
        result = ApplyResult(ignored=Counter(batch.ignored), unknown=batch.unknown)
        by_table: dict[str, list[Change]] = {}
        for change in batch.changes.values():
            by_table.setdefault(change.table, []).append(change)
        for table, changes in sorted(by_table.items()):
            columns = {c for change in changes if change.row is not None for c in change.row}
            schema = self.table(table, columns)
            self.check_rows(schema, table, changes)
            try:
                result.add(self._apply_table(table, schema, changes))
                self.conn.commit()
            except BaseException:
                self._rollback()
                raise
        return result

    def _rollback(self) -> None:
        try:
            if self._conn is not None:
                self._conn.rollback()
        except Exception:  # the connection is dropped instead
            self.close()

    def _apply_table(self, table: str, schema: TableSchema, changes: list[Change]) -> ApplyResult:
        result = ApplyResult()
        stored = self._stored_orders(table, schema, changes)
        winners: list[Change] = []
        for change in changes:
            held = stored.get(change.key[1])
            verdict = Verdict.NEWER if held is None else classify(change.order, held)
            if verdict.applies:
                winners.append(change)
                result.unknown += verdict is Verdict.UNKNOWN
            else:
                result.ignored[ignore_cause(verdict, change.order)] += 1
        self._write(table, schema, winners)
        result.applied = len(winners)
        result.tombstones = sum(1 for c in winners if c.row is None)
        return result

    def _stored_orders(
        self, table: str, schema: TableSchema, changes: list[Change]
    ) -> dict[tuple[Any, ...], Order]:
        pk = schema.primary_key
        types = [_data_type(schema, c) for c in pk]
        target = f"`{self.database}`.`{self.mirror_name(table)}`"
        columns = ", ".join(f"`{c}`" for c in pk)
        found: dict[tuple[Any, ...], Order] = {}
        with self.conn.cursor() as cur:
            for start in range(0, len(changes), READ_CHUNK):
                chunk = changes[start : start + READ_CHUNK]
                keys = [
                    [to_sql(c.pk.get(col), t) for col, t in zip(pk, types, strict=True)]
                    for c in chunk
                ]
                if len(pk) == 1:
                    where = f"`{pk[0]}` IN ({', '.join(['%s'] * len(keys))})"
                    params: list[Any] = [k[0] for k in keys]
                else:
                    one = "(" + ", ".join(["%s"] * len(pk)) + ")"
                    where = f"({columns}) IN ({', '.join([one] * len(keys))})"
                    params = [v for k in keys for v in k]
                cur.execute(
                    f"SELECT {columns}, `_us_ts`, `_us_shard`, `_us_seq`, `_us_idx` "
                    f"FROM {target} WHERE {where} FOR UPDATE",
                    params,
                )
                for row in cur.fetchall():
                    n = len(pk)
                    ts, shard, seq, idx = row[n:]
                    key = key_of(table, dict(zip(pk, map(encode_value, row[:n]), strict=True)))
                    found[key[1]] = Order(int(ts), str(shard), int(seq), int(idx))
        return found

    def _write(self, table: str, schema: TableSchema, changes: list[Change]) -> None:
        """Multi-row guarded upserts, one statement list per set of columns the rows carry
        (every column, except changes from before a column was added)."""
        groups: dict[tuple[str, ...], list[Change]] = {}
        for change in changes:
            present = schema.names
            if change.row is not None and not set(present) <= change.row.keys():
                present = tuple(c for c in present if c in change.row)
            groups.setdefault(present, []).append(change)
        for data, members in groups.items():
            self._write_group(table, schema, list(data), members)

    def _write_group(
        self, table: str, schema: TableSchema, data: list[str], changes: list[Change]
    ) -> None:
        names = [*data, *TOKEN_COLUMNS]
        listed = ", ".join(f"`{n}`" for n in names)
        mirror = self.mirror_name(table)
        head = f"INSERT INTO `{self.database}`.`{mirror}` ({listed}) VALUES "
        alias = self.row_alias
        assignments = update_assignments([*data, *PROVENANCE], alias, mirror if alias else None)
        tail = f" ON DUPLICATE KEY UPDATE {assignments}"
        if alias:
            tail = f" AS `{alias}`" + tail
        types = [_data_type(schema, c) for c in data]
        literal = _Literals(self.conn)
        with self.conn.cursor() as cur:
            for start in range(0, len(changes), WRITE_CHUNK):
                rows = (
                    literal.row(_values(change, data, types))
                    for change in changes[start : start + WRITE_CHUNK]
                )
                cur.execute(head + ", ".join(rows) + tail)

    # -- tombstones -------------------------------------------------------------------------

    def purge(self, horizon_seconds: int, now: float | None = None) -> int:
        """Delete tombstones whose origin timestamp is more than ``horizon_seconds`` old, in
        every mirror table this writer knows; returns how many."""
        below = int((time.time() if now is None else now) - horizon_seconds)
        purged = 0
        for table in sorted(self._tables):
            target = f"`{self.database}`.`{self.mirror_name(table)}`"
            while True:
                with self.conn.cursor() as cur:
                    count = cur.execute(
                        f"DELETE FROM {target} WHERE `_us_deleted` = 1 AND `_us_ts` < %s "
                        "LIMIT 5000",
                        (below,),
                    )
                self.conn.commit()
                purged += count
                if count < 5000:
                    break
        return purged


class _Literals:
    """SQL literals of parameters: the driver's escaping, with a short path for integers and
    text (a batch has a dozen values per row)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        # text is escaped with backslashes unless the server's sql_mode says otherwise
        no_backslash = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES
        self.plain_text = not (conn.server_status & no_backslash)

    def value(self, value: Any) -> str:
        kind = type(value)
        if kind is int:
            return str(value)
        if value is None:
            return "NULL"
        if kind is str and self.plain_text:
            return "'" + escape_string(value) + "'"
        return str(self.conn.escape(value))

    def row(self, values: Iterable[Any]) -> str:
        return "(" + ", ".join(map(self.value, values)) + ")"


def _data_type(schema: TableSchema, name: str) -> str:
    column = schema.column(name)
    return column.data_type if column is not None else ""


def _values(change: Change, data: list[str], types: list[str]) -> tuple[Any, ...]:
    image = change.row if change.row is not None else change.pk
    values = [to_sql(image.get(c), t) for c, t in zip(data, types, strict=True)]
    return (*values, *token_values(change))


def token_values(change: Change) -> tuple[Any, ...]:
    """The values of :data:`TOKEN_COLUMNS` for `change`: whether it deletes the row, its
    provenance, then its order token."""
    order = change.order
    deleted = 1 if change.row is None else 0
    return (deleted, change.gtid, change.read_from, order.idx, order.seq, order.shard, order.ts)


__all__ = ["INTERNAL_PREFIX", "TOKEN_COLUMNS", "ApplyResult", "MirrorWriter", "token_values"]
