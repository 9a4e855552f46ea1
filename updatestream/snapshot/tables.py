"""What the snapshot needs to know of a table on a shard, and the SQL that reads it by key.

`TableInfo` holds a table's columns in table order (the order of a binlog row image), its
primary-key columns, and how values are converted so that a row read with SELECT encodes to the
same JSON as the binlog's image of it (SET columns come back as "a,b" text and become sorted
label lists, as the binlog decodes them).

Key order: integer keys are compared as numbers; character keys are read in binary (code point)
order, `COLLATE <charset>_bin`, which is the order Python compares strings in, so the snapshot's
frontiers mean the same on the shard and in the binlog filter. A binary-ordered read of a key
with a case-insensitive collation cannot use the primary index; such tables cost one scan per
chunk (docs/snapshot.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from updatestream.binlog.session import ShardSession
from updatestream.core.errors import UpdateStreamError
from updatestream.core.snapshot_plan import Key

_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_STRING_TYPES = frozenset({"char", "varchar"})


class SnapshotTableError(UpdateStreamError):
    """A table cannot be snapshotted as asked (missing, no primary key, an unsupported key)."""


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class KeyColumn:
    name: str
    kind: str  # "int" or "str"
    collation: str | None  # a character key's collation


@dataclass(frozen=True)
class TableInfo:
    database: str
    name: str
    columns: tuple[str, ...]
    key: tuple[KeyColumn, ...]
    set_columns: frozenset[str] = frozenset()
    types: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # DATA_TYPE, COLUMN_TYPE

    @property
    def qualified(self) -> str:
        return f"{quote(self.database)}.{quote(self.name)}"

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.key)

    def _ordered(self, column: KeyColumn) -> str:
        if column.kind == "str" and column.collation and not column.collation.endswith("_bin"):
            charset = column.collation.split("_", 1)[0]
            return f"{quote(column.name)} COLLATE {charset}_bin"
        return quote(column.name)

    def order_by(self, descending: bool = False) -> str:
        direction = " DESC" if descending else ""
        return ", ".join(self._ordered(k) + direction for k in self.key)

    def above(self, key: Key) -> tuple[str, list[Any]]:
        """A predicate `key > given` in the snapshot's key order, with its arguments."""
        return self._compare(key, ">")

    def at_most(self, key: Key) -> tuple[str, list[Any]]:
        """A predicate `key <= given` in the snapshot's key order, with its arguments."""
        return self._compare(key, "<=")

    def _compare(self, key: Key, op: str) -> tuple[str, list[Any]]:
        # (a, b) > (x, y) spelled out so that the optimizer can use the index range:
        # a > x OR (a = x AND b > y); for <=: a < x OR (a = x AND b <= y).
        strict = "<" if op == "<=" else ">"
        terms, args = [], []
        for index, column in enumerate(self.key):
            equal = [f"{self._ordered(c)} = %s" for c in self.key[:index]]
            last_op = op if index == len(self.key) - 1 else strict
            terms.append(" AND ".join([*equal, f"{self._ordered(column)} {last_op} %s"]))
            args += [*key[:index], key[index]]
        return "(" + " OR ".join(f"({t})" for t in terms) + ")", args

    def key_of_row(self, row: dict[str, Any]) -> Key:
        return tuple(row[name] for name in self.key_names)


def describe_table(session: ShardSession, database: str, table: str) -> TableInfo:
    """Columns, key and conversions of `database.table` on the session's shard."""
    rows = session.query(
        "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLLATION_NAME FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    if not rows:
        raise SnapshotTableError(
            f"table {database}.{table} does not exist on {session.endpoint.describe()}; "
            "check the stream's tables and database"
        )
    key_rows = session.query(
        "SELECT k.COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE k WHERE k.TABLE_SCHEMA = %s"
        " AND k.TABLE_NAME = %s AND k.CONSTRAINT_NAME = 'PRIMARY' ORDER BY k.ORDINAL_POSITION",
        (database, table),
    )
    types = {str(name): (str(kind).lower(), collation) for name, kind, _, collation in rows}
    full = {str(name): (str(kind).lower(), str(ctype).lower()) for name, kind, ctype, _ in rows}
    if not key_rows:
        raise SnapshotTableError(
            f"table {database}.{table} has no primary key; the snapshot reads tables in "
            "primary-key order: add a primary key or leave the table out of the stream's tables"
        )
    key = []
    for (name,) in key_rows:
        kind, collation = types[str(name)]
        if kind in _INTEGER_TYPES:
            key.append(KeyColumn(str(name), "int", None))
        elif kind in _STRING_TYPES:
            key.append(KeyColumn(str(name), "str", None if collation is None else str(collation)))
        else:
            raise SnapshotTableError(
                f"table {database}.{table}: primary-key column {name} is {kind}; the snapshot "
                "chunks by integer or character keys only"
            )
    return TableInfo(
        database=database,
        name=table,
        columns=tuple(str(r[0]) for r in rows),
        key=tuple(key),
        set_columns=frozenset(name for name, (kind, _) in types.items() if kind == "set"),
        types=full,
    )


def _key_values(info: TableInfo, row: Sequence[Any]) -> Key:
    return tuple(
        value.decode("utf-8") if isinstance(value, bytes) and column.kind == "str" else value
        for value, column in zip(row, info.key, strict=True)
    )


def last_key(session: ShardSession, info: TableInfo) -> Key | None:
    """The highest key of the table on the shard now; None when the table is empty."""
    names = ", ".join(quote(n) for n in info.key_names)
    rows = session.query(
        f"SELECT {names} FROM {info.qualified} ORDER BY {info.order_by(descending=True)} LIMIT 1"
    )
    return _key_values(info, rows[0]) if rows else None


def chunk_upper(
    session: ShardSession, info: TableInfo, after: Key | None, rows: int, last: Key
) -> Key:
    """The upper bound of the chunk of `rows` keys after `after` (the last key at most)."""
    names = ", ".join(quote(n) for n in info.key_names)
    where, args = info.at_most(last)
    if after is not None:
        above, more = info.above(after)
        where, args = f"{above} AND {where}", more + args
    found = session.query(
        f"SELECT {names} FROM {info.qualified} WHERE {where} ORDER BY {info.order_by()} "
        f"LIMIT 1 OFFSET {max(0, rows - 1)}",
        args,
    )
    return _key_values(info, found[0]) if found else last


def estimated_rows(session: ShardSession, info: TableInfo) -> int:
    """The server's row estimate for the table (information_schema; cheap, approximate)."""
    rows = session.query(
        "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s",
        (info.database, info.name),
    )
    return int(rows[0][0] or 0) if rows else 0


def convert_row(info: TableInfo, columns: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    """A SELECTed row as the binlog decodes it (column -> value, in table order)."""
    row = dict(zip(columns, values, strict=True))
    for name in info.set_columns:
        value = row.get(name)
        if isinstance(value, str | bytes):
            text = value.decode() if isinstance(value, bytes) else value
            row[name] = {label for label in text.split(",") if label} or None
    return row
