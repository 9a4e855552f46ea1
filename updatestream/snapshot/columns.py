"""The snapshot's fast path: the shard writes each row's JSON, the worker handles whole columns.

A row read with SELECT must encode to exactly the JSON text the binlog's image of it encodes to
(`encode_row`: compact, columns in table order, DECIMAL as a string, DATETIME as ISO text, BLOB
as `{"$base64": ...}`, SET as a sorted label list, non-ASCII as `\\uXXXX`). Doing that per row
in Python costs more than the read. Instead the chunk's SELECT asks the shard to build the text
(`CONCAT` of per-column fragments: `JSON_QUOTE` for text, `DATE_FORMAT` for DATETIME, ...) and
returns three things per row: the primary key's JSON, the row's JSON and the primary vindex's
column. The worker reads them as Arrow columns (connectorx, straight from the wire into Arrow;
pymysql when the shard needs TLS), maps keyspace ids over the whole column (one DES call for the
hash vindex), filters by key range with numpy, and re-encodes in Python only the few rows whose
text holds characters JSON_QUOTE leaves as they are but Python escapes (non-ASCII, DEL).

Tables with a column type the shard cannot encode exactly (FLOAT, DOUBLE, TIME, TIMESTAMP, BIT,
BINARY(n), spatial types) take the row path in `chunks`.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pymysql
from pymysql.converters import escape_item, escape_string

from updatestream.binlog.config import ReaderConfig, ShardEndpoint
from updatestream.binlog.errors import ShardUnreachable
from updatestream.binlog.session import connection_settings, describe
from updatestream.core.keyrange import KeyRange
from updatestream.core.vindexes.hash import hash_blocks
from updatestream.core.vschema import VSchema
from updatestream.snapshot.tables import TableInfo, quote

_INTS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"})
_TEXTS = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"})
_BLOBS = frozenset({"varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_PRINTABLE_ONLY = r"^[ -~]*$"


def _literal(text: str) -> str:
    return "'" + escape_string(text) + "'"


def _fragment(name: str, data_type: str, column_type: str) -> str | None:
    """SQL for one column's JSON value text (never NULL), or None when it cannot be exact."""
    col = quote(name)
    if data_type in _INTS:
        value = f"CONCAT({col})"
    elif data_type == "decimal":
        value = f"CONCAT('\"', {col}, '\"')"
    elif data_type in _TEXTS or (data_type == "longtext" and "json" in column_type):
        value = f"JSON_QUOTE({col})"
    elif data_type == "json":  # MySQL's: its text, as the binlog's document is written out
        value = f"JSON_QUOTE(CAST({col} AS CHAR))"
    elif data_type in _BLOBS:
        value = f"CONCAT('{{\"$base64\":\"', REPLACE(TO_BASE64({col}), '\\n', ''), '\"}}')"
    elif data_type == "datetime":
        whole = f"DATE_FORMAT({col}, '%Y-%m-%dT%H:%i:%s')"
        value = f"CONCAT('\"', IF(MICROSECOND({col}) = 0, {whole}, CONCAT({whole}, '.', "
        value += f"LPAD(MICROSECOND({col}), 6, '0'))), '\"')"
    elif data_type == "date":
        value = f"CONCAT('\"', {col}, '\"')"
    elif data_type == "set":
        labels = sorted(_set_labels(column_type))
        parts = ", ".join(
            f"IF(FIND_IN_SET({_literal(label)}, {col}), {_literal(json.dumps(label))}, NULL)"
            for label in labels
        )
        return f"IF({col} IS NULL OR {col} = '', 'null', CONCAT('[', CONCAT_WS(',', {parts}), ']'))"
    else:
        return None
    return f"IFNULL({value}, 'null')"


def _set_labels(column_type: str) -> list[str]:
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return [part.strip()[1:-1].replace("''", "'") for part in inner.split(",")]


@dataclass(frozen=True)
class ColumnarQuery:
    """The SELECT that makes the shard encode a chunk's rows (see the module doc)."""

    table: TableInfo
    vindex_columns: tuple[str, ...]

    def sql(self, where: str, args: Sequence[Any]) -> str:
        def obj(names: Sequence[str]) -> str:
            parts: list[str] = []
            for index, name in enumerate(names):
                prefix = ("," if index else "{") + json.dumps(name) + ":"
                data_type, column_type = self.table.types[name]
                fragment = _fragment(name, data_type, column_type)
                assert fragment is not None
                parts += [_literal(prefix), fragment]
            return f"CONCAT({', '.join(parts)}, '}}')"

        vindex = ", ".join(f"CAST({quote(c)} AS CHAR) AS _v{i}" for i, c in
                           enumerate(self.vindex_columns))  # fmt: skip
        pieces = where.split("%s")  # the key bounds, inlined (connectorx takes no arguments)
        assert len(pieces) == len(args) + 1
        bound = pieces[0]
        for arg, piece in zip(args, pieces[1:], strict=True):
            bound += escape_item(arg, "utf8mb4") + piece
        return (
            f"SELECT {obj(self.table.key_names)} AS _pk, {obj(self.table.columns)} AS _row, "
            f"{vindex} FROM {self.table.qualified} WHERE {bound}"
        )


def columnar_query(info: TableInfo, vschema: VSchema) -> ColumnarQuery | None:
    """The fast-path query of a table, or None when a column needs the row path."""
    for name in info.columns:
        data_type, column_type = info.types[name]
        if _fragment(name, data_type, column_type) is None:
            return None
    primary = vschema.primary_vindex(info.name)
    return ColumnarQuery(info, tuple(primary.columns))


