"""The serving shard map of a keyspace and the history of its changes.

A shard map is a complete, non-overlapping partition of the keyspace into key ranges (the shard
names). A split or merge replaces it; :class:`ShardMapHistory` keeps every map with the time it
started serving, so a reader can tell which shards owned a keyspace id at a given moment.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import (
    InvalidKeyRange,
    KeyRange,
    normalize_keyspace_id,
    parse_shard_names,
    sort_key,
)

__all__ = [
    "ShardMap",
    "ShardMapChange",
    "ShardMapError",
    "ShardMapHistory",
    "overlaps",
]

_FIX = "list shards that cover the whole keyspace exactly once, like -80,80- or -40,40-80,80-"


class ShardMapError(UpdateStreamError):
    """A shard map that is not a complete, non-overlapping partition, or a bad history."""


def _validate(shards: Sequence[KeyRange]) -> None:
    """Raise ShardMapError naming the first gap or overlap in the sorted ``shards``."""
    listed = ",".join(shard.name for shard in shards)
    if not shards:
        raise ShardMapError(f"shard map is empty; {_FIX}")
    if shards[0].start:
        gap = KeyRange(b"", shards[0].start)
        raise ShardMapError(f"shard map {listed}: no shard covers {gap}; {_FIX}")
    for left, right in itertools.pairwise(shards):
        if not left.end or left.end > right.start:
            common = left.intersection(right)
            raise ShardMapError(
                f"shard map {listed}: {left} and {right} overlap on {common}; {_FIX}"
            )
        if left.end < right.start:
            gap = KeyRange(left.end, right.start)
            raise ShardMapError(f"shard map {listed}: no shard covers {gap}; {_FIX}")
    if shards[-1].end:
        gap = KeyRange(shards[-1].end, b"")
        raise ShardMapError(f"shard map {listed}: no shard covers {gap}; {_FIX}")


class _Immutable:
    """Set once in ``__init__`` (through ``object.__setattr__``), never again."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; cannot set {name}")


class ShardMap(_Immutable):
    """An immutable, validated partition of the keyspace into shards, sorted by start."""

    __slots__ = ("_shards", "_starts")

    _shards: tuple[KeyRange, ...]
    _starts: tuple[bytes, ...]

    def __init__(self, shards: Iterable[KeyRange]) -> None:
        items = list(shards)
        for item in items:
            if not isinstance(item, KeyRange):
                raise ShardMapError(
                    f"shard map entries must be key ranges, got {type(item).__name__} {item!r}; "
                    "parse shard names with KeyRange.parse or ShardMap.parse"
                )
        ordered = tuple(sorted(items, key=sort_key))
        _validate(ordered)
        object.__setattr__(self, "_shards", ordered)
        object.__setattr__(self, "_starts", tuple(shard.start for shard in ordered))

    def __reduce__(self) -> tuple[type[ShardMap], tuple[tuple[KeyRange, ...]]]:
        # Pickled into Spark tasks: rebuild (and re-validate) from the shards.
        return (ShardMap, (self._shards,))

    @classmethod
    def parse(cls, text: str) -> ShardMap:
        """Parse a comma-separated shard list like ``-80,80-``."""
        try:
            ranges = parse_shard_names(text)
        except InvalidKeyRange as exc:
            raise ShardMapError(f"shard map {text!r}: {exc}") from None
        return cls(ranges)

    @property
    def shards(self) -> tuple[KeyRange, ...]:
        return self._shards

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(shard.name for shard in self._shards)

    def __str__(self) -> str:
        return ",".join(self.names)

    def __repr__(self) -> str:
        return f"ShardMap.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardMap):
            return NotImplemented
        return self._shards == other._shards

    def __hash__(self) -> int:
        return hash(self._shards)

    def __iter__(self) -> Iterator[KeyRange]:
        return iter(self._shards)

    def __len__(self) -> int:
        return len(self._shards)

    def __contains__(self, shard: object) -> bool:
        return shard in self._shards

    def shard_for(self, keyspace_id: bytes) -> KeyRange:
        """The one shard whose key range contains ``keyspace_id``."""
        kid = normalize_keyspace_id(keyspace_id)
        return self._shards[bisect.bisect_right(self._starts, kid) - 1]

    def shards_for(self, key_range: KeyRange) -> list[KeyRange]:
        """Every shard sharing at least one keyspace id with ``key_range``, in start order."""
        first = bisect.bisect_right(self._starts, key_range.start) - 1
        found: list[KeyRange] = []
        for shard in self._shards[first:]:
            if not shard.intersects(key_range):
                break
            found.append(shard)
        return found


