"""The traffic ledger, its one owner: the entry model, the writer, the reader, the final state.

One JSON line per committed row change: what the traffic generator committed (table, primary
key, op, a digest of the after image), where (shard, keyspace id, the shard's GTID of the
transaction) and when (commit order, transaction number, commit time). The development cluster
writes it (`devcluster traffic --ledger`), `devcluster check` and `updatestream verify` read it,
and the benchmarks take commit times from it; all of them through this module.

The digest is the sha256 of `updatestream.binlog.events.encode_row(after)` where `after` holds the
values as python-mysql-replication decodes them from a ROW binlog with full metadata, so a
consumer of the change stream can compare its events with the ledger digest for digest.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from updatestream.binlog.events import encode_row
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.errors import DevClusterError

LedgerOp = Literal["insert", "update", "delete"]
LEDGER_OPS: tuple[LedgerOp, ...] = ("insert", "update", "delete")
RowKey = tuple[str, str]  # (table, canonical JSON of the primary key)


class LedgerError(DevClusterError):
    """A ledger file is missing, unreadable or not a traffic ledger; nothing was read from it."""


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One committed row change."""

    order: int  # commit order over the whole run (rows of one transaction are consecutive)
    tx: int  # transaction number (commit order of transactions)
    table: str
    pk: str  # canonical JSON of the primary key (`encode_row` of the key columns)
    op: LedgerOp
    digest: str | None  # sha256 of the after image's `encode_row`; None for deletes
    shard: str  # the shard it was committed on
    keyspace_id: str  # hex, from the row's primary vindex
    gtid: str  # the shard's GTID of the transaction, e.g. "1-1-57" or "<uuid>:57"
    commit_time: float  # unix seconds, taken right after COMMIT returned

    @property
    def key(self) -> RowKey:
        return (self.table, self.pk)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


_TYPES: dict[str, tuple[type, ...]] = {
    "order": (int,),
    "tx": (int,),
    "table": (str,),
    "pk": (str,),
    "op": (str,),
    "digest": (str, type(None)),
    "shard": (str,),
    "keyspace_id": (str,),
    "gtid": (str,),
    "commit_time": (int, float),
}
assert set(_TYPES) == {f.name for f in fields(LedgerEntry)}


def parse_entry(line: str, where: str = "ledger") -> LedgerEntry:
    """One ledger line; `where` (like `ledger.jsonl line 7`) names it in a `LedgerError`."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LedgerError(f"{where} is not JSON ({exc.msg}); is it a traffic ledger?") from None
    if not isinstance(data, dict):
        raise LedgerError(f"{where} is not a JSON object; is it a traffic ledger?")
    missing = [name for name in _TYPES if name not in data]
    if missing:
        raise LedgerError(f"{where} lacks {', '.join(missing)}; is it a traffic ledger?")
    wrong = [
        name
        for name, kinds in _TYPES.items()
        if not isinstance(data[name], kinds) or isinstance(data[name], bool)
    ]
    if wrong:
        raise LedgerError(f"{where} has a value of the wrong type in {', '.join(wrong)}")
    try:
        bytes.fromhex(data["keyspace_id"])
    except ValueError:
        raise LedgerError(f"{where}: keyspace_id {data['keyspace_id']!r} is not hex") from None
    if data["op"] not in LEDGER_OPS:
        raise LedgerError(f"{where} has unknown op {data['op']!r}")
    if (data["digest"] is None) != (data["op"] == "delete"):
        raise LedgerError(f"{where}: a {data['op']} must {'not ' * (data['op'] == 'delete')}"
                          "have a digest")  # fmt: skip
    values = {name: data[name] for name in _TYPES}
    values["commit_time"] = float(values["commit_time"])
    return LedgerEntry(**values)


def read_ledger(path: Path | str) -> list[LedgerEntry]:
    """Every entry of a ledger file, in file order (which is commit order)."""
    path = Path(path)
    if not path.is_file():
        raise LedgerError(
            f"ledger {path} does not exist or is not a file; pass the file written by "
            "'updatestream devcluster traffic --ledger'"
        )
    entries: list[LedgerEntry] = []
    try:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    entries.append(parse_entry(line, f"ledger {path} line {number}"))
    except OSError as exc:
        raise LedgerError(f"cannot read ledger {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise LedgerError(f"ledger {path} is not UTF-8 text") from None
    return entries


def last_entry(path: Path | str) -> LedgerEntry | None:
    """The last entry of a ledger file (to continue its numbering); None without one."""
    try:
        with Path(path).open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            lines = [line for line in fh.read().splitlines() if line.strip()]
    except FileNotFoundError:
        return None
    if not lines:
        return None
    return parse_entry(lines[-1].decode("utf-8"), f"ledger {path}, last line")


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


def final_state(entries: Iterable[LedgerEntry]) -> dict[RowKey, str]:
    """The after-image digest of each row alive after replaying the ledger in commit order."""
    state: dict[RowKey, str] = {}
    for entry in sorted(entries, key=lambda e: e.order):
        if entry.digest is None:
            state.pop(entry.key, None)
        else:
            state[entry.key] = entry.digest
    return state


# -- keys and digests of row images, as the ledger writes them --------------------------------


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


def table_state(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[RowKey, str]:
    """Digest per row for (table, SELECT row dict) pairs, comparable with `final_state`."""
    return {
        (table, pk_json(table, row)): row_digest(binlog_image(table, row)) for table, row in rows
    }
