"""Copied transactions, one group at a time: the dedup rule's verdicts and retired-shard reads.

Filtered replication may apply several source transactions as one destination transaction (a
group; its provenance says where the group began, `covered_from`, and where it ended). It copies
the source transactions one after another, so the rows of the group's first source transactions
are its first rows; within one transaction the order may differ from the source's (a batched
`DELETE ... WHERE id IN (...)` logs its rows in key order, whatever order the source deleted
them in). Whenever a boundary position falls inside a group (a hop's watermark, or the ends of a
retired shard's range), the rows on each side are told apart exactly with the stream's record of
what it read of the source (`RecentTransactions`): the keyspace ids, in order, of the rows the
source's transactions had in the stream's key range. `rows_within` counts the group's first rows
that copy transactions a boundary holds, and checks that they hold exactly the record's keyspace
ids for them; when no record reaches back, or the rows do not match it, it says so (None) and
nothing is dropped on a guess.

* `with_origins` gives the rows of a group that the record attributes to a source transaction
  that transaction's identity (the position after it as their source GTID, their index among the
  changes to their key counted in it): a sink then recognises a copy of a change it took from
  the source, as when a batch read from a shard is replayed, after the shard was retired, from
  the copies on its destinations.
* `RowClassifier` gives every row of a range its verdict: "hop" and "reverse" (the job drops
  and counts them), "unknown" and "straddle" (delivered and counted), None (delivered).
* `Via` keeps, of a destination's rows, exactly those copied from a retired shard between two of
  its positions: a batch planned before the shard was retired and replayed after it was gone
  reads them there (the planner checks that the destination's binlog reaches back that far).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from updatestream.binlog.events import HOP_MARKER
from updatestream.binlog.row_converter import EventRow
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import (
    GTIDPosition,
    position_contains,
    position_from_json,
    position_intersection,
    position_to_json,
)
from updatestream.core.hop_plan import canonical_shard_name
from updatestream.core.keyrange import KeyRange
from updatestream.core.recent_rows import RecentTransactions
from updatestream.core.token import EventToken, SourceProvenance
from updatestream_jobs.source.arrow_rows import FIELDS

_OP, _SHARD, _TS = FIELDS.index("op"), FIELDS.index("shard"), FIELDS.index("timestamp")
_TOKEN, _SOURCE = FIELDS.index("token"), FIELDS.index("source_shard")
_KSID = FIELDS.index("keyspace_id")
_TABLE, _PK = FIELDS.index("table"), FIELDS.index("pk")
_SOURCE_GTID, _INDEX = FIELDS.index("source_gtid"), FIELDS.index("tx_index")
log = logging.getLogger(__name__)


def _within(ids: Iterable[str], here: KeyRange) -> list[str]:
    """The keyspace ids (hex) of a record's rows that fall in `here`, the shard read, in order."""
    return [k for k in ids if here.contains(bytes.fromhex(k))]


def rows_within(
    group: list[EventRow],
    source: SourceProvenance,
    boundary: GTIDPosition,
    record: RecentTransactions | None,
    shard: str,
) -> int | None:
    """How many of the group's first rows (read from `shard`) copy source transactions that
    `boundary` holds; None when that cannot be told exactly."""
    if position_contains(boundary, source.position):
        return len(group)
    if source.covered_from is None:  # a single source transaction, not in the boundary
        return 0
    held = position_intersection(boundary, source.position)
    if position_contains(source.covered_from, held):
        return 0
    here = KeyRange.parse(shard)
    ids = record.rows_between(source.covered_from, held) if record is not None else None
    if ids is None:
        after = _rows_after(group, source, held, record, here)
        if after is not None:
            return len(group) - after
        reach = f"from {record.base} to {record.position}" if record is not None else "none"
        _inexact(group, source, shard, f"the stream's record of it ({reach}) does not span it")
        return None
    ids = _within(ids, here)
    first = [row[_KSID] for row in group[: len(ids)]]
    if Counter(first) != Counter(ids):  # whole transactions: their rows in any order
        _inexact(group, source, shard, f"its first rows {first} are not the record's {ids}")
        return None
    return len(ids)


def _rows_after(
    group: list[EventRow],
    source: SourceProvenance,
    held: GTIDPosition,
    record: RecentTransactions | None,
    here: KeyRange,
) -> int | None:
    """How many of the group's last rows copy the source transactions after `held`, when the
    record begins inside the group but holds all of those: they are its last rows."""
    tail = record.rows_between(held, source.position) if record is not None else None
    if tail is None:
        return None
    tail = _within(tail, here)
    if len(tail) > len(group):
        return None
    last = [row[_KSID] for row in group[len(group) - len(tail) :]]
    return len(tail) if Counter(last) == Counter(tail) else None


def with_origins(
    group: list[EventRow],
    source: SourceProvenance,
    record: RecentTransactions | None,
    shard: str,
) -> list[EventRow]:
    """The group's rows (read from `shard`), each row the record attributes to a source
    transaction with that transaction's identity (module docstring); the group unchanged when
    it copies one transaction, or when the rows of a transaction it copies are not the record's."""
    if source.covered_from is None or record is None:
        return group
    held = position_intersection(record.position, source.position)
    here = KeyRange.parse(shard)
    found = record.transactions_between(source.covered_from, held)
    at = 0
    if found is None and position_contains(held, source.position):
        # the record begins inside the group: it holds the group's last transactions
        found = record.transactions_between(record.base, held)
        mine = sum(len(_within(ids, here)) for _, ids in found or ())
        at = len(group) - mine
    if not found or at < 0:
        return group
    rows = list(group)
    for position, ids in found:
        ours = _within(ids, here)
        block = rows[at : at + len(ours)]
        if len(block) < len(ours) or Counter(row[_KSID] for row in block) != Counter(ours):
            log.warning(
                "a copy on %s of %s's transactions after %s up to %s (%d rows) does not hold "
                "the rows the stream read of %s in their place; they keep the copy's identity, "
                "so a sink that took them from %s may take them again",
                shard, source.shard, source.covered_from, source.position, len(group), position,
                source.shard,
            )  # fmt: skip
            return group
        seen: dict[tuple[str, str], int] = {}
        for row in block:
            key = (row[_TABLE], row[_PK])
            index = seen.get(key, 0)
            seen[key] = index + 1
            exact = list(row)
            exact[_SOURCE_GTID], exact[_INDEX] = str(position), index
            rows[at] = tuple(exact)
            at += 1
    return rows


