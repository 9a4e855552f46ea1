"""The change event: what the binlog source emits and every sink consumes.

One row of a row event becomes one `ChangeEvent`; one row read by the snapshot becomes one
`snapshot` event. Each micro-batch partition also ends with one
`heartbeat` event per shard, carrying the shard's end token, so that sinks see per-shard progress
in band (the CDCv2 sink derives its progress statements from them) even when a shard is idle.

Values in `pk`, `before` and `after` are JSON-safe (see `encode_value`): DECIMAL as a string,
DATETIME/TIMESTAMP as ISO-8601 text, DATE and TIME as text, BLOB/BINARY as `{"$base64": ...}`,
JSON columns as their JSON value, ENUM as its label, SET as a sorted list of labels, NULL as null.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

Op = Literal["insert", "update", "delete", "snapshot", "reread", "heartbeat", "hop"]
# what sinks receive
OPS: tuple[Op, ...] = ("insert", "update", "delete", "snapshot", "reread", "heartbeat")
# A `snapshot` event is one existing row read by the stream's starting snapshot (start mode
# `snapshot`): `after` holds the row as it was at the event's token, `before` is None. It is the
# first event of its key, and every change the stream delivers after that token follows it.
# A `reread` event is the same for a row a snapshot on demand re-read while the stream ran: the
# sinks hold the key already, from every change of it up to the event's token.
SNAPSHOT_OPS: frozenset[str] = frozenset({"snapshot", "reread"})  # existing rows, not changes
HOP_MARKER: Op = "hop"  # the first row of a hop batch; the job records it, sinks never see it

# The Spark schema of a change event row, as DDL (field order is the row order).
SPARK_SCHEMA_DDL = ", ".join(
    [
        "keyspace STRING",
        "shard STRING",
        "op STRING",
        "table STRING",
        "pk STRING",
        "keyspace_id STRING",
        "before STRING",
        "after STRING",
        "token STRING",
        "timestamp BIGINT",
        "gtid STRING",
        "tx_index INT",
        "source_shard STRING",
        "source_gtid STRING",
        "source_timestamp BIGINT",
        "dedup STRING",
    ]
)


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    keyspace: str
    shard: str  # the shard the event was read from
    op: Op
    table: str | None  # None for heartbeats
    pk: str | None  # JSON object: primary-key column -> value
    keyspace_id: str | None  # hex, from the table's primary vindex
    before: str | None  # JSON object, None for inserts
    after: str | None  # JSON object, None for deletes
    token: str  # EventToken JSON (`EventToken.dumps()`)
    timestamp: int  # token timestamp: source timestamp for replicated transactions
    gtid: str  # GTID position of the shard after the transaction
    tx_index: int  # earlier changes to this table and key in the transaction (0: the first)
    source_shard: str | None = None  # provenance, for transactions from filtered replication
    source_gtid: str | None = None
    source_timestamp: int | None = None
    # the dedup rule's verdict, set by the reader after a hop: "hop" (a duplicate: the job drops
    # and counts it) or "unknown" (no provenance inside an overlap window: delivered, counted)
    dedup: str | None = None

    def as_tuple(self) -> tuple[Any, ...]:
        return tuple(asdict(self).values())

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ChangeEvent:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})

    @property
    def identity(self) -> tuple[str, str, str, str, int]:
        """What makes an event unique: origin shard, origin GTID, table, primary key and how
        many changes to that key came before it in the transaction.

        For an event copied by filtered replication the origin is its source. Counting per key
        (not per row of the transaction) gives a change and its copy the same identity: a
        destination holds only some rows of a source transaction, but every change to one key,
        in order.
        """
        if self.source_shard is not None and self.source_gtid is not None:
            origin = (self.source_shard, self.source_gtid)
        else:
            origin = (self.shard, self.gtid)
        return (*origin, self.table or "", self.pk or "", self.tx_index)


def encode_value(value: Any) -> Any:
    """Turn one column value as python-mysql-replication decodes it into a JSON-safe value."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _format_timedelta(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, set | frozenset):
        return sorted(encode_value(v) for v in value)
    if isinstance(value, list | tuple):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {str(encode_value(k)): encode_value(v) for k, v in value.items()}
    return str(value)


def _format_timedelta(value: dt.timedelta) -> str:
    sign = "-" if value < dt.timedelta(0) else ""
    total = abs(value)
    hours, rest = divmod(total.days * 86400 + total.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    frac = f".{total.microseconds:06d}" if total.microseconds else ""
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}{frac}"


_JSON_NATIVE = frozenset({str, int, float, bool, type(None)})


def encode_row(row: Mapping[str, Any]) -> str:
    """A row image as compact JSON with keys in column order."""
    if type(row) is dict and all(
        type(v) in _JSON_NATIVE for v in row.values()
    ):  # nothing to encode: the same text
        return json.dumps(row, separators=(",", ":"))
    return json.dumps({k: encode_value(v) for k, v in row.items()}, separators=(",", ":"))
