"""Mirror tables: their columns, taken from a source shard, created, checked and extended.

A mirror table has the source table's columns with the source's types (``COLUMN_TYPE``,
character set and collation from ``information_schema.COLUMNS``), the same primary key, and
the token and provenance columns of :data:`TOKEN_DDL`. Columns outside the primary key are
nullable: a tombstone keeps its key and token and sets them NULL. The view ``<table>_live``
shows the rows that are not tombstones, with the source's columns only.

A table that exists is checked against the source: a source column it lacks is added
(``ALTER TABLE ... ADD COLUMN``); a column whose type differs, or one the source no longer has,
is a :class:`MirrorSchemaError` that names the table, the column and what to do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from updatestream.core.errors import UpdateStreamError

Connect = Callable[[], Any]  # a pymysql connection factory

_NAME = re.compile(r"^[A-Za-z0-9_$]{1,64}$")

# the token (see `order`) and the provenance of the change that wrote the row
TOKEN_DDL = (
    "`_us_ts` BIGINT NOT NULL",
    "`_us_shard` VARCHAR(64) NOT NULL",
    "`_us_seq` BIGINT UNSIGNED NOT NULL",
    "`_us_idx` INT NOT NULL",
    "`_us_deleted` TINYINT NOT NULL DEFAULT 0",
    "`_us_gtid` VARCHAR(2048) NOT NULL",  # the origin's GTID position after the transaction
    "`_us_read_from` VARCHAR(64) NOT NULL",  # the shard the change was read from
)
INTERNAL_PREFIX = "_us_"
LIVE_SUFFIX = "_live"


class MirrorSchemaError(UpdateStreamError):
    """A mirror table does not fit the source table; the message says which column and what to
    do. Never resolved by writing a value into a column of another type."""


def check_name(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise MirrorSchemaError(
            f"{what} {name!r} is not a plain MySQL name; use 1 to 64 letters, digits, _ or $"
        )
    return name


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    column_type: str  # e.g. "bigint(20) unsigned", "varchar(100)", "enum('a','b')"
    data_type: str  # e.g. "bigint", "varchar", "enum", "json"
    charset: str | None = None
    collation: str | None = None
    default: str | None = None  # information_schema's COLUMN_DEFAULT (MariaDB: an SQL literal)

    def ddl(self, *, nullable: bool, with_default: bool = False) -> str:
        text = f"`{self.name}` {self.column_type}"
        if self.charset:
            text += f" CHARACTER SET {self.charset}"
        if self.collation:
            text += f" COLLATE {self.collation}"
        text += " NULL" if nullable else " NOT NULL"
        if with_default and self.default is not None and self.default.upper() != "NULL":
            text += f" DEFAULT {self.default}"
        return text


@dataclass(frozen=True, slots=True)
class TableSchema:
    name: str
    columns: tuple[Column, ...]  # in table order
    primary_key: tuple[str, ...]

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


_COLUMNS_SQL = (
    "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, "
    "COLUMN_DEFAULT "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
    "ORDER BY ORDINAL_POSITION"
)
_PRIMARY_SQL = (
    "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
    "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX"
)


_BARE_DEFAULT = re.compile(r"^(-?[0-9.]+(e-?[0-9]+)?|current_timestamp(\(\d*\))?|null)$", re.I)


def default_literal(default: str | None, flavor: str) -> str | None:
    """COLUMN_DEFAULT as an SQL literal: MariaDB reports it so already ('x', 0, NULL,
    current_timestamp()); MySQL reports the bare value, so text is quoted there."""
    if default is None or flavor != "mysql" or _BARE_DEFAULT.match(default):
        return default
    return "'" + default.replace("\\", "\\\\").replace("'", "''") + "'"


def read_table(
    cursor: Any, database: str, table: str, flavor: str = "mariadb"
) -> TableSchema | None:
    """A table's columns and primary key from information_schema; None when it is missing."""
    cursor.execute(_COLUMNS_SQL, (database, table))
    columns = tuple(
        Column(
            str(n),
            str(t).lower(),
            str(d).lower(),
            cs or None,
            co or None,
            default_literal(df, flavor),
        )
        for n, t, d, cs, co, df in cursor.fetchall()
    )
    if not columns:
        return None
    cursor.execute(_PRIMARY_SQL, (database, table))
    primary = tuple(str(row[0]) for row in cursor.fetchall())
    return TableSchema(table, columns, primary)


def source_columns(schema: TableSchema) -> TableSchema:
    """``schema`` without the mirror's own columns."""
    kept = tuple(c for c in schema.columns if not c.name.startswith(INTERNAL_PREFIX))
    return TableSchema(schema.name, kept, schema.primary_key)