def _inexact(group: list[EventRow], source: SourceProvenance, shard: str, why: str) -> None:
    log.warning(
        "a copy on %s of %s's transactions after %s up to %s (%d rows) cannot be split at a "
        "boundary inside it: %s; its rows are delivered and counted as straddle",
        shard, source.shard, source.covered_from, source.position, len(group), why,
    )  # fmt: skip


def _groups(rows: Iterator[EventRow]) -> Iterator[list[EventRow]]:
    """Consecutive rows of one transaction (one token) together."""
    group: list[EventRow] = []
    for row in rows:
        if group and row[_TOKEN] != group[0][_TOKEN]:
            yield group
            group = []
        group.append(row)
    if group:
        yield group


class Via:
    """The rows of a destination copied from retired `shard` with source positions after
    `after` and at or before `upto` (module docstring); `record` is what the stream read of the
    retired shard up to `upto`."""

    def __init__(
        self,
        shard: str,
        after: GTIDPosition,
        upto: GTIDPosition,
        record: RecentTransactions | None = None,
    ) -> None:
        self.shard = shard
        self.after = after
        self.upto = upto
        self.record = record

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "shard": self.shard,
            "after": position_to_json(self.after),
            "upto": position_to_json(self.upto),
        }
        if self.record is not None:
            data["record"] = self.record.to_json()
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Via:
        data = json.loads(text)
        record = RecentTransactions.from_json(data["record"]) if data.get("record") else None
        return cls(
            data["shard"],
            position_from_json(data["after"], "via.after."),
            position_from_json(data["upto"], "via.upto."),
            record,
        )

    def __call__(self, row: EventRow) -> bool:
        """Whether a single-transaction copy's row is in the range (groups: `sliced`)."""
        source = row[_SOURCE]
        if source is None or canonical_shard_name(source) != self.shard:
            return False
        token = EventToken.loads(row[_TOKEN])
        assert token.source is not None
        return position_contains(self.upto, token.source.position) and not position_contains(
            self.after, token.source.position
        )

    def sliced(self, group: list[EventRow]) -> tuple[list[EventRow], bool]:
        """(the group's rows in the range, whether that is exact). Unresolvable: all of them."""
        first = group[0]
        if first[_SOURCE] is None or canonical_shard_name(first[_SOURCE]) != self.shard:
            return [], True
        token = EventToken.loads(first[_TOKEN])
        assert token.source is not None
        low = rows_within(group, token.source, self.after, self.record, token.shard)
        high = rows_within(group, token.source, self.upto, self.record, token.shard)
        if low is None or high is None:
            return group, False
        return with_origins(group, token.source, self.record, token.shard)[low:high], True


class RowClassifier:
    """Adds the dedup rule's verdict to each row of one range (module docstring)."""

    def __init__(self, dedup: DedupFilter, via: Via | None = None) -> None:
        self.dedup = dedup
        self.via = via
        self._by_token: dict[str, str | None] = {}

    def verdict(self, row: EventRow) -> str | None:
        """The verdict of a row whose transaction needs no per-row resolution."""
        op = row[_OP]
        if op == "heartbeat" or op == HOP_MARKER:
            return None
        if row[_SOURCE] is None:
            until = self.dedup.overlap_until.get(row[_SHARD])
            return "unknown" if until is not None and row[_TS] <= until else None
        text = row[_TOKEN]  # one per transaction: classify each transaction once
        if text not in self._by_token:
            if len(self._by_token) > 4096:
                self._by_token.clear()
            verdict = self.dedup.classify(EventToken.loads(text)).value
            self._by_token[text] = None if verdict == "deliver" else verdict
        return self._by_token[text]

    __call__ = verdict

    def marked(self, rows: Iterator[EventRow]) -> Iterator[EventRow]:
        """`rows` with their verdicts added as the last field (a retired shard's rows first
        sliced by the `Via`)."""
        for group in _groups(rows):
            exact = True
            if self.via is not None:
                group, exact = self.via.sliced(group)
            if not group:
                continue
            if not exact:  # a group across the retired range's ends: delivered and counted
                yield from ((*row, "straddle") for row in group)
                continue
            verdict = self.verdict(group[0])
            if verdict == "straddle":
                yield from self._resolved(group)
            else:
                yield from ((*row, verdict) for row in group)

    def _resolved(self, group: list[EventRow]) -> Iterator[EventRow]:
        """A group across the watermark: its delivered prefix dropped exactly, or all of it
        delivered and counted."""
        token = EventToken.loads(group[0][_TOKEN])
        source = token.source
        assert source is not None
        name = canonical_shard_name(source.shard)
        watermark = self.dedup.watermarks[name]
        record = self.dedup.recent.get(name)
        delivered = rows_within(group, source, watermark, record, token.shard)
        for index, row in enumerate(group):
            if delivered is None:
                yield (*row, "straddle")
            else:
                yield (*row, "hop" if index < delivered else None)
