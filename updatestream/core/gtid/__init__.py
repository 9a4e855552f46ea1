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
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, TypeAlias

from updatestream.core.gtid._base import (
    _MARIADB_FORMS,
    _MARIADB_GTID_RE,
    _MYSQL_FORMS,
    Comparison,
    Flavor,
    GTIDParseError,
    PositionError,
    _bad,
    _same_flavor,
)
from updatestream.core.gtid.mariadb import MariaDBGTID, MariaDBPosition
from updatestream.core.gtid.mysql import MySQLGTIDSet

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
    "ordinal",
    "parse_position",
    "position_contains",
    "position_from_json",
    "position_intersection",
    "position_to_json",
    "position_union",
]

GTIDPosition: TypeAlias = MariaDBPosition | MySQLGTIDSet


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
    return bool(_of_one_flavor(a, b, "contains"))


def position_union(a: GTIDPosition, b: GTIDPosition) -> GTIDPosition:
    """``a.union(b)`` for positions typed as GTIDPosition; mixing flavours raises."""
    union: GTIDPosition = _of_one_flavor(a, b, "union")
    return union


def _of_one_flavor(a: GTIDPosition, b: GTIDPosition, method: str) -> Any:
    """``a.<method>(b)`` when both positions are of one flavour; otherwise PositionError."""
    _same_flavor(a, b)
    return getattr(a, method)(b)


def position_intersection(a: GTIDPosition, b: GTIDPosition) -> GTIDPosition:
    """The transactions in both ``a`` and ``b``; mixing flavours raises."""
    if isinstance(a, MariaDBPosition) and isinstance(b, MariaDBPosition):
        return a.intersection(b)
    if isinstance(a, MySQLGTIDSet) and isinstance(b, MySQLGTIDSet):
        return a.intersection(b)
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


def position_to_json(position: GTIDPosition) -> dict[str, str]:
    """The ``{"pos": text, "flavor": "mariadb" | "mysql"}`` form `position_from_json` reads."""
    return {"pos": str(position), "flavor": position.flavor.value}


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


_MARIADB_TEXT = re.compile(r"^\d+-\d+-\d+(,\d+-\d+-\d+)*$")


@lru_cache(maxsize=8192)
def ordinal(position_text: str) -> int:
    """A number that grows with every transaction along one shard's GTID positions: the sum of
    the sequence numbers over the domains (MariaDB), the number of transactions in the set
    (MySQL); 0 for text that is no position. Differences count transactions along one shard."""
    if not position_text:
        return 0
    if _MARIADB_TEXT.match(position_text):  # the common case, without building a position
        return sum(int(gtid.rpartition("-")[2]) for gtid in position_text.split(","))
    try:
        position = parse_position(position_text)
    except GTIDParseError:
        return 0
    if isinstance(position, MariaDBPosition):
        return sum(gtid.seq for gtid in position)
    assert isinstance(position, MySQLGTIDSet)
    return sum(
        end - start + 1 for intervals in position.entries.values() for start, end in intervals
    )
