"""The zero-loss comparison: what the traffic ledger committed against what a sink received.

Pure functions over plain records, free of drivers and servers (the readers in
:mod:`updatestream_cli.verify.sinks` turn each sink's contents into these records):

* :class:`~updatestream_cli.devcluster.ledger.LedgerEntry`: one committed row change of the
  traffic ledger (its one owner, `updatestream_cli.devcluster.ledger`).
* :class:`Delivered`: one change a sink holds in delivery order (a Version Stream version).
* :class:`FinalRow` / :class:`RowUpdate`: a CDCv2 stream's reconstructed multiset and updates.
* :class:`CachedEntry`: a memcached entry's Event Token and value.

Each ``compare_*`` returns a :class:`Report` whose :meth:`Report.to_json` has exactly the keys of
the verifier's JSON output.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from updatestream.core.gtid import (
    GTIDParseError,
    MariaDBPosition,
    MySQLGTIDSet,
    parse_position,
    position_contains,
)
from updatestream.core.token import EventToken
from updatestream_cli.devcluster.ledger import LedgerEntry, RowKey, final_state


@dataclass(frozen=True, slots=True)
class Delivered:
    """One change as a sink delivered it, in delivery order (``seq``: a version number)."""

    seq: int
    table: str
    pk: str
    digest: str | None  # None: a delete (tombstone)
    origin_shard: str | None = None  # source identity, where the sink keeps it
    origin_position: str | None = None  # the origin shard's GTID position after the transaction

    @property
    def key(self) -> RowKey:
        return (self.table, self.pk)


@dataclass(frozen=True, slots=True)
class FinalRow:
    """A datum of a reconstructed CDCv2 collection with a non-zero multiplicity."""

    table: str
    pk: str
    digest: str
    count: int


@dataclass(frozen=True, slots=True)
class RowUpdate:
    """One distinct CDCv2 update ``(row, time, diff)`` as the reader reported it."""

    table: str
    pk: str
    digest: str
    time: int
    diff: int


@dataclass(frozen=True, slots=True)
class CachedEntry:
    token: EventToken
    value: bytes | None  # None: token only


@dataclass
class Report:
    committed: int = 0
    delivered: int = 0
    lost: int = 0
    duplicates_delivered: int = 0
    duplicates_dropped: int = 0
    duplicates_dropped_by_cause: dict[str, int] = field(default_factory=dict)
    out_of_order_keys: int = 0
    stale_keys: int | None = None  # memcached only
    progress_violations: int | None = None  # CDCv2 only: see `check_progress`
    unexpected: int = 0  # delivered changes matching no ledger change (not a failure by itself)
    examples: dict[str, list[str]] = field(default_factory=dict)  # a few keys per finding

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.duplicates_delivered == 0
            and not self.stale_keys
            and not self.progress_violations
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "committed": self.committed,
            "delivered": self.delivered,
            "lost": self.lost,
            "duplicates_delivered": self.duplicates_delivered,
            "duplicates_dropped": self.duplicates_dropped,
            "duplicates_dropped_by_cause": dict(sorted(self.duplicates_dropped_by_cause.items())),
            "out_of_order_keys": self.out_of_order_keys,
        }
        if self.stale_keys is not None:
            data["stale_keys"] = self.stale_keys
        if self.progress_violations is not None:
            data["progress_violations"] = self.progress_violations
        return data

    def note(self, finding: str, key: RowKey, limit: int = 5) -> None:
        found = self.examples.setdefault(finding, [])
        if len(found) < limit:
            found.append(f"{key[0]}:{key[1]}")


# -- GTIDs -----------------------------------------------------------------------------------


def transaction_gtids(position: str) -> list[str]:
    """The GTIDs a position "after the transaction" may stand for: the last GTID of each
    MariaDB domain (``d-s-n``), or the last sequence number of each MySQL server UUID
    (``uuid:n``). One of them is the transaction's own GTID."""
    try:
        parsed = parse_position(position)
    except GTIDParseError:
        return [position]
    if isinstance(parsed, MariaDBPosition):
        return [str(gtid) for gtid in parsed]
    assert isinstance(parsed, MySQLGTIDSet)
    return [f"{uuid}:{intervals[-1][1]}" for uuid, intervals in parsed.entries.items() if intervals]


def _normal_gtid(gtid: str) -> str:
    found = transaction_gtids(gtid)
    return found[0] if len(found) == 1 else gtid


def contains_gtid(position: str, gtid: str) -> bool | None:
    """Whether ``position`` includes the transaction ``gtid``; None if they cannot be compared."""
    try:
        return position_contains(parse_position(position), parse_position(gtid))
    except GTIDParseError:
        return None


# -- change-by-change (Version Stream) ---------------------------------------------------------


