"""What a stream read of each shard's last transactions: enough to split a grouped copy exactly.

Filtered replication may apply several source transactions as one destination transaction (a
group). When a stream hops, its watermark on the source can fall inside such a group: the group's
first source transactions were delivered from the source, the rest were not. The group's rows
come in the source's order, so the delivered part is a prefix, and its length is the number of
rows those source transactions had in the stream's key range and in the destination's range.
`RecentTransactions` keeps exactly that for one shard: the position after each of the last
transactions read and the keyspace ids of its rows in the stream's key range, in order, from a
base position on. A stream keeps one per shard in its offsets and hands the sources' to the dedup
rule when it hops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import (
    Flavor,
    GTIDParseError,
    GTIDPosition,
    parse_position,
    position_contains,
    position_from_json,
    position_to_json,
)

MAX_ROWS = 2048  # rows kept per shard (a longer group is counted as unresolved, not guessed)
MAX_TRANSACTIONS = 256


# the positions of the records of a few offsets (a batch's start and end, the next end) for up
# to 8 shards; older ones fall out
_PARSED_POSITIONS = 4 * MAX_TRANSACTIONS * 8


@lru_cache(maxsize=_PARSED_POSITIONS)
def _parse_entry_position(text: str, flavor: Flavor) -> GTIDPosition:
    """A record's position, parsed once: a stream's driver reads its offsets several times a
    batch, and all but a batch's new transactions were in the record before (positions are
    immutable, so one parse serves every record that holds it)."""
    return parse_position(text, flavor)


class RecentRowsError(UpdateStreamError):
    """A recent-transactions record (or its JSON form) is malformed."""


@dataclass(frozen=True)
class RecentTransactions:
    """The transactions after `base` that a stream read of one shard (module docstring)."""

    base: GTIDPosition
    entries: tuple[tuple[GTIDPosition, tuple[str, ...]], ...] = ()

    @property
    def position(self) -> GTIDPosition:
        """Where the record ends: after its last transaction (the base when empty)."""
        return self.entries[-1][0] if self.entries else self.base

    def then(self, read: Iterable[tuple[GTIDPosition, tuple[str, ...]]]) -> RecentTransactions:
        """This record followed by the transactions `read` after its end, trimmed."""
        entries = list(self.entries)
        entries += [(position, tuple(ids)) for position, ids in read]
        return RecentTransactions(self.base, tuple(entries)).trimmed()

    def trimmed(
        self, max_rows: int = MAX_ROWS, max_transactions: int = MAX_TRANSACTIONS
    ) -> RecentTransactions:
        """The newest transactions within the bounds; the base moves past the dropped ones."""
        entries, base = list(self.entries), self.base
        rows = sum(len(ids) for _, ids in entries)
        while entries and (rows > max_rows or len(entries) > max_transactions):
            base, dropped = entries.pop(0)
            rows -= len(dropped)
        return RecentTransactions(base, tuple(entries))

    def transactions_between(
        self, after: GTIDPosition, upto: GTIDPosition
    ) -> list[tuple[GTIDPosition, tuple[str, ...]]] | None:
        """The transactions in `upto` and not in `after`, in order, each with the position after
        it and its rows' keyspace ids; None when the record does not reach back to `after` or
        forward to `upto`."""
        if not position_contains(after, self.base) or not position_contains(self.position, upto):
            return None
        return [
            (position, ids)
            for position, ids in self.entries
            if position_contains(upto, position) and not position_contains(after, position)
        ]

    def rows_between(self, after: GTIDPosition, upto: GTIDPosition) -> list[str] | None:
        """The keyspace ids of the rows of `transactions_between(after, upto)`, in order."""
        found = self.transactions_between(after, upto)
        return None if found is None else [k for _, ids in found for k in ids]

    def to_json(self) -> dict[str, object]:
        return {
            **position_to_json(self.base),
            "tx": [[str(position), ",".join(ids)] for position, ids in self.entries],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RecentTransactions:
        if not isinstance(data, Mapping):
            raise RecentRowsError(f"recent transactions must be an object, got {data!r}")
        try:
            base = position_from_json(data, "recent.")
            raw = data.get("tx", [])
            if not isinstance(raw, list):
                raise RecentRowsError(f"recent transactions field 'tx' must be a list: {raw!r}")
            entries = tuple(
                (
                    _parse_entry_position(str(position), base.flavor),
                    tuple(filter(None, ids.split(","))),
                )
                for position, ids in raw
            )
        except (GTIDParseError, TypeError, ValueError, AttributeError) as exc:
            raise RecentRowsError(f"recent transactions are malformed: {exc}") from None
        return cls(base, entries)
