"""Row changes of the sample tables read from a source binlog, and the statements that apply
them to a destination shard (filtered replication, and the rewind of a replay window).

Images keep python-mysql-replication's `none_sources`, which tells an empty SET from NULL, so
that a row is written back exactly as the source had it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from updatestream_cli.devcluster import sample_schema

# The binlog events that make up a transaction's row changes and its boundaries.
TRANSACTION_EVENTS = (
    MariadbGtidEvent,
    XidEvent,
    QueryEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
)


@dataclass(frozen=True)
class RowChange:
    table: str
    op: str  # "write" (insert or update, as an upsert) or "delete"
    values: dict[str, Any]
    keyspace_id: bytes


def row_images(event: Any, row: dict[str, Any]) -> tuple[dict[str, Any] | None, ...]:
    """(before, after) images of a row event's row, with the library's `none_sources` (which
    tells an empty SET from NULL) kept for writing them back."""
    if isinstance(event, UpdateRowsEvent):
        return (
            {**row["before_values"], "none_sources": row["before_none_sources"]},
            {**row["after_values"], "none_sources": row["after_none_sources"]},
        )
    image = {**row["values"], "none_sources": row["none_sources"]}
    return (None, image) if isinstance(event, WriteRowsEvent) else (image, None)


def sql_value(value: Any, none_source: str | None = None) -> Any:
    if isinstance(value, set | frozenset):
        return ",".join(sorted(value))
    if value is None and none_source == "empty set":
        return ""
    return value


def upsert_sql(table: str, columns: Sequence[str], rows: int) -> str:
    names = ", ".join(f"`{c}`" for c in columns)
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    keys = set(sample_schema.PRIMARY_KEYS[table])
    updates = ", ".join(f"`{c}` = VALUES(`{c}`)" for c in columns if c not in keys)
    return (
        f"INSERT INTO `{sample_schema.DATABASE}`.`{table}` ({names}) VALUES "
        + ", ".join([one] * rows)
        + (f" ON DUPLICATE KEY UPDATE {updates}" if updates else "")
    )


def row_statements(changes: Sequence[RowChange]) -> list[tuple[str, list[Any]]]:
    """Statements applying row changes in order; consecutive writes to one table are batched
    into one multi-row upsert, which logs its rows in the order given. Deletes are one statement
    each: a `DELETE ... IN` lists its rows in the binlog in key order, not in the source's, and
    a copy must keep the source's order of rows (the stream tells a group's transactions apart
    by it)."""
    statements: list[tuple[str, list[Any]]] = []
    start = 0
    while start < len(changes):
        first = changes[start]
        end = start + 1
        while (
            end < len(changes)
            and end - start < 500
            and first.op != "delete"
            and changes[end].table == first.table
            and changes[end].op == first.op
        ):
            end += 1
        run = changes[start:end]
        keys = sample_schema.PRIMARY_KEYS[first.table]
        if first.op == "delete":
            one = "(" + ", ".join(["%s"] * len(keys)) + ")"
            cols = ", ".join(f"`{k}`" for k in keys)
            statements.append(
                (
                    f"DELETE FROM `{sample_schema.DATABASE}`.`{first.table}` WHERE ({cols}) IN ("
                    + ", ".join([one] * len(run))
                    + ")",
                    [c.values[k] for c in run for k in keys],
                )
            )
        else:
            columns = [c for c in first.values if c != "none_sources"]
            params: list[Any] = []
            for change in run:
                sources = change.values.get("none_sources", {})
                params += [sql_value(change.values[c], sources.get(c)) for c in columns]
            statements.append((upsert_sql(first.table, columns, len(run)), params))
        start = end
    return statements


def execute_batched(cur: Any, statements: Sequence[tuple[str, Any]], limit: int = 4 << 20) -> None:
    """Run statements as few multi-statement round trips (the connection needs the
    MULTI_STATEMENTS client flag), in order, reading every result so errors surface."""
    chunk: list[str] = []
    size = 0

    def send() -> None:
        cur.execute(";\n".join(chunk))
        while cur.nextset():
            pass
        chunk.clear()

    for sql, params in statements:
        text = cur.mogrify(sql, params) if params is not None else sql
        if chunk and size + len(text) > limit:
            send()
            size = 0
        chunk.append(text)
        size += len(text) + 2
    if chunk:
        send()
