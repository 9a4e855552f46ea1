"""MySQL GTID sets: ``uuid:interval[:interval...]`` per source server."""

from __future__ import annotations

import functools
import uuid as uuid_module
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import ClassVar, TypeAlias

from updatestream.core.gtid._base import (
    _GNO_MAX,
    _MYSQL_FORMS,
    _MYSQL_INTERVAL_RE,
    Flavor,
    GTIDParseError,
    _bad,
    _Position,
    _same_flavor,
)

# --------------------------------------------------------------------------------------------
# MySQL

Interval: TypeAlias = tuple[int, int]


def _normalise_uuid(text: str, whole: str) -> str:
    key = _uuid_key(text)
    if key is None:
        raise _bad(whole, f"{text.strip()!r} is not a server UUID", _MYSQL_FORMS)
    return key


@functools.lru_cache(maxsize=256)
def _uuid_key(text: str) -> str | None:
    """`text`'s server UUID in its canonical form, None when it is not one. Cached: a binlog
    reader asks for its server's UUID several times per transaction."""
    hexdigits = text.strip().replace("-", "")
    if len(hexdigits) != 32 or not all(ch in "0123456789abcdefABCDEF" for ch in hexdigits):
        return None
    return str(uuid_module.UUID(hex=hexdigits))


def _merge_intervals(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """Sort closed intervals and merge the overlapping and adjacent ones."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1] + 1:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return tuple(merged)


def _covers(mine: tuple[Interval, ...], theirs: tuple[Interval, ...]) -> bool:
    """True when every interval of ``theirs`` lies inside one interval of ``mine``."""
    index = 0
    for start, end in theirs:
        while index < len(mine) and mine[index][1] < start:
            index += 1
        if index == len(mine):
            return False
        low, high = mine[index]
        if not (low <= start and end <= high):
            return False
    return True


class MySQLGTIDSet(_Position):
    """A MySQL GTID set: server UUID (lower case) -> sorted, merged closed intervals of GNOs."""

    __slots__ = ("_entries", "_hash")
    flavor: ClassVar[Flavor] = Flavor.MYSQL

    def __init__(self, entries: Mapping[str, Iterable[Interval]] | None = None) -> None:
        normal: dict[str, tuple[Interval, ...]] = {}
        for sid, intervals in (entries or {}).items():
            key = _normalise_uuid(sid, sid)
            checked: list[Interval] = list(normal.get(key, ()))
            for start, end in intervals:
                if not 1 <= start <= end <= _GNO_MAX:
                    raise GTIDParseError(
                        f"MySQL GTID interval {start}-{end} of {key} is invalid; intervals "
                        f"are N or N-M with 1 <= N <= M <= {_GNO_MAX}"
                    )
                checked.append((start, end))
            merged = _merge_intervals(checked)
            if merged:
                normal[key] = merged
        self._entries: Mapping[str, tuple[Interval, ...]] = MappingProxyType(
            dict(sorted(normal.items()))
        )
        self._hash = hash(tuple(self._entries.items()))

    @classmethod
    def parse(cls, text: str) -> MySQLGTIDSet:
        """Parse ``uuid:1-5:7-9,uuid2:1``; blanks and newlines (as MySQL prints) are ignored.

        The empty text is the empty set. Overlapping, unsorted or repeated parts are merged.
        """
        stripped = text.strip()
        if not stripped:
            return cls()
        collected: dict[str, list[Interval]] = {}
        for part in stripped.split(","):
            piece = "".join(part.split())
            if not piece:
                raise _bad(text, "empty part between commas", _MYSQL_FORMS)
            sid_text, sep, rest = piece.partition(":")
            if not sep:
                raise _bad(text, f"{piece!r} has no ':' after the server UUID", _MYSQL_FORMS)
            sid = _normalise_uuid(sid_text, text)
            intervals = collected.setdefault(sid, [])
            for interval_text in rest.split(":"):
                match = _MYSQL_INTERVAL_RE.fullmatch(interval_text)
                if match is None:
                    why = f"{interval_text!r} in {piece!r} is not an interval N or N-M"
                    if interval_text and not interval_text[0].isdigit():
                        why += " (tagged GTIDs of MySQL 8.3+ are not supported)"
                    raise _bad(text, why, _MYSQL_FORMS)
                start = int(match.group(1))
                end = int(match.group(2)) if match.group(2) is not None else start
                if not 1 <= start <= end <= _GNO_MAX:
                    raise _bad(
                        text,
                        f"interval {interval_text!r} needs 1 <= N <= M <= {_GNO_MAX}",
                        _MYSQL_FORMS,
                    )
                intervals.append((start, end))
        return cls(collected)

    @property
    def entries(self) -> Mapping[str, tuple[Interval, ...]]:
        """Server UUID -> its merged closed intervals, sorted by UUID."""
        return self._entries

    def contains(self, other: MySQLGTIDSet) -> bool:
        """True when every GTID of ``other`` is also in this set."""
        _same_flavor(self, other)
        for sid, theirs in other._entries.items():
            mine = self._entries.get(sid)
            if mine is None or not _covers(mine, theirs):
                return False
        return True

    def contains_gtid(self, sid: str, seq: int) -> bool:
        """True when the single GTID ``sid:seq`` is in this set."""
        intervals = self._entries.get(_normalise_uuid(sid, f"{sid}:{seq}"), ())
        return any(start <= seq <= end for start, end in intervals)

    def union(self, other: MySQLGTIDSet) -> MySQLGTIDSet:
        """Every GTID of either set."""
        _same_flavor(self, other)
        combined: dict[str, list[Interval]] = {sid: list(iv) for sid, iv in self._entries.items()}
        for sid, intervals in other._entries.items():
            combined.setdefault(sid, []).extend(intervals)
        return MySQLGTIDSet(combined)

    def intersection(self, other: MySQLGTIDSet) -> MySQLGTIDSet:
        """Every GTID in both sets."""
        _same_flavor(self, other)
        common: dict[str, list[Interval]] = {}
        for sid, mine in self._entries.items():
            for start, end in mine:
                for low, high in other._entries.get(sid, ()):
                    if max(start, low) <= min(end, high):
                        common.setdefault(sid, []).append((max(start, low), min(end, high)))
        return MySQLGTIDSet(common)

    def add(self, uuid: str, seq: int) -> MySQLGTIDSet:
        """This set plus the single GTID ``uuid:seq`` (the position after that transaction)."""
        combined: dict[str, list[Interval]] = {sid: list(iv) for sid, iv in self._entries.items()}
        key = _normalise_uuid(uuid, f"{uuid}:{seq}")
        combined.setdefault(key, []).append((seq, seq))
        return MySQLGTIDSet(combined)

    def __str__(self) -> str:
        return ",".join(
            sid + "".join(f":{s}" if s == e else f":{s}-{e}" for s, e in intervals)
            for sid, intervals in self._entries.items()
        )

    def __reduce__(self) -> tuple[object, tuple[dict[str, tuple[Interval, ...]]]]:
        return (MySQLGTIDSet, (dict(self._entries),))