def overlaps(old: ShardMap, new: ShardMap) -> dict[KeyRange, list[KeyRange]]:
    """For each shard of ``new``, the shards of ``old`` it takes keyspace ids from.

    A shard present in both maps maps to itself alone; after a split each destination maps to
    its one source, after a merge the destination maps to every source.
    """
    return {shard: old.shards_for(shard) for shard in new.shards}


@dataclass(frozen=True)
class ShardMapChange:
    """``shard_map`` started serving at ``at`` (unix seconds)."""

    at: float
    shard_map: ShardMap

    def __post_init__(self) -> None:
        if isinstance(self.at, bool) or not isinstance(self.at, int | float):
            raise ShardMapError(f"shard map change time must be unix seconds, got {self.at!r}")
        if not math.isfinite(self.at):
            raise ShardMapError(f"shard map change time {self.at!r} is not a finite number")
        if not isinstance(self.shard_map, ShardMap):
            raise ShardMapError(
                f"shard map change needs a ShardMap, got {type(self.shard_map).__name__}"
            )


class ShardMapHistory(_Immutable):
    """Immutable list of shard map changes, ordered by time (equal times: the later one wins)."""

    __slots__ = ("_entries", "_times")

    _entries: tuple[ShardMapChange, ...]
    _times: tuple[float, ...]

    def __init__(self, entries: Iterable[ShardMapChange] = ()) -> None:
        items = tuple(entries)
        for earlier, later in itertools.pairwise(items):
            if later.at < earlier.at:
                raise ShardMapError(
                    f"shard map history goes back in time: {later.shard_map} at {later.at} "
                    f"follows {earlier.shard_map} at {earlier.at}; list changes oldest first"
                )
        object.__setattr__(self, "_entries", items)
        object.__setattr__(self, "_times", tuple(entry.at for entry in items))

    def __reduce__(self) -> tuple[type[ShardMapHistory], tuple[tuple[ShardMapChange, ...]]]:
        return (ShardMapHistory, (self._entries,))

    @property
    def entries(self) -> tuple[ShardMapChange, ...]:
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardMapHistory):
            return NotImplemented
        return self._entries == other._entries

    def __hash__(self) -> int:
        return hash(self._entries)

    def __repr__(self) -> str:
        return f"ShardMapHistory({list(self._entries)!r})"

    @property
    def current(self) -> ShardMap:
        """The shard map serving now (the last change)."""
        if not self._entries:
            raise ShardMapError(
                "shard map history is empty; record the keyspace's serving shard map first"
            )
        return self._entries[-1].shard_map

    def at(self, ts: float) -> ShardMap:
        """The shard map that was serving at ``ts`` (unix seconds)."""
        index = bisect.bisect_right(self._times, ts) - 1
        if index < 0:
            first = f"the first change is at {self._times[0]}" if self._times else "it is empty"
            raise ShardMapError(
                f"no shard map is known at {ts}: {first} in the shard map history; "
                "start from a later time or record an earlier shard map"
            )
        return self._entries[index].shard_map

    def with_change(self, shard_map: ShardMap, at: float) -> ShardMapHistory:
        """A new history with ``shard_map`` serving from ``at`` (not before the last change)."""
        change = ShardMapChange(at=at, shard_map=shard_map)
        if self._entries and at < self._entries[-1].at:
            last = self._entries[-1]
            raise ShardMapError(
                f"cannot record shard map {shard_map} at {at}: it is before the last change "
                f"({last.shard_map} at {last.at}); record changes in time order"
            )
        return ShardMapHistory((*self._entries, change))

    def to_json(self) -> list[dict[str, object]]:
        """JSON-safe form: ``[{"at": 1700000000.5, "shards": "-80,80-"}, ...]``."""
        return [{"at": entry.at, "shards": str(entry.shard_map)} for entry in self._entries]

    @classmethod
    def from_json(cls, data: object) -> ShardMapHistory:
        """Inverse of :meth:`to_json`; errors name the offending entry."""
        if not isinstance(data, list | tuple):
            raise ShardMapError(
                f"shard map history must be a list of {{'at', 'shards'}} objects, got {data!r}"
            )
        changes: list[ShardMapChange] = []
        for index, item in enumerate(data):
            if not isinstance(item, Mapping) or set(item) != {"at", "shards"}:
                raise ShardMapError(
                    f"shard map history entry {index} ({item!r}) must be an object with exactly "
                    "'at' (unix seconds) and 'shards' (like \"-80,80-\")"
                )
            shards = item["shards"]
            if not isinstance(shards, str):
                raise ShardMapError(
                    f"shard map history entry {index}: 'shards' must be text like \"-80,80-\", "
                    f"got {shards!r}"
                )
            try:
                changes.append(ShardMapChange(at=item["at"], shard_map=ShardMap.parse(shards)))
            except ShardMapError as exc:
                raise ShardMapError(f"shard map history entry {index}: {exc}") from None
        return cls(changes)
