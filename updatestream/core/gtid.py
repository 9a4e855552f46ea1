"""GTID positions of MariaDB and MySQL as immutable value objects.

A *GTID position* says which transactions of a shard have been applied (or, in a stream,
delivered). Two flavours exist and both are supported:

* MariaDB: ``domain-server-seq`` per replication domain, comma separated (``0-1-100,1-2-7``).
  A position holds one GTID per domain; a transaction of a domain is included when its sequence
  number is at or below the domain's sequence number.
* MySQL: a GTID set, ``uuid:interval[:interval...]`` per source server, comma separated
  (``3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9``). Intervals are closed and may have holes.

Both kinds answer ``contains`` (is every transaction of the other also here?) and ``union``,
which is what comparing Event Tokens and removing hop duplicates needs.
"""

from __future__ import annotations

import re
import uuid as uuid_module
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import ClassVar, TypeAlias

from updatestream.core.errors import UpdateStreamError

__all__ = [
    "Comparison",
    "Flavor",
    "GTIDParseError",
    "GTIDPosition",
    "MariaDBGTID",
    "MariaDBPosition",
    "MySQLGTIDSet",
    "PositionError",
    "compare_positions",
    "parse_position",
    "position_contains",
    "position_union",
]

_UINT32_MAX = 2**32 - 1
_UINT64_MAX = 2**64 - 1
# MySQL's GNO is a signed 64-bit integer that starts at 1.
_GNO_MAX = 2**63 - 1

_MARIADB_FORMS = "MariaDB 'domain-server-seq[,domain-server-seq...]' such as '0-1-100,1-2-7'"
_MYSQL_FORMS = (
    "MySQL 'uuid:N[-M][:N[-M]...][,uuid:...]' such as "
    "'3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9'"
)
_MARIADB_GTID_RE = re.compile(r"(\d+)-(\d+)-(\d+)")
_MYSQL_INTERVAL_RE = re.compile(r"(\d+)(?:-(\d+))?")


class GTIDParseError(UpdateStreamError):
    """A GTID or GTID position text could not be parsed (the message quotes it)."""


class PositionError(GTIDParseError):
    """Two positions cannot be related, e.g. a MariaDB position against a MySQL GTID set."""


class Flavor(Enum):
    """Which server family wrote a position."""

    MARIADB = "mariadb"
    MYSQL = "mysql"


class Comparison(Enum):
    """Result of comparing two positions or Event Tokens; the order is partial."""

    BEFORE = "before"
    AFTER = "after"
    EQUAL = "equal"
    UNKNOWN = "unknown"

    def mirror(self) -> Comparison:
        """The result of the comparison with its operands swapped."""
        if self is Comparison.BEFORE:
            return Comparison.AFTER
        if self is Comparison.AFTER:
            return Comparison.BEFORE
        return self


def _bad(text: str, why: str, forms: str) -> GTIDParseError:
    return GTIDParseError(f"cannot parse GTID position {text!r}: {why}; expected {forms}")


# --------------------------------------------------------------------------------------------
# MariaDB


