"""What both GTID flavours share: errors, the flavour, comparisons and the text forms."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum
from typing import Any, Protocol

from updatestream.core.errors import UpdateStreamError

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


class _Flavored(Protocol):
    @property
    def flavor(self) -> Flavor: ...


class _Position:
    """What both flavours' positions share: immutable entries (set once by the subclass's
    constructor, with their hash), equality by entries, and the text they parse from as repr."""

    __slots__ = ()
    _entries: Mapping[Any, Any]
    _hash: int

    def is_empty(self) -> bool:
        return not self._entries

    def __repr__(self) -> str:
        return f"{type(self).__name__}.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Position) or type(other) is not type(self):
            return NotImplemented
        return self._entries == other._entries

    def __hash__(self) -> int:
        return self._hash


def _same_flavor(a: _Flavored, b: _Flavored) -> None:
    if type(a) is not type(b):
        raise PositionError(
            f"cannot relate a {a.flavor.value} position ({str(a)!r}) to a {b.flavor.value} "
            f"position ({str(b)!r}); every shard of a keyspace must use one flavour"
        )