# The shard accounts this process logged in with once (host, port, user): connectorx's pool
# retries a refused login for 30 s before it raises, so each account is tried first with one
# plain connection, which fails at once with the server's own reason.
_LOGGED_IN: set[tuple[str, int, str]] = set()


def _check_login(endpoint: ShardEndpoint, settings: dict[str, Any]) -> None:
    account = (endpoint.host, endpoint.port, str(settings["user"]))
    if account in _LOGGED_IN:
        return
    try:
        pymysql.connect(**settings).close()
    except pymysql.MySQLError as exc:
        raise _unreachable(endpoint, describe(exc)) from None
    _LOGGED_IN.add(account)


def _unreachable(endpoint: ShardEndpoint, reason: str) -> ShardUnreachable:
    return ShardUnreachable(
        f"cannot read a snapshot chunk from {endpoint.describe()}: {reason}; check that the "
        f"shard is up and that Secret {endpoint.secret!r} holds a user with SELECT on the "
        "keyspace's tables"
    )


def fetch(endpoint: ShardEndpoint, config: ReaderConfig, sql: str) -> pa.Table:
    """Run `sql` on the shard and return its result as an Arrow table of text columns."""
    settings = connection_settings(endpoint, config)
    if endpoint.tls == "disabled":
        import connectorx

        _check_login(endpoint, settings)

        user = urllib.parse.quote(str(settings["user"]), safe="")
        password = urllib.parse.quote(str(settings["password"]), safe="")
        url = f"mysql://{user}:{password}@{endpoint.host}:{endpoint.port}/information_schema"
        try:
            table: pa.Table = connectorx.read_sql(url, sql, return_type="arrow")
        except Exception as exc:  # connectorx raises plain RuntimeErrors; keep secrets out
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            for secret in {password, str(settings["password"])}:
                text = text.replace(secret, "***") if secret else text
            raise _unreachable(endpoint, text[:300]) from None
        return table
    conn = pymysql.connect(autocommit=True, cursorclass=pymysql.cursors.SSCursor, **settings)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
    finally:
        conn.close()
    columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] or [[] for _ in names]
    arrays = [pa.array(c, type=pa.string()) for c in columns]
    return pa.table(dict(zip(names, arrays, strict=True)))


def _python_json(text: str) -> str:
    return json.dumps(json.loads(text), separators=(",", ":"))


def exact_text(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """`column` with every text that holds a character outside printable ASCII re-encoded as
    Python's `json.dumps` writes it (the shard's JSON_QUOTE leaves those characters raw)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    array = array.cast(pa.string())
    plain = pc.match_substring_regex(array, _PRINTABLE_ONLY)
    if pc.all(plain).as_py() is not False:
        return array
    values = array.to_pylist()
    for index in np.flatnonzero(~np.asarray(plain.to_numpy(zero_copy_only=False), dtype=bool)):
        values[index] = _python_json(values[index])
    return pa.array(values, type=pa.string())


def keyspace_ids(
    info: TableInfo, vschema: VSchema, columns: Sequence[pa.ChunkedArray], wanted: KeyRange
) -> tuple[np.ndarray, pa.Array]:
    """(mask of rows in `wanted`, keyspace id hex per row) from the vindex columns' text."""
    primary = vschema.primary_vindex(info.name)
    if len(columns) == 1 and primary.vindex.type_name == "hash":
        found = _hashed(columns[0], wanted)
        if found is not None:
            return found
    raw: list[list[Any]] = []
    for name, column in zip(primary.columns, columns, strict=True):
        values = column.to_pylist()
        if info.types[name][0] in _INTS:
            values = [None if v is None else int(v) for v in values]
        raw.append(values)
    if len(raw) == 1:
        ids = [primary.vindex.map(v) for v in raw[0]]
    else:
        ids = [primary.vindex.map(tuple(row)) for row in zip(*raw, strict=True)]
    contains = wanted.contains
    mask = np.fromiter((i is not None and contains(i) for i in ids), dtype=bool, count=len(ids))
    return mask, pa.array([None if i is None else i.hex() for i in ids], type=pa.string())


def _bound(value: bytes, default: int) -> int | None:
    if not value:
        return default
    if len(value) > 8:
        return None
    return int.from_bytes(value.ljust(8, b"\0"), "big")


def _hashed(column: pa.ChunkedArray, wanted: KeyRange) -> tuple[np.ndarray, pa.Array] | None:
    """The hash vindex over a whole column (one DES call); None when a value is NULL, negative
    or not an integer, or a bound is longer than 8 bytes: the row-by-row path then decides (and
    names the bad value)."""
    low, high = _bound(wanted.start, 0), _bound(wanted.end, 1 << 64)
    if low is None or high is None or column.null_count:
        return None
    try:
        numbers = pc.cast(column, pa.uint64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    blocks = np.ascontiguousarray(numbers.astype(">u8")).tobytes()
    encrypted = hash_blocks(blocks)
    ids = np.frombuffer(encrypted, dtype=">u8").astype(np.uint64)
    mask = (ids >= np.uint64(low)) & ((ids < np.uint64(high)) if high < (1 << 64) else True)
    text = encrypted.hex()
    hexes = pa.array([text[i : i + 16] for i in range(0, len(text), 16)], type=pa.string())
    return np.asarray(mask, dtype=bool), hexes
