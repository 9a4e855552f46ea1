"""Turn the row events of one shard's transactions into `ChangeEvent`s.

A `Transaction` holds what every row of one binlog transaction shares: its GTID, the shard's
position after it, its timestamp and, for a transaction applied by filtered replication, its
copy marker. Filtered replication (real Vitess's vplayer, and the development cluster's, which
writes the same marker) updates its `_vt.vreplication` row as the LAST statement of each
transaction it applies (`updatestream.binlog.vreplication`), so a transaction's rows are kept
until it ends: then its Event Token, with the source provenance the marker gives, is known and
its rows are handed out. A very large transaction's rows spill to a temporary file instead of
memory.

`RowConverter` decides per row: `_vt` and system schemas are never emitted; tables outside the
requested list are skipped; each row's `tx_index` counts the changes to its table and primary key
earlier in the same transaction (0 for the first). The row's keyspace id comes from the table's
primary vindex and decides the key-range filter.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from updatestream.binlog.column_values import apply_fixes, binlog_fixes
from updatestream.binlog.config import ReaderConfig
from updatestream.binlog.errors import BinlogReadError, UnknownTable
from updatestream.binlog.events import ChangeEvent, Op, encode_row
from updatestream.binlog.vreplication import (
    VREPLICATION_TABLE,
    VT_SCHEMA,
    CopyMarker,
    MarkerError,
    read_marker,
)
from updatestream.core.gtid import Flavor, GTIDPosition
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken, SourceProvenance
from updatestream.core.vschema import VSchema, VSchemaError

EventRow = tuple[Any, ...]  # a ChangeEvent's fields, in order (`ChangeEvent(*row)`)
# a row before its transaction ended: op, table, pk, keyspace id, before, after, tx_index
PendingRow = tuple[str, str, str, str | None, str | None, str | None, int]

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
SPILL_ROWS = 20_000  # rows of one transaction kept in memory; more go to a temporary file


class Transaction:
    """The binlog transaction being read: shared fields of its rows and the reading progress."""

    __slots__ = (
        "gtid", "marker", "ordinal", "pending", "position", "seen", "spilled", "timestamp",
        "tx_index",
    )  # fmt: skip

    def __init__(self, gtid: str, position: GTIDPosition, timestamp: int) -> None:
        self.gtid = gtid  # the transaction's own GTID, e.g. "1-1-42"
        self.position = position  # the shard's position after this transaction
        self.timestamp = timestamp  # event header timestamp: the shard's own commit time
        self.marker: CopyMarker | None = None  # filtered replication's marker, once seen
        self.ordinal = 0  # rows seen so far, of every table
        self.tx_index = 0  # rows of keyspace tables seen so far
        self.seen: dict[tuple[str, str], int] = {}  # (table, pk JSON) -> changes seen
        self.pending: list[PendingRow] = []  # rows kept until the transaction ends
        self.spilled: IO[bytes] | None = None  # earlier pending rows, pickled in chunks

    def keep(self, row: PendingRow) -> None:
        self.pending.append(row)
        if len(self.pending) >= SPILL_ROWS:
            if self.spilled is None:
                self.spilled = tempfile.TemporaryFile()  # noqa: SIM115 (closed by kept())
            pickle.dump(self.pending, self.spilled, protocol=pickle.HIGHEST_PROTOCOL)
            self.pending = []

    def kept(self) -> Iterator[PendingRow]:
        """The rows kept, in order (the spilled ones first); the spill file is closed after."""
        if self.spilled is not None:
            spilled, self.spilled = self.spilled, None
            with spilled:
                spilled.seek(0)
                while True:
                    try:
                        yield from pickle.load(spilled)
                    except EOFError:
                        break
        pending, self.pending = self.pending, []
        yield from pending

    def discard(self) -> None:
        self.pending = []
        if self.spilled is not None:
            self.spilled.close()
            self.spilled = None

    def token(self, shard: str) -> EventToken:
        """The transaction's Event Token: the source's time and provenance for a copy."""
        marker = self.marker
        if marker is None:
            return EventToken(self.timestamp, shard, self.position)
        source = SourceProvenance(
            marker.source_shard, marker.position, marker.timestamp, marker.covered_from,
            marker.reverse,
        )  # fmt: skip
        return EventToken(marker.timestamp, shard, self.position, source)


class _Route:
    """How rows of one table are turned into events."""

    __slots__ = ("column", "emit", "map", "pk")

    def __init__(
        self,
        emit: bool,
        pk: tuple[str, ...] | None,
        column: str | None = None,
        map: Callable[[object], bytes | None] | None = None,
    ) -> None:
        self.emit = emit
        self.pk = pk  # primary-key columns; None for internal schemas
        self.column = column  # the primary vindex's column, when it has one column
        self.map = map  # the primary vindex's map


def _pk_json(columns: tuple[str, ...], image: dict[str, Any], simple: str | None) -> str:
    """The primary key as `encode_row` writes it; an integer key of a plain column name
    (`simple`) without the JSON encoder."""
    if simple is not None:
        value = image[simple]
        if type(value) is int:
            return f'{{"{simple}":{value}}}'
    return encode_row({c: image[c] for c in columns or tuple(image)})


def _row_kind(event: Any) -> tuple[Op, str | None, str | None] | None:
    """The op of a rows event and where its rows keep the before and after images."""
    if isinstance(event, WriteRowsEvent):
        return "insert", None, "values"
    if isinstance(event, UpdateRowsEvent):
        return "update", "before_values", "after_values"
    if isinstance(event, DeleteRowsEvent):
        return "delete", "values", None
    return None  # only the three row event kinds are requested


class RowConverter:
    """Row events of one shard -> ChangeEvents (filtered by table list and key range)."""

    def __init__(self, config: ReaderConfig, shard: str, flavor: Flavor) -> None:
        self.keyspace = config.keyspace
        self.shard = shard
        self.flavor = flavor
        self.vschema = VSchema.from_json(config.vschema_json, keyspace=config.keyspace)
        self.key_range = KeyRange.parse(config.key_range)
        self.everything = self.key_range.is_complete
        self.tables = frozenset(config.tables)
        self.database = config.database
        self._routes: dict[tuple[str, str], _Route] = {}

    def _route(self, schema: str, table: str, primary_key: Any) -> _Route:
        key = (schema, table)
        route = self._routes.get(key)
        if route is not None:
            return route
        internal = schema == VT_SCHEMA or schema in SYSTEM_SCHEMAS
        if internal or (self.database is not None and schema != self.database):
            route = _Route(False, None)
        elif self.tables and table not in self.tables:
            route = _Route(False, ())  # a keyspace table this stream does not want
        else:
            try:
                primary = self.vschema.primary_vindex(table)
            except VSchemaError as exc:
                raise UnknownTable(
                    f"shard {self.shard} of keyspace {self.keyspace} changed table "
                    f"{schema}.{table}, which has no primary vindex: {exc}; add it to the "
                    "VSchema or list the wanted tables in the stream's tables"
                ) from None
            if isinstance(primary_key, str):
                pk: tuple[str, ...] = (primary_key,) if primary_key else ()
            else:
                pk = tuple(primary_key or ())
            single = primary.columns[0] if len(primary.columns) == 1 else None
            route = _Route(True, pk, single, primary.vindex.map)
        self._routes[key] = route
        return route

    def convert(self, event: Any, tx: Transaction) -> None:
        """Keep the rows of one rows event that the stream delivers, until the transaction
        ends (`finish`)."""
        table = event.table
        route = self._route(event.schema, table, getattr(event, "primary_key", ()))
        kind = _row_kind(event)
        if not route.emit or kind is None:
            self._pass_over(event, route, tx)
            return
        op, before_key, after_key = kind
        column, vindex_map = route.column, route.map
        key_range, everything = self.key_range, self.everything
        pk_columns = route.pk or ()
        simple = pk_columns[0] if len(pk_columns) == 1 else None
        if simple is not None and not (simple.isidentifier() and simple.isascii()):
            simple = None
        seen, keep = tx.seen, tx.keep
        fixes = binlog_fixes(event.columns)
        for row in event.rows:
            tx.ordinal += 1
            tx.tx_index += 1
            before = row[before_key] if before_key else None
            after = row[after_key] if after_key else None
            if fixes:
                apply_fixes(before, fixes)
                apply_fixes(after, fixes)
            image: dict[str, Any] = after if after is not None else before  # type: ignore[assignment]
            pk = _pk_json(pk_columns, image, simple)
            index = seen.get((table, pk), 0)
            seen[(table, pk)] = index + 1
            if column is not None and column in image:
                assert vindex_map is not None
                keyspace_id = vindex_map(image[column])
            else:
                keyspace_id = self.vschema.keyspace_id_for(table, image)
            if not everything and (keyspace_id is None or not key_range.contains(keyspace_id)):
                continue
            keep(
                (
                    op, table, pk, None if keyspace_id is None else keyspace_id.hex(),
                    None if before is None else encode_row(before),
                    None if after is None else encode_row(after), index,
                )
            )  # fmt: skip

    def finish(self, tx: Transaction) -> Iterator[EventRow]:
        """The rows of an ended transaction as tuples in `ChangeEvent` field order, with its
        Event Token (and the source provenance its copy marker gives)."""
        token = tx.token(self.shard)
        text, gtid, timestamp = token.dumps(), str(tx.position), token.timestamp
        source = token.source
        source_shard = source.shard if source is not None else None
        source_gtid = str(source.position) if source is not None else None
        source_timestamp = source.timestamp if source is not None else None
        keyspace, shard = self.keyspace, self.shard
        for op, table, pk, ksid, before, after, index in tx.kept():
            yield (
                keyspace, shard, op, table, pk, ksid, before, after, text, timestamp, gtid,
                index, source_shard, source_gtid, source_timestamp,
            )  # fmt: skip

    def _pass_over(self, event: Any, route: _Route, tx: Transaction) -> None:
        """A rows event the stream does not deliver: a `_vt.vreplication` update gives the
        transaction its copy marker; every row still counts in the transaction's ordinals."""
        rows = event.rows
        vreplication = event.schema == VT_SCHEMA and event.table == VREPLICATION_TABLE
        if vreplication and isinstance(event, UpdateRowsEvent) and rows:
            self._take_marker(rows[-1], tx)
        tx.ordinal += len(rows)
        if route.pk is not None:  # a keyspace table outside the stream's tables
            tx.tx_index += len(rows)

    def _take_marker(self, row: dict[str, Any], tx: Transaction) -> None:
        try:
            marker = read_marker(
                row.get("before_values"), row["after_values"], self.flavor,
                fallback_timestamp=tx.timestamp,
            )  # fmt: skip
        except (MarkerError, KeyError, ValueError) as exc:
            raise BinlogReadError(
                f"shard {self.shard}: the _vt.vreplication update in transaction {tx.gtid} "
                f"cannot be read as filtered replication's copy marker ({exc}); expected the "
                "pos, source, workflow and transaction_timestamp columns Vitess writes"
            ) from None
        if marker is not None:
            tx.marker = marker


def heartbeat(keyspace: str, token: EventToken, cap: int | None = None) -> ChangeEvent:
    """The heartbeat that ends a shard's partition: the shard's end token, no row; its time
    at most `cap` when given (the token keeps the shard's own)."""
    return ChangeEvent(
        keyspace=keyspace,
        shard=token.shard,
        op="heartbeat",
        table=None,
        pk=None,
        keyspace_id=None,
        before=None,
        after=None,
        token=token.dumps(),
        timestamp=token.timestamp if cap is None else min(token.timestamp, cap),
        gtid=str(token.position),
        tx_index=0,
    )
