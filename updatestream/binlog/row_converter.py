"""Turn the row events of one shard's transactions into `ChangeEvent`s.

A `Transaction` holds what every row of one binlog transaction shares: its GTID, the shard's
position after it, its timestamp and, for a transaction applied by filtered replication, its
source provenance. Filtered replication updates its `_vt.vreplication` row first in each
transaction it applies, so by the time the copied rows arrive the provenance is known.

`RowConverter` decides per row: `_vt` and system schemas are never emitted; tables outside the
requested list are skipped; each row's `tx_index` counts the changes to its table and primary key
earlier in the same transaction (0 for the first). A transaction copied by filtered replication
applies each key's changes in the source's order, so a change and its copy get the same index,
whatever other rows the copy left out: (origin, table, key, index) names one change wherever it
is read. The row's keyspace id comes from the table's primary vindex and decides the key-range
filter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from updatestream.binlog.config import ReaderConfig
from updatestream.binlog.errors import BinlogReadError, UnknownTable
from updatestream.binlog.events import ChangeEvent, Op, encode_row
from updatestream.core.gtid import Flavor, GTIDPosition, parse_position
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken, SourceProvenance
from updatestream.core.vschema import VSchema, VSchemaError

EventRow = tuple[Any, ...]  # a ChangeEvent's fields, in order (`ChangeEvent(*row)`)

VT_SCHEMA = "_vt"
VREPLICATION_TABLE = "vreplication"
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8")
    return str(value)


class Transaction:
    """The binlog transaction being read: shared fields of its rows and the reading progress."""

    __slots__ = ("_token", "gtid", "ordinal", "position", "seen", "source", "timestamp", "tx_index")

    def __init__(self, gtid: str, position: GTIDPosition, timestamp: int) -> None:
        self.gtid = gtid  # the transaction's own GTID, e.g. "1-1-42"
        self.position = position  # the shard's GTID position after this transaction
        self.timestamp = timestamp  # event header timestamp (source time under SET TIMESTAMP)
        self.source: SourceProvenance | None = None
        self.ordinal = 0  # rows seen so far, of every table (drives the resume skip)
        self.tx_index = 0  # rows of keyspace tables seen so far
        self.seen: dict[tuple[str, str], int] = {}  # (table, pk JSON) -> changes seen
        self._token: tuple[str, str, int] | None = None

    def provenance(self) -> tuple[str | None, str | None, int | None]:
        """Source shard, GTID position and timestamp; Nones outside filtered replication."""
        source = self.source
        if source is None:
            return None, None, None
        return source.shard, str(source.position), source.timestamp

    def token(self, shard: str) -> tuple[str, str, int]:
        """(token JSON, position text, token timestamp), computed once per transaction."""
        if self._token is None:
            timestamp = self.source.timestamp if self.source is not None else self.timestamp
            token = EventToken(timestamp, shard, self.position, self.source)
            self._token = (token.dumps(), str(self.position), timestamp)
        return self._token


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

    def convert(self, event: Any, tx: Transaction, skip: int) -> Iterator[EventRow]:
        """The events of one rows event, as tuples in `ChangeEvent` field order; rows with an
        ordinal below `skip` were already given out."""
        table = event.table
        route = self._route(event.schema, table, getattr(event, "primary_key", ()))
        rows = event.rows
        kind = _row_kind(event)
        if not route.emit or kind is None:
            self._pass_over(event, route, tx)
            return
        op, before_key, after_key = kind
        token, gtid, timestamp = tx.token(self.shard)
        source_shard, source_gtid, source_timestamp = tx.provenance()
        column, vindex_map = route.column, route.map
        key_range, everything = self.key_range, self.everything
        pk_columns = route.pk or ()
        simple = pk_columns[0] if len(pk_columns) == 1 else None
        if simple is not None and not (simple.isidentifier() and simple.isascii()):
            simple = None
        keyspace, shard = self.keyspace, self.shard
        seen = tx.seen
        for row in rows:
            ordinal = tx.ordinal
            tx.ordinal += 1
            tx.tx_index += 1
            before = row[before_key] if before_key else None
            after = row[after_key] if after_key else None
            image: dict[str, Any] = after if after is not None else before  # type: ignore[assignment]
            pk = _pk_json(pk_columns, image, simple)
            index = seen.get((table, pk), 0)
            seen[(table, pk)] = index + 1
            if ordinal < skip:
                continue
            if column is not None and column in image:
                assert vindex_map is not None
                keyspace_id = vindex_map(image[column])
            else:
                keyspace_id = self.vschema.keyspace_id_for(table, image)
            if not everything and (keyspace_id is None or not key_range.contains(keyspace_id)):
                continue
            yield (
                keyspace,
                shard,
                op,
                table,
                pk,
                None if keyspace_id is None else keyspace_id.hex(),
                None if before is None else encode_row(before),
                None if after is None else encode_row(after),
                token,
                timestamp,
                gtid,
                index,
                source_shard,
                source_gtid,
                source_timestamp,
            )

    def _pass_over(self, event: Any, route: _Route, tx: Transaction) -> None:
        """A rows event the stream does not deliver: `_vt.vreplication` gives the transaction
        its source provenance; every row still counts in the transaction's ordinals."""
        rows = event.rows
        if event.schema == VT_SCHEMA and event.table == VREPLICATION_TABLE and rows:
            self._take_provenance(event, rows[-1], tx)
        tx.ordinal += len(rows)
        if route.pk is not None:  # a keyspace table outside the stream's tables
            tx.tx_index += len(rows)

    def _take_provenance(self, event: Any, row: dict[str, Any], tx: Transaction) -> None:
        image = row.get("after_values") if isinstance(event, UpdateRowsEvent) else None
        if image is None:
            image = row.get("values")
        if not image or isinstance(event, DeleteRowsEvent):
            return
        try:
            source_shard = KeyRange.parse(_text(image["source_shard"])).name
            position = parse_position(_text(image["pos"]), self.flavor)
            timestamp = int(image.get("transaction_timestamp") or tx.timestamp)
        except Exception as exc:  # a malformed row must not silently drop provenance
            raise BinlogReadError(
                f"shard {self.shard}: _vt.vreplication row in transaction {tx.gtid} cannot be "
                f"read as filtered-replication provenance ({exc}); expected source_shard, pos "
                "and transaction_timestamp columns"
            ) from None
        tx.source = SourceProvenance(source_shard, position, timestamp)
        tx._token = None


def heartbeat(keyspace: str, token: EventToken) -> ChangeEvent:
    """The heartbeat that ends a shard's partition: the shard's end token, no row."""
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
        timestamp=token.timestamp,
        gtid=str(token.position),
        tx_index=0,
    )
