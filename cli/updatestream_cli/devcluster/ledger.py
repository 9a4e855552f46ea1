"""The traffic ledger: one JSON line per committed row change; row images as the binlog has them.

A ledger entry records what the traffic generator committed: table, primary key, op, a digest of
the after image, the shard, the commit order and time, and the shard's GTID of the transaction.
The digest is the sha256 of `updatestream.binlog.events.encode_row(after)` where `after` holds the
values as python-mysql-replication decodes them from a ROW binlog with full metadata, so a
consumer of the change stream can compare its events with the ledger digest for digest.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from updatestream.binlog.events import encode_row
from updatestream_cli.devcluster import sample_schema

LedgerOp = Literal["insert", "update", "delete"]
RowKey = tuple[str, str]  # (table, canonical JSON of the primary key)


def binlog_image(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as python-mysql-replication decodes it, from a row read with pymysql SELECT.

    Columns in table order. SET comes back from SELECT as text `a,b` and from the binlog as a
    Python set (an empty set as None); every other type already matches (DECIMAL as Decimal,
    DATETIME as datetime, BLOB as bytes, TEXT/VARCHAR/JSON/ENUM as str, integers as int).
    """
    image: dict[str, Any] = {}
    for column in sample_schema.COLUMNS[table]:
        value = row[column]
        if column in sample_schema.SET_COLUMNS[table] and isinstance(value, str | set | frozenset):
            labels = set(value.split(",")) if isinstance(value, str) else set(value)
            labels.discard("")
            value = labels or None
        image[column] = value
    return image


def pk_of(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    return {column: row[column] for column in sample_schema.PRIMARY_KEYS[table]}


def pk_json(table: str, row: Mapping[str, Any]) -> str:
    return encode_row(pk_of(table, row))


def row_digest(image: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of an after image (`encode_row`)."""
    return hashlib.sha256(encode_row(image).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LedgerEntry:
    order: int  # commit order over the whole run (rows of one transaction are consecutive)
    tx: int  # transaction number (commit order of transactions)
    table: str
    pk: str  # canonical JSON of the primary key
    op: LedgerOp
    digest: str | None  # sha256 of the after image; None for deletes
    shard: str
    keyspace_id: str  # hex
    gtid: str  # the shard's GTID of the transaction (@@last_gtid after COMMIT)
    commit_time: float  # unix seconds, taken right after COMMIT returned

    @property
    def key(self) -> RowKey:
        return (self.table, self.pk)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> LedgerEntry:
        return cls(**json.loads(line))


class LedgerWriter:
    """Appends entries as JSON lines; thread-safe; flushes after every transaction."""

    def __init__(self, path: Path | str | None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._fh = self.path.open("a", encoding="utf-8") if self.path is not None else None
        self.entries = 0

    def write_transaction(self, entries: Iterable[LedgerEntry]) -> None:
        lines = [entry.to_json() + "\n" for entry in entries]
        with self._lock:
            self.entries += len(lines)
            if self._fh is not None:
                self._fh.writelines(lines)
                self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def last_entry(path: Path | str) -> LedgerEntry | None:
    """The last entry of a ledger file (to continue its numbering), or None."""
    try:
        with Path(path).open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            lines = [line for line in fh.read().splitlines() if line.strip()]
    except FileNotFoundError:
        return None
    return LedgerEntry.from_json(lines[-1].decode("utf-8")) if lines else None


def read_ledger(path: Path | str) -> Iterator[LedgerEntry]:
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield LedgerEntry.from_json(line)


def final_state(entries: Iterable[LedgerEntry]) -> dict[RowKey, str]:
    """The digest of each row alive after replaying the ledger in commit order."""
    state: dict[RowKey, str] = {}
    for entry in sorted(entries, key=lambda e: e.order):
        if entry.op == "delete":
            state.pop(entry.key, None)
        else:
            assert entry.digest is not None
            state[entry.key] = entry.digest
    return state


def table_state(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[RowKey, str]:
    """Digest per row for (table, SELECT row dict) pairs, comparable with `final_state`."""
    return {
        (table, pk_json(table, row)): row_digest(binlog_image(table, row)) for table, row in rows
    }


def canonical_decimal(value: str | decimal.Decimal, places: int = 2) -> decimal.Decimal:
    return decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-places))


def utc_now_naive() -> dt.datetime:
    """DATETIME(6) values are written in UTC without a zone (the servers run with +00:00)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
