"""MariaDB GTID positions: ``domain-server-seq`` per replication domain."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from updatestream.core.gtid._base import (
    _MARIADB_FORMS,
    _MARIADB_GTID_RE,
    _UINT32_MAX,
    _UINT64_MAX,
    Flavor,
    GTIDParseError,
    _bad,
    _Position,
    _same_flavor,
)

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


class MariaDBPosition(_Position):
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

    def __iter__(self) -> Iterator[MariaDBGTID]:
        return iter(self._entries.values())

    def __str__(self) -> str:
        return ",".join(str(gtid) for gtid in self._entries.values())

    def __reduce__(self) -> tuple[object, tuple[tuple[MariaDBGTID, ...]]]:
        return (MariaDBPosition, (tuple(self._entries.values()),))