def _content(table: str, pk: str, digest: str | None) -> tuple[str, str, str | None]:
    return (table, pk, digest)


def compare_changes(committed: Sequence[LedgerEntry], delivered: Iterable[Delivered]) -> Report:
    """Match every ledger change to exactly one delivered change.

    A delivered change matches by content (table, primary key, after-image digest; a delete by
    its missing digest) and, when it carries its source identity, by origin too: the origin
    shard and the transaction GTID that the origin position ends with. A delivered change whose
    origin matches no ledger transaction falls back to content alone (a copy whose provenance was
    lost is still caught as the duplicate it is). Ledger changes left unmatched are lost;
    delivered changes whose ledger change was already matched are duplicates. Per entity the
    matched ledger changes must appear in commit order, or the entity counts as out of order.
    """
    report = Report(committed=len(committed))
    ordered = sorted(committed, key=lambda c: c.order)
    by_origin: dict[tuple[Any, ...], list[LedgerEntry]] = defaultdict(list)
    by_content: dict[tuple[Any, ...], list[LedgerEntry]] = defaultdict(list)
    for change in ordered:
        content = _content(change.table, change.pk, change.digest)
        by_origin[(*content, change.shard, _normal_gtid(change.gtid))].append(change)
        by_content[content].append(change)
    matched: set[int] = set()
    sequence: dict[RowKey, list[int]] = defaultdict(list)

    def take(candidates: list[LedgerEntry]) -> LedgerEntry | None:
        for change in candidates:
            if change.order not in matched:
                return change
        return None

    for record in delivered:
        report.delivered += 1
        content = _content(record.table, record.pk, record.digest)
        origin_keys: list[tuple[Any, ...]] = []
        if record.origin_shard is not None and record.origin_position is not None:
            origin_keys = [
                (*content, record.origin_shard, gtid)
                for gtid in transaction_gtids(record.origin_position)
            ]
        known = [k for k in origin_keys if k in by_origin]
        pool = [c for k in known for c in by_origin[k]] if known else by_content.get(content, [])
        if not pool:
            report.unexpected += 1
            report.note("unexpected", record.key)
            continue
        found = take(pool)
        if found is None:
            report.duplicates_delivered += 1
            report.note("duplicates_delivered", record.key)
            continue
        matched.add(found.order)
        sequence[record.key].append(found.order)
    for change in ordered:
        if change.order not in matched:
            report.lost += 1
            report.note("lost", change.key)
    for key, orders in sequence.items():
        if any(b < a for a, b in pairwise(orders)):
            report.out_of_order_keys += 1
            report.note("out_of_order_keys", key)
    return report


# -- final contents (CDCv2) ------------------------------------------------------------------