class SourceSchemas:
    """The source tables' schemas, read from the first shard that answers (any serving shard
    of the keyspace holds every table) and kept until :meth:`forget`."""

    def __init__(
        self, shards: Sequence[tuple[str, Connect]], database: str, flavor: str = "mariadb"
    ) -> None:
        self.shards = list(shards)
        self.database = database
        self.flavor = flavor  # the shards' server: how they report column defaults
        self._known: dict[str, TableSchema] = {}

    def forget(self, table: str) -> None:
        self._known.pop(table, None)

    def table(self, table: str) -> TableSchema:
        if table not in self._known:
            self._known[table] = self._read(table)
        return self._known[table]

    def _read(self, table: str) -> TableSchema:
        problems: list[str] = []
        for name, connect in self.shards:
            try:
                with connect() as conn, conn.cursor() as cur:
                    found = read_table(cur, self.database, table, self.flavor)
            except Exception as exc:  # try the next shard; report them all
                problems.append(f"shard {name}: {type(exc).__name__}: {exc}")
                continue
            if found is None:
                problems.append(f"shard {name}: no table {self.database}.{table}")
                continue
            if not found.primary_key:
                raise MirrorSchemaError(
                    f"source table {self.database}.{table} has no primary key; a mirror needs "
                    "one to apply changes by key"
                )
            return found
        raise MirrorSchemaError(
            f"cannot read the columns of source table {self.database}.{table}: "
            + ("; ".join(problems) or "the keyspace has no shards")
        )


def create_table_sql(database: str, mirror: str, source: TableSchema) -> str:
    columns = [c.ddl(nullable=c.name not in source.primary_key) for c in source.columns]
    primary = ", ".join(f"`{c}`" for c in source.primary_key)
    body = ",\n  ".join([*columns, *TOKEN_DDL, f"PRIMARY KEY ({primary})"])
    return (
        f"CREATE TABLE IF NOT EXISTS `{database}`.`{mirror}` (\n  {body},\n"
        "  KEY `_us_tombstones` (`_us_deleted`, `_us_ts`)\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )


def view_sql(database: str, mirror: str, columns: Sequence[str]) -> str:
    listed = ", ".join(f"`{c}`" for c in columns)
    return (
        f"CREATE OR REPLACE VIEW `{database}`.`{mirror}{LIVE_SUFFIX}` AS "
        f"SELECT {listed} FROM `{database}`.`{mirror}` WHERE `_us_deleted` = 0"
    )


_INT_WIDTH = re.compile(r"^(tinyint|smallint|mediumint|int|bigint)\(\d+\)")


def comparable(column_type: str) -> str:
    """A column type as both products mean it: integer display widths dropped (MySQL 8 no
    longer shows them), JSON as MariaDB stores it (LONGTEXT)."""
    text = _INT_WIDTH.sub(r"\1", column_type.lower())
    return "longtext" if text == "json" else text


def differences(mirror: TableSchema, source: TableSchema, where: str) -> list[Column]:
    """The source columns to add to the mirror table; raises on what cannot be added."""
    if mirror.primary_key != source.primary_key:
        raise MirrorSchemaError(
            f"{where}: primary key ({', '.join(mirror.primary_key)}) differs from the source's "
            f"({', '.join(source.primary_key)}); drop the mirror table (it is rebuilt from a "
            "stream started with a snapshot) or point the sink at another database or prefix"
        )
    for column in mirror.columns:
        wanted = source.column(column.name)
        if wanted is None:
            raise MirrorSchemaError(
                f"{where}: column {column.name} is not in source table {source.name} any more "
                f"(dropped at the source?); drop it from the mirror (ALTER TABLE ... DROP "
                f"COLUMN `{column.name}`) and restart the stream"
            )
        if comparable(wanted.column_type) != comparable(column.column_type):
            raise MirrorSchemaError(
                f"{where}: column {column.name} is {column.column_type} in the mirror but "
                f"{wanted.column_type} in source table {source.name}; change the mirror's "
                f"column to {wanted.column_type} (ALTER TABLE ... MODIFY) and restart the stream"
            )
    return [c for c in source.columns if mirror.column(c.name) is None]


def add_columns_sql(database: str, mirror: str, columns: Sequence[Column]) -> str:
    """ADD COLUMN with the source's default: rows the source filled with it when it added the
    column (no row events) get it in the mirror too."""
    added = ", ".join(f"ADD COLUMN {c.ddl(nullable=True, with_default=True)}" for c in columns)
    return f"ALTER TABLE `{database}`.`{mirror}` {added}"
