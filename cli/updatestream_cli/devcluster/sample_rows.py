"""Random rows of the sample schema, already in the form the binlog decodes them to.

Values are built so that what python-mysql-replication reads back from the binlog is equal to
what was generated: DECIMALs carry their column's scale, DATETIME(6) values are naive UTC
datetimes, SET values are Python sets (None instead of an empty set, as the binlog gives NULL or
an empty mask the same way), JSON columns hold JSON text in the form MySQL 8 writes it out
(`json_text`), which MariaDB keeps as written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from collections.abc import Mapping
from typing import Any

from updatestream_cli.devcluster import sample_schema

_NAMES = ["Ada", "Grace", "Zoë", "Łukasz", "Jürgen", "Søren", "明", "Анна", "Amélie", "José"]
_SURNAMES = ["Lovelace", "Hopper", "Ørsted", "Müller", "García", "山田", "Иванова", "O'Brien"]
_SKUS = ["sku-apple", "sku-pear", "sku-plum", "sku-fig", "sku-kiwi", "sku-lime"]
_KINDS = ["click", "view", "purchase", "signup", "logout"]


def canonical_decimal(value: str | decimal.Decimal, places: int = 2) -> decimal.Decimal:
    return decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-places))


def utc_now_naive() -> dt.datetime:
    """DATETIME(6) values are written in UTC without a zone (the servers run with +00:00)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _normalized(value: Any) -> Any:
    """`value` with every object's keys in MySQL's order: shorter keys first, then by bytes."""
    if isinstance(value, dict):
        ordered = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
        return {key: _normalized(item) for key, item in ordered}
    if isinstance(value, list):
        return [_normalized(item) for item in value]
    return value


def json_text(doc: Any) -> str:
    """The text MySQL 8 gives back for a JSON column holding `doc` (of objects, lists, strings
    and integers): MySQL stores JSON in a binary form and writes it out again with its own key
    order and `", "`/`": "` separators, non-ASCII as it is. A MariaDB JSON column keeps the text
    as written, so this text reads back unchanged on both flavors."""
    return json.dumps(_normalized(doc), ensure_ascii=False)


def _json_text(rng: random.Random) -> str | None:
    if rng.random() < 0.2:
        return None
    doc: dict[str, Any] = {
        "score": rng.randint(0, 1000),
        "tags": rng.sample(["a", "b", "c", "d"], 2),
    }
    if rng.random() < 0.5:
        doc["note"] = rng.choice(["ünïcödé", "plain", 'quote"d', "emoji 🎉"])
    return json_text(doc)


def _set_value(rng: random.Random, labels: tuple[str, ...]) -> set[str] | None:
    chosen = {label for label in labels if rng.random() < 0.4}
    return chosen or None


def new_user(rng: random.Random, user_id: int) -> dict[str, Any]:
    name = f"{rng.choice(_NAMES)} {rng.choice(_SURNAMES)}"
    email = None if rng.random() < 0.15 else f"user{user_id}@example.com"
    return {
        "id": user_id,
        "name": name,
        "email": email,
        "balance": canonical_decimal(f"{rng.randint(0, 10_000_000) / 100:.2f}"),
        "visits": rng.randint(0, 50),
        "status": rng.choice(["active", "active", "suspended", "closed"]),
        "flags": _set_value(rng, ("admin", "beta", "vip")),
        "profile": _json_text(rng),
        "created_at": utc_now_naive(),
        "updated_at": None,
    }


def new_order(rng: random.Random, order_id: int, user_id: int) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "user_id": user_id,
        "sku": rng.choice(_SKUS),
        "quantity": rng.randint(1, 20),
        "price": canonical_decimal(f"{rng.randint(1, 99_999) / 100:.2f}"),
        "note": None if rng.random() < 0.5 else "leave at the door ✓ " * rng.randint(1, 5),
        "state": "new",
        "placed_at": utc_now_naive(),
    }


def new_event(rng: random.Random, event_key: str) -> dict[str, Any]:
    # Never an empty BLOB: python-mysql-replication decodes b"" as "" (bytes.decode of empty
    # input skips the codec lookup that keeps binary values as bytes), so its digest would differ.
    payload = None if rng.random() < 0.2 else rng.randbytes(rng.randint(1, 64))
    return {
        "event_key": event_key,
        "kind": rng.choice(_KINDS),
        "seq": rng.randint(0, 2**64 - 1),  # BIGINT UNSIGNED, full range
        "payload": payload,
        "attrs": _json_text(rng),
        "tags": _set_value(rng, ("red", "green", "blue")),
        "occurred_at": utc_now_naive(),
    }


def changed(rng: random.Random, table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """The columns an update changes (always at least one, never the vindex or key column)."""
    if table == "users":
        values: dict[str, Any] = {
            "visits": int(row["visits"]) + 1,
            "balance": canonical_decimal(row["balance"] + canonical_decimal("1.25")),
            "updated_at": utc_now_naive(),
        }
        if rng.random() < 0.3:
            values["flags"] = _set_value(rng, ("admin", "beta", "vip"))
            values["profile"] = _json_text(rng)
            values["status"] = rng.choice(["active", "suspended", "closed"])
        return values
    if table == "orders":
        states = ["new", "paid", "shipped", "cancelled"]
        return {
            "state": states[(states.index(row["state"]) + 1) % len(states)],
            "quantity": int(row["quantity"]) + 1,
            "note": rng.choice([None, "gift wrap", "fragile ⚠"]),
        }
    return {
        "seq": (int(row["seq"]) + 1) % 2**64,
        "payload": rng.randbytes(rng.randint(1, 32)),
        "tags": _set_value(rng, ("red", "green", "blue")),
        "attrs": _json_text(rng),
    }


def sql_value(value: Any) -> Any:
    """A binlog-form value as a query parameter (SET as `a,b` text)."""
    if isinstance(value, set | frozenset):
        return ",".join(sorted(value))
    return value


def insert_sql(table: str, rows: int = 1) -> str:
    columns = sample_schema.COLUMNS[table]
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    names = ", ".join(f"`{c}`" for c in columns)
    return f"INSERT INTO `{table}` ({names}) VALUES " + ", ".join([one] * rows)


def insert_params(table: str, row: Mapping[str, Any]) -> list[Any]:
    return [sql_value(row[c]) for c in sample_schema.COLUMNS[table]]


def match_columns(table: str) -> list[str]:
    """The columns an update or delete names a row by: its primary key, and its primary vindex
    column when that is not part of the key (`orders.user_id`), which updates never change. A
    router (Vitess's vtgate) then sends the statement to the one shard that holds the row."""
    keys = list(sample_schema.PRIMARY_KEYS[table])
    vindex = sample_schema.VSCHEMA["tables"][table]["column_vindexes"][0]["column"]
    return keys if vindex in keys else [*keys, vindex]


def update_sql(table: str, columns: list[str]) -> tuple[str, list[str]]:
    keys = match_columns(table)
    assignments = ", ".join(f"`{c}` = %s" for c in columns)
    where = " AND ".join(f"`{k}` = %s" for k in keys)
    return f"UPDATE `{table}` SET {assignments} WHERE {where}", keys


def delete_sql(table: str) -> str:
    where = " AND ".join(f"`{k}` = %s" for k in match_columns(table))
    return f"DELETE FROM `{table}` WHERE {where}"