def compare_final(
    committed: Sequence[LedgerEntry], rows: Iterable[FinalRow], updates: Iterable[RowUpdate]
) -> Report:
    """Compare a reconstructed collection with the ledger's final state.

    * lost: a key whose live rows differ from the ledger's final row (missing, another image, or
      present although the ledger deleted it);
    * duplicates delivered: the excess multiplicity of each datum (a count above 1, or below 0:
      an update's retraction applied twice);
    * out of order: a key whose inserted images, in update time order, cannot be placed in the
      ledger's commit order of that key (times are seconds: changes within one second may come
      in any order).
    """
    report = Report(committed=len(committed))
    expected = final_state(committed)
    live: dict[RowKey, Counter[str]] = defaultdict(Counter)
    for row in rows:
        live[(row.table, row.pk)][row.digest] += row.count
    for key in expected.keys() | live.keys():
        counts = live.get(key, Counter())
        excess = sum(c - 1 for c in counts.values() if c > 1) + sum(
            -c for c in counts.values() if c < 0
        )
        if excess:
            report.duplicates_delivered += excess
            report.note("duplicates_delivered", key)
        present = {digest for digest, count in counts.items() if count > 0}
        wanted = {expected[key]} if key in expected else set()
        if present != wanted:
            report.lost += 1
            report.note("lost", key)
    orders: dict[tuple[RowKey, str], list[int]] = defaultdict(list)
    for change in sorted(committed, key=lambda c: c.order):
        if change.digest is not None:
            orders[(change.key, change.digest)].append(change.order)
    inserted: dict[RowKey, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for update in updates:
        report.delivered += 1
        if update.diff > 0:
            inserted[(update.table, update.pk)][update.time].append(update.digest)
    for key, by_time in inserted.items():
        if not _placeable(key, by_time, orders):
            report.out_of_order_keys += 1
            report.note("out_of_order_keys", key)
    return report


def _placeable(
    key: RowKey, by_time: Mapping[int, list[str]], orders: Mapping[tuple[RowKey, str], list[int]]
) -> bool:
    """Can the images of ``key``, grouped by time, be given increasing ledger orders?"""
    floor = -1
    for time in sorted(by_time):
        chosen = []
        for digest in by_time[time]:
            later = [o for o in orders.get((key, digest), ()) if o > floor]
            if orders.get((key, digest)) and not later:
                return False
            if later:
                chosen.append(later[0])
        if chosen:
            floor = max(chosen)
    return True


# -- CDCv2 progress statements ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchFile:
    """One CDCv2 batch file: its updates and its progress statements, in the order written."""

    name: str
    updates: tuple[RowUpdate, ...]
    progress: tuple[
        tuple[int, int | None, tuple[tuple[int, int], ...]], ...
    ]  # lower, upper, counts


def check_progress(
    committed: Sequence[LedgerEntry], files: Sequence[BatchFile], report: Report
) -> None:
    """Check the progress statements of one stream directory's files (in batch order) and add
    what is wrong to ``report.progress_violations``:

    * an update written below the frontier declared before its file, by its own time or by its
      change's commit time in the ledger (a change committed in a second already declared
      complete, whose update came later, written late at a later time);
    * a second declared complete whose count is not the number of distinct updates at it.
    """
    report.progress_violations = report.progress_violations or 0
    committed_at: dict[tuple[RowKey, str], float] = {}
    for change in committed:
        if change.digest is not None:
            slot = (change.key, change.digest)
            committed_at[slot] = max(committed_at.get(slot, 0.0), change.commit_time)
    frontier = 0
    at_time: dict[int, set[tuple[str, str, str, int]]] = defaultdict(set)
    declared: list[tuple[int, int | None, dict[int, int]]] = []
    for batch in files:
        for update in batch.updates:
            key = (update.table, update.pk)
            at_time[update.time].add((update.table, update.pk, update.digest, update.diff))
            second = int(committed_at.get((key, update.digest), update.time))
            if update.time < frontier or (update.diff > 0 and second < frontier):
                report.progress_violations += 1
                report.note("progress_violations", key)
        for lower, upper, pairs in batch.progress:
            declared.append((lower, upper, dict(pairs)))
            frontier = max(frontier, upper if upper is not None else frontier)
    for lower, upper, per_second in declared:
        inside = {t for t in at_time if t >= lower and (upper is None or t < upper)}
        for time in sorted(inside | set(per_second)):
            found = len(at_time.get(time, ()))
            if found != per_second.get(time, 0):
                report.progress_violations += 1
                report.examples.setdefault("progress_counts", []).append(
                    f"second {time}: declared {per_second.get(time, 0)}, found {found}"
                )


# -- cache entries (memcached) -----------------------------------------------------------------


def covers(token: EventToken, last: LedgerEntry, slack: float = 1.0) -> bool:
    """Does an entry's token stand at or after the ledger's last change of its row?

    Exact when the token is from the change's shard (its position includes the change's GTID) or
    copies a transaction of that shard (its source position does). Otherwise only timestamps are
    comparable: the token is older when its timestamp is more than ``slack`` seconds below the
    change's commit time (binlog timestamps have one-second resolution).
    """
    if token.shard == last.shard:
        inside = contains_gtid(str(token.position), last.gtid)
        if inside is not None:
            return inside
    if token.source is not None and token.source.shard == last.shard:
        inside = contains_gtid(str(token.source.position), last.gtid)
        if inside is not None:
            return inside
    return token.timestamp + slack >= last.commit_time


def compare_cache(
    committed: Sequence[LedgerEntry],
    entries: Mapping[RowKey, CachedEntry],
    database: Mapping[RowKey, str] | None = None,
    *,
    value_digest: Any = None,
    slack: float = 1.0,
) -> Report:
    """Check the cache entry of every row the ledger touched.

    An absent entry is fine. An entry is stale when its token is older than the row's last
    change (see :func:`covers`), or when it holds a value that is not the row as the database
    has it now (``database``: row key -> digest of the current row; ``value_digest(value)`` gives
    the digest a cached value stands for, None for a deleted row). Without ``database`` values
    are not checked.
    """
    report = Report(committed=len(committed), stale_keys=0)
    last: dict[RowKey, LedgerEntry] = {}
    for change in sorted(committed, key=lambda c: c.order):
        last[change.key] = change
    for key, change in last.items():
        entry = entries.get(key)
        if entry is None:
            continue
        report.delivered += 1
        stale = not covers(entry.token, change, slack)
        if not stale and entry.value is not None and database is not None:
            held = value_digest(entry.value) if value_digest is not None else None
            stale = held != database.get(key)
        if stale:
            report.stale_keys = (report.stale_keys or 0) + 1
            report.note("stale_keys", key)
    return report