@dataclass(frozen=True, order=True)
class MariaDBGTID:
    """One MariaDB GTID: replication domain, originating server id and sequence number."""

    domain: int
    server: int
    seq: int

    def __post_init__(self) -> None:
        for name, value, top in (
            ("domain", self.domain, _UINT32_MAX),
            ("server", self.server, _UINT32_MAX),
            ("seq", self.seq, _UINT64_MAX),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise GTIDParseError(
                    f"MariaDB GTID {name} must be an integer in 0..{top}, got {value!r}"
                )

    @classmethod
    def parse(cls, text: str) -> MariaDBGTID:
        """Parse ``domain-server-seq`` such as ``0-1-5``."""
        match = _MARIADB_GTID_RE.fullmatch(text.strip())
        if match is None:
            raise _bad(text, "not a 'domain-server-seq' GTID", _MARIADB_FORMS)
        domain, server, seq = (int(group) for group in match.groups())
        try:
            return cls(domain, server, seq)
        except GTIDParseError as exc:
            raise _bad(text, str(exc), _MARIADB_FORMS) from None

    def __str__(self) -> str:
        return f"{self.domain}-{self.server}-{self.seq}"


class MariaDBPosition:
    """A MariaDB GTID position: at most one GTID per replication domain.

    ``contains`` looks at sequence numbers only (as MariaDB does when it waits for a position):
    two positions whose domains end at the same sequence number from different server ids
    contain each other without being equal.
    """

    __slots__ = ("_entries", "_hash")
    flavor: ClassVar[Flavor] = Flavor.MARIADB

    def __init__(self, gtids: Iterable[MariaDBGTID] = ()) -> None:
        entries: dict[int, MariaDBGTID] = {}
        for gtid in gtids:
            if gtid.domain in entries:
                raise GTIDParseError(
                    f"MariaDB position has two GTIDs for domain {gtid.domain} "
                    f"({entries[gtid.domain]} and {gtid}); keep one GTID per domain"
                )
            entries[gtid.domain] = gtid
        self._entries: Mapping[int, MariaDBGTID] = MappingProxyType(dict(sorted(entries.items())))
        self._hash = hash(tuple(self._entries.values()))

    @classmethod
    def parse(cls, text: str) -> MariaDBPosition:
        """Parse ``0-1-100,1-2-7``; the empty (or blank) text is the empty position."""
        stripped = text.strip()
        if not stripped:
            return cls()
        gtids: list[MariaDBGTID] = []
        for part in stripped.split(","):
            piece = part.strip()
            match = _MARIADB_GTID_RE.fullmatch(piece)
            if match is None:
                raise _bad(text, f"{piece!r} is not a 'domain-server-seq' GTID", _MARIADB_FORMS)
            try:
                gtids.append(MariaDBGTID(*(int(group) for group in match.groups())))
            except GTIDParseError as exc:
                raise _bad(text, str(exc), _MARIADB_FORMS) from None
        try:
            return cls(gtids)
        except GTIDParseError as exc:
            raise _bad(text, str(exc), _MARIADB_FORMS) from None

    @property
    def entries(self) -> Mapping[int, MariaDBGTID]:
        """Domain -> the GTID of that domain, sorted by domain."""
        return self._entries

    def domain_seq(self, domain: int) -> int | None:
        """The sequence number reached in ``domain``, or None when the domain is absent."""
        gtid = self._entries.get(domain)
        return None if gtid is None else gtid.seq

    def contains(self, other: MariaDBPosition) -> bool:
        """True when every domain of ``other`` is here with a sequence number at least as high."""
        _same_flavor(self, other)
        for domain, gtid in other._entries.items():
            mine = self._entries.get(domain)
            if mine is None or mine.seq < gtid.seq:
                return False
        return True

    def union(self, other: MariaDBPosition) -> MariaDBPosition:
        """Per domain the GTID with the higher sequence number (ties: the higher server id)."""
        _same_flavor(self, other)
        merged = dict(self._entries)
        for domain, gtid in other._entries.items():
            mine = merged.get(domain)
            if mine is None or (gtid.seq, gtid.server) > (mine.seq, mine.server):
                merged[domain] = gtid
        return MariaDBPosition(merged.values())

    def advance(self, gtid: MariaDBGTID) -> MariaDBPosition:
        """The position after the transaction ``gtid``: its domain now ends at ``gtid``."""
        merged = dict(self._entries)
        merged[gtid.domain] = gtid
        return MariaDBPosition(merged.values())

    def is_empty(self) -> bool:
        return not self._entries

    def __iter__(self) -> Iterator[MariaDBGTID]:
        return iter(self._entries.values())

    def __str__(self) -> str:
        return ",".join(str(gtid) for gtid in self._entries.values())

    def __repr__(self) -> str:
        return f"MariaDBPosition.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MariaDBPosition):
            return NotImplemented
        return self._entries == other._entries

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[object, tuple[tuple[MariaDBGTID, ...]]]:
        return (MariaDBPosition, (tuple(self._entries.values()),))


# --------------------------------------------------------------------------------------------
# MySQL

Interval: TypeAlias = tuple[int, int]


def _normalise_uuid(text: str, whole: str) -> str:
    raw = text.strip()
    hexdigits = raw.replace("-", "")
    if len(hexdigits) != 32 or not all(ch in "0123456789abcdefABCDEF" for ch in hexdigits):
        raise _bad(whole, f"{raw!r} is not a server UUID", _MYSQL_FORMS)
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


class MySQLGTIDSet:
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

    def add(self, uuid: str, seq: int) -> MySQLGTIDSet:
        """This set plus the single GTID ``uuid:seq`` (the position after that transaction)."""
        combined: dict[str, list[Interval]] = {sid: list(iv) for sid, iv in self._entries.items()}
        key = _normalise_uuid(uuid, f"{uuid}:{seq}")
        combined.setdefault(key, []).append((seq, seq))
        return MySQLGTIDSet(combined)

    def is_empty(self) -> bool:
        return not self._entries

    def __str__(self) -> str:
        return ",".join(
            sid + "".join(f":{s}" if s == e else f":{s}-{e}" for s, e in intervals)
            for sid, intervals in self._entries.items()
        )

    def __repr__(self) -> str:
        return f"MySQLGTIDSet.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MySQLGTIDSet):
            return NotImplemented
        return self._entries == other._entries

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[object, tuple[dict[str, tuple[Interval, ...]]]]:
        return (MySQLGTIDSet, (dict(self._entries),))


GTIDPosition: TypeAlias = MariaDBPosition | MySQLGTIDSet


def _same_flavor(a: GTIDPosition, b: GTIDPosition) -> None:
    if type(a) is not type(b):
        raise PositionError(
            f"cannot relate a {a.flavor.value} position ({str(a)!r}) to a {b.flavor.value} "
            f"position ({str(b)!r}); every shard of a keyspace must use one flavour"
        )


def parse_position(text: str, flavor: Flavor | None = None) -> GTIDPosition:
    """Parse a position of the given flavour, or detect the flavour from the text.

    Detection: a ``:`` means a MySQL GTID set, otherwise MariaDB. The empty text has no
    flavour of its own, so it needs ``flavor``.
    """
    if flavor is Flavor.MARIADB:
        return MariaDBPosition.parse(text)
    if flavor is Flavor.MYSQL:
        return MySQLGTIDSet.parse(text)
    if flavor is not None:
        raise GTIDParseError(f"unknown GTID flavour {flavor!r}; use Flavor.MARIADB or Flavor.MYSQL")
    stripped = text.strip()
    if not stripped:
        raise GTIDParseError(
            f"cannot tell the flavour of the empty GTID position {text!r}; "
            "pass flavor=Flavor.MARIADB or Flavor.MYSQL"
        )
    if ":" in stripped:
        return MySQLGTIDSet.parse(text)
    if _MARIADB_GTID_RE.match(stripped):
        return MariaDBPosition.parse(text)
    raise _bad(text, "neither flavour", f"{_MARIADB_FORMS} or {_MYSQL_FORMS}")


def position_contains(a: GTIDPosition, b: GTIDPosition) -> bool:
    """``a.contains(b)`` for positions typed as GTIDPosition; mixing flavours raises."""
    if isinstance(a, MariaDBPosition) and isinstance(b, MariaDBPosition):
        return a.contains(b)
    if isinstance(a, MySQLGTIDSet) and isinstance(b, MySQLGTIDSet):
        return a.contains(b)
    _same_flavor(a, b)
    raise AssertionError("unreachable")  # pragma: no cover


def position_union(a: GTIDPosition, b: GTIDPosition) -> GTIDPosition:
    """``a.union(b)`` for positions typed as GTIDPosition; mixing flavours raises."""
    if isinstance(a, MariaDBPosition) and isinstance(b, MariaDBPosition):
        return a.union(b)
    if isinstance(a, MySQLGTIDSet) and isinstance(b, MySQLGTIDSet):
        return a.union(b)
    _same_flavor(a, b)
    raise AssertionError("unreachable")  # pragma: no cover


def compare_positions(a: GTIDPosition, b: GTIDPosition) -> Comparison:
    """EQUAL when each contains the other, BEFORE when only ``b`` contains ``a``, AFTER when
    only ``a`` contains ``b``, otherwise UNKNOWN. Mixing flavours raises PositionError."""
    a_has_b, b_has_a = position_contains(a, b), position_contains(b, a)
    if a_has_b and b_has_a:
        return Comparison.EQUAL
    if b_has_a:
        return Comparison.BEFORE
    if a_has_b:
        return Comparison.AFTER
    return Comparison.UNKNOWN


def position_from_json(
    data: Mapping[str, object], field: str, default_flavor: Flavor | None = None
) -> GTIDPosition:
    """Read the ``{"pos": text, "flavor": "mariadb" | "mysql"}`` form that Event Tokens and dedup
    filters store. ``flavor`` may be left out (then ``default_flavor``, else detected from a
    non-empty ``pos``). Errors name ``field``, the prefix of the keys where the form sits."""
    raw_flavor = data.get("flavor")
    flavor = default_flavor
    if raw_flavor is not None:
        try:
            flavor = Flavor(raw_flavor)
        except ValueError:
            raise GTIDParseError(
                f"field {field + 'flavor'!r} must be 'mariadb' or 'mysql', got {raw_flavor!r}"
            ) from None
    text = data.get("pos")
    if not isinstance(text, str):
        raise GTIDParseError(
            f"field {field + 'pos'!r} must be a GTID position string, got {text!r}"
        )
    try:
        return parse_position(text, flavor)
    except GTIDParseError as exc:
        raise GTIDParseError(f"field {field + 'pos'!r} is invalid: {exc}") from None
