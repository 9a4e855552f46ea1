"""What a Vitess change reader delivered, matched with the traffic's ledger, change by change.

Both peers of `bench-vitess-peers` read vtgate's VStream, which names no transaction's GTID: a
row change comes with its shard and, at its transaction's end, the VGTID (every shard's
executed GTID set after the transaction). The ledger names each committed row change by table,
primary key, op, shard and the GTID (`uuid:N`) of its transaction on the mysqld that committed
it. A delivery is the ledger change of the same table, key and op whose GTID the delivery's
shard position holds, the newest such: a later change of the same row committed on that mysqld
is not in the set yet, and one committed on another shard's mysqld has another server UUID.

`match` gives, for every ledger change, when each delivery of it arrived, and the deliveries
that are no ledger change at all (`unmatched`: a copy VReplication made, or a row printed
without its transaction's VGTID); `tally` counts lost (never delivered) and duplicates
(delivered more than once) over a slice of the ledger. `first_named` places our job's
deliveries, which name each transaction by its shard and GTID. Everything here is pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from updatestream_cli.devcluster.ledger import LedgerEntry, LedgerOp
from updatestream_cli.devcluster.sample_schema import PRIMARY_KEYS

from updatestream.core.gtid import Flavor, GTIDPosition, parse_position, position_contains

RowId = tuple[str, tuple[str, ...], str]  # (table, primary key values as text, op)
_DEBEZIUM_OPS: dict[str, LedgerOp] = {"c": "insert", "u": "update", "d": "delete"}


@dataclass(frozen=True)
class Delivery:
    """One row change a reader handed to its application."""

    table: str  # without the keyspace
    key: tuple[str, ...]  # the primary key's values as text, in key order
    op: LedgerOp
    shard: str
    position: str  # the shard's GTID set after the transaction (`uuid:1-N,...`); "" if unknown
    at: float  # unix seconds, when the reader had it


def row_id(table: str, values: Mapping[str, Any], op: LedgerOp) -> RowId:
    return (table, tuple(str(values[column]) for column in PRIMARY_KEYS[table]), op)


def ledger_row_id(entry: LedgerEntry) -> RowId:
    return row_id(entry.table, json.loads(entry.pk), entry.op)


def shard_position(vgtid: Iterable[Mapping[str, Any]], shard: str) -> str:
    """The GTID set a VGTID names for `shard` (Vitess's `MySQL56/` flavor prefix removed)."""
    for part in vgtid:
        if part.get("shard") == shard:
            return str(part.get("gtid", "")).removeprefix("MySQL56/")
    return ""


def vstream_deliveries(lines: Iterable[Mapping[str, Any]]) -> list[Delivery]:
    """The row changes of `vstream-client`'s JSON lines. A transaction's rows come before its
    VGTID event; rows whose VGTID never came (the client stopped between) keep no position."""
    out: list[Delivery] = []
    pending: list[tuple[str, Mapping[str, Any], float, LedgerOp, str]] = []

    def flush(gtids: Sequence[Mapping[str, Any]]) -> None:
        for table, values, at, op, shard in pending:
            out.append(Delivery(table, row_id(table, values, op)[1], op, shard,
                                shard_position(gtids, shard), at))  # fmt: skip
        pending.clear()

    for line in lines:
        kind = line.get("type")
        if kind == "ROW":
            table = str(line["table"]).rsplit(".", 1)[-1]
            at = float(line["received"]) / 1e9
            for change in line["changes"]:
                before, after = change.get("before"), change.get("after")
                op: LedgerOp = (
                    "insert" if before is None else "delete" if after is None else "update"
                )
                pending.append((table, after or before, at, op, str(line["shard"])))
        elif kind == "VGTID":
            flush(line["vgtid"].get("shardGtids", []))
    flush([])
    return out


def debezium_deliveries(changes: Iterable[Mapping[str, Any]]) -> list[Delivery]:
    """The row changes of the Debezium harness's `change` lines (Vitess connector): the key's
    fields, the shard, and the VGTID of the change's transaction (a JSON list)."""
    out = []
    for change in changes:
        op = _DEBEZIUM_OPS.get(str(change.get("op")))
        if op is None or not isinstance(change.get("key"), dict):
            continue
        table, shard = str(change["table"]), str(change["shard"])
        vgtid = json.loads(change["vgtid"]) if change.get("vgtid") else []
        key = row_id(table, change["key"], op)[1]
        out.append(
            Delivery(table, key, op, shard, shard_position(vgtid, shard), float(change["t"]))
        )
    return out


@lru_cache(maxsize=65536)
def _position(text: str) -> GTIDPosition:
    return parse_position(text, Flavor.MYSQL)


@dataclass
class Matched:
    """Deliveries per ledger change (by its `order`), and those that match none."""

    times: dict[int, list[float]] = field(default_factory=dict)
    unmatched: list[Delivery] = field(default_factory=list)

    def first_delivered(self) -> dict[int, float]:
        return {order: min(times) for order, times in self.times.items()}


def match(ledger: Sequence[LedgerEntry], deliveries: Iterable[Delivery]) -> Matched:
    """Each delivery to the ledger change it is (see the module docstring)."""
    by_row: dict[RowId, list[LedgerEntry]] = {}
    for entry in sorted(ledger, key=lambda e: e.order):
        by_row.setdefault(ledger_row_id(entry), []).append(entry)
    out = Matched()
    for delivery in deliveries:
        found = None
        if delivery.position:
            held = _position(delivery.position)
            candidates = by_row.get((delivery.table, delivery.key, delivery.op), [])
            found = next((e for e in reversed(candidates)
                          if position_contains(held, _position(e.gtid))), None)  # fmt: skip
        if found is None:
            out.unmatched.append(delivery)
        else:
            out.times.setdefault(found.order, []).append(delivery.at)
    return out


def first_named(
    delivered: Iterable[tuple[float, str, str]], entries: Iterable[LedgerEntry]
) -> dict[int, float]:
    """Ledger change (by `order`) -> when the first delivery naming its shard and GTID arrived.
    `delivered` is (when, shard, GTID) per transaction our job delivered, the GTID as
    `bench.lagtools.transaction_keys` names it (`uuid:N`; one candidate per server UUID of the
    shard's position, one of them the transaction's own)."""
    first: dict[tuple[str, str], float] = {}
    for at, shard, gtid in delivered:
        if (shard, gtid) not in first or at < first[(shard, gtid)]:
            first[(shard, gtid)] = at
    return {
        entry.order: first[(entry.shard, entry.gtid)]
        for entry in entries
        if (entry.shard, entry.gtid) in first
    }


@dataclass(frozen=True)
class Tally:
    committed: int  # ledger row changes in the slice
    delivered: int  # of them, delivered at least once
    lost: int  # never delivered
    duplicates: int  # deliveries beyond the first
    unmatched: int  # deliveries in the slice's time window that are no ledger change

    def as_dict(self) -> dict[str, int]:
        return {
            "committed": self.committed,
            "delivered": self.delivered,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "unmatched": self.unmatched,
        }


def tally(
    entries: Iterable[LedgerEntry], matched: Matched, window: tuple[float, float] | None = None
) -> Tally:
    """Lost and duplicates over `entries`; unmatched deliveries counted within `window`
    (unix seconds, start inclusive) or all of them."""
    committed = delivered = duplicates = 0
    for entry in entries:
        committed += 1
        times = matched.times.get(entry.order, [])
        delivered += bool(times)
        duplicates += max(0, len(times) - 1)
    unmatched = [d for d in matched.unmatched
                 if window is None or window[0] <= d.at < window[1]]  # fmt: skip
    return Tally(committed, delivered, committed - delivered, duplicates, len(unmatched))
