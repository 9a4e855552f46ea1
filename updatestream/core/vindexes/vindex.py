"""The vindex protocols and the value conversions the built-in kinds share.

A vindex maps a column value to a keyspace id (seed 004's "vindex"). Optional abilities are
separate protocols: :class:`Reversible` for kinds that can recover the value from a keyspace id,
and :class:`LookupStore` for the table a lookup vindex reads (implemented outside the core).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import ClassVar, Protocol, Self, runtime_checkable

from updatestream.core.errors import UpdateStreamError

__all__ = [
    "MAX_UINT64",
    "LookupStore",
    "Reversible",
    "Vindex",
    "VindexError",
    "describe",
    "pad_keyspace_id",
    "to_key_bytes",
    "to_uint64",
]

MAX_UINT64 = 2**64 - 1


class VindexError(UpdateStreamError):
    """A vindex that cannot be built, or a value it cannot map; names the vindex and the value."""


@runtime_checkable
class Vindex(Protocol):
    """Maps one column value to a keyspace id."""

    @property
    def name(self) -> str:
        """The vindex name in the VSchema (``"hash"``, ``"user_lookup"``)."""
        ...

    @property
    def type_name(self) -> str:
        """The registered kind (``"hash"``, ``"xxhash"``, ``"lookup_unique"`` ...)."""
        ...

    @property
    def cost(self) -> int:
        """Relative cost of a map; lower is preferred (0 computes, 10 reads a table)."""
        ...

    @property
    def is_unique(self) -> bool:
        """True when a value maps to at most one keyspace id (required of a primary vindex)."""
        ...

    def map(self, value: object) -> bytes | None:
        """The keyspace id of ``value``; None for NULL (no destination)."""
        ...


@runtime_checkable
class Reversible(Protocol):
    """A vindex that can recover the column value from a keyspace id."""

    def reverse_map(self, keyspace_id: bytes) -> object:
        """The value whose keyspace id is ``keyspace_id``."""
        ...


@runtime_checkable
class LookupStore(Protocol):
    """The table behind a lookup vindex (the SQL implementation lives outside the core)."""

    def lookup(self, value: object) -> bytes | None:
        """The keyspace id stored for ``value``, or None when there is no row."""
        ...

    def create(self, value: object, keyspace_id: bytes) -> None:
        """Store the association ``value -> keyspace_id``."""
        ...


def describe(name: str, type_name: str) -> str:
    """How errors name a vindex: ``vindex 'hash' (type hash)``."""
    return f"vindex {name!r} (type {type_name})"


def to_uint64(name: str, type_name: str, value: object) -> int | None:
    """Coerce a column value to an unsigned 64-bit integer; None stays None.

    Accepts ints (and integer types such as numpy's) and integral Decimals, as DB rows carry
    them. Refuses booleans, floats, text, negatives and values above 2**64-1.
    """
    if value is None:
        return None
    who = describe(name, type_name)
    if isinstance(value, bool):
        raise VindexError(
            f"{who} cannot map {value!r}: it takes an unsigned 64-bit integer, not a boolean"
        )
    number: int
    if isinstance(value, numbers.Integral):
        number = int(value)
    elif isinstance(value, Decimal):
        if not value.is_finite() or value != value.to_integral_value():
            raise VindexError(
                f"{who} cannot map {value!r}: it takes an unsigned 64-bit integer, "
                "not a fractional or non-finite decimal"
            )
        number = int(value)
    else:
        raise VindexError(
            f"{who} cannot map {value!r}: it takes an unsigned 64-bit integer, "
            f"not {type(value).__name__}; use an integer column or another vindex type "
            "(binary_md5, xxhash) for text"
        )
    if number < 0:
        raise VindexError(
            f"{who} cannot map {value!r}: negative numbers have no keyspace id; "
            "use an unsigned column or another vindex type (xxhash)"
        )
    if number > MAX_UINT64:
        raise VindexError(
            f"{who} cannot map {value!r}: it is above 2**64-1, the largest unsigned 64-bit integer"
        )
    return number


def to_key_bytes(name: str, type_name: str, value: object) -> bytes | None:
    """The bytes a hashing vindex hashes: text as UTF-8, bytes as is, numbers as decimal text.

    Integers and Decimals become their decimal text, as MySQL sends them in a query. Floats,
    booleans and other types are refused, since their text form is not stable.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value)).encode("ascii")
    if isinstance(value, Decimal) and value.is_finite():
        return format(value, "f").encode("ascii")
    raise VindexError(
        f"{describe(name, type_name)} cannot map {value!r}: it takes text, bytes or an integer, "
        f"not {type(value).__name__}; convert the value to text first"
    )


def pad_keyspace_id(name: str, type_name: str, keyspace_id: bytes) -> bytes:
    """Right-pad a (possibly normalised) keyspace id to the 8 bytes of a uint64 vindex."""
    raw = bytes(keyspace_id)
    if len(raw) > 8:
        raise VindexError(
            f"{describe(name, type_name)} cannot reverse keyspace id {raw.hex()!r}: "
            "it is longer than 8 bytes"
        )
    return raw.ljust(8, b"\x00")


@dataclass(frozen=True)
class FunctionalVindex:
    """What the unique kinds that compute a keyspace id from the value alone share: a name, and
    per kind a fixed type name and cost (`class K(FunctionalVindex, type_name="k", cost=1)`).
    Each kind writes its own `map`."""

    name: str
    type_name: ClassVar[str]
    cost: ClassVar[int]
    is_unique: ClassVar[bool] = True

    def __init_subclass__(cls, *, type_name: str, cost: int = 1, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.type_name = type_name
        cls.cost = cost

    @classmethod
    def create(cls, name: str, params: Mapping[str, str], lookup_store: LookupStore | None) -> Self:
        """The registry's factory: functional kinds take no parameters and no store."""
        return cls(name)
