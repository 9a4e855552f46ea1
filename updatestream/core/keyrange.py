"""Key ranges over keyspace ids, written in hex like Vitess shard names.

A key range is the half-open interval ``[start, end)`` of keyspace ids. ``start == b""`` means
unbounded below and ``end == b""`` unbounded above, so ``-`` is the whole keyspace.

Keyspace ids compare as unsigned big-endian byte strings where the shorter one is padded with zero
bytes: ``80`` equals ``8000`` and is below ``8000000000000001``. Both bounds are normalised by
stripping trailing zero bytes, so ``-80``, ``00-80`` and ``0000-8000`` are one range; after that,
Python's own byte-string order agrees with the padded order (a proper prefix sorts first).
"""

from __future__ import annotations

import binascii
import functools
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from updatestream.core.errors import UpdateStreamError

__all__ = [
    "FULL_RANGE",
    "InvalidKeyRange",
    "KeyRange",
    "are_contiguous",
    "format_keyspace_id",
    "normalize_keyspace_id",
    "parse_keyspace_id",
    "parse_shard_name_list",
    "parse_shard_names",
    "sort_key",
]


class InvalidKeyRange(UpdateStreamError):
    """A key range (or shard name) that cannot be parsed or is empty."""


def normalize_keyspace_id(value: bytes) -> bytes:
    """Strip trailing zero bytes: the canonical form under zero-padded comparison."""
    return bytes(value).rstrip(b"\x00")


def format_keyspace_id(keyspace_id: bytes) -> str:
    """Lower-case hex of a keyspace id, as printed by the CLI and in messages."""
    return bytes(keyspace_id).hex()


def parse_keyspace_id(text: str) -> bytes:
    """Parse a hex keyspace id (``"80"``, ``"166b40b44aba4bd6"``, optional ``0x`` prefix)."""
    raw = text.strip()
    if raw[:2].lower() == "0x":
        raw = raw[2:]
    return _unhex(raw, f"keyspace id {text!r}", "80", "166b40b44aba4bd6")


def _parse_bound(text: str, bound: str, whole: str) -> bytes:
    what = f"key range {whole!r}: bound {bound!r}"
    return _unhex(bound, what, "40-80 or 4000-8000", "40-80, -80 or 80-")


def _unhex(raw: str, what: str, whole_bytes: str, example: str) -> bytes:
    """The bytes of hex `raw`; an error names `what` and shows how to write it."""
    if len(raw) % 2:
        raise InvalidKeyRange(
            f"{what} has an odd number of hex digits; write whole bytes, like {whole_bytes}"
        )
    try:
        return binascii.unhexlify(raw)
    except (binascii.Error, ValueError):
        raise InvalidKeyRange(f"{what} is not hex; write it like {example}") from None


def _normalize_bounds(start: bytes, end: bytes, text: str | None) -> tuple[bytes, bytes]:
    """Strip trailing zeros from both bounds; refuse an empty range, naming ``text`` if given."""
    norm_start = normalize_keyspace_id(start)
    norm_end = normalize_keyspace_id(end)
    shown = repr(text) if text is not None else f"{start.hex()}-{end.hex()}"
    if end and not norm_end:
        raise InvalidKeyRange(
            f"key range {shown} is empty: its end is the lowest keyspace id; "
            "use an end above the start, or leave the end empty for unbounded"
        )
    if norm_end and norm_start >= norm_end:
        raise InvalidKeyRange(
            f"key range {shown} is empty: its start is not below its end; "
            "write the lower bound first, like 40-80"
        )
    return norm_start, norm_end


@functools.total_ordering
@dataclass(frozen=True)
class KeyRange:
    """The keyspace ids in ``[start, end)``; an empty bound is unbounded on that side."""

    start: bytes = b""
    end: bytes = b""

    def __post_init__(self) -> None:
        for field_name in ("start", "end"):
            value = getattr(self, field_name)
            if not isinstance(value, bytes | bytearray | memoryview):
                raise InvalidKeyRange(
                    f"key range {field_name} must be bytes, got {type(value).__name__} {value!r}"
                )
        start, end = _normalize_bounds(bytes(self.start), bytes(self.end), None)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    @classmethod
    def parse(cls, text: str) -> KeyRange:
        """Parse a Vitess shard name: ``-``, ``-80``, ``40-80``, ``80-``, ``0000-8000``."""
        if not isinstance(text, str):
            raise InvalidKeyRange(f"key range must be text like 40-80, got {text!r}")
        stripped = text.strip().lower()
        parts = stripped.split("-")
        if len(parts) != 2:
            hint = " (an unsharded keyspace's only shard is -)" if stripped == "0" else ""
            raise InvalidKeyRange(
                f"key range {text!r} must have exactly one '-', like 40-80, -80, 80- or -{hint}"
            )
        start = _parse_bound(text, parts[0], text)
        end = _parse_bound(text, parts[1], text)
        _normalize_bounds(start, end, text)
        return cls(start, end)

    @property
    def name(self) -> str:
        """The Vitess shard name, lower-case hex: ``-``, ``-80``, ``40-80``, ``80-``."""
        return f"{self.start.hex()}-{self.end.hex()}"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"KeyRange({self.name!r})"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, KeyRange):
            return NotImplemented
        return sort_key(self) < sort_key(other)

    @property
    def is_complete(self) -> bool:
        """True when the range covers the whole keyspace (``-``)."""
        return not self.start and not self.end

    def contains(self, keyspace_id: bytes) -> bool:
        """True when ``keyspace_id`` lies in ``[start, end)``."""
        kid = normalize_keyspace_id(keyspace_id)
        return self.start <= kid and (not self.end or kid < self.end)

    def intersects(self, other: KeyRange) -> bool:
        """True when the two ranges share at least one keyspace id."""
        return (not other.end or self.start < other.end) and (
            not self.end or other.start < self.end
        )

    def contains_range(self, other: KeyRange) -> bool:
        """True when every keyspace id of ``other`` is in this range."""
        if self.start > other.start:
            return False
        if not self.end:
            return True
        return bool(other.end) and other.end <= self.end

    def intersection(self, other: KeyRange) -> KeyRange | None:
        """The keyspace ids in both ranges, or None when they do not intersect."""
        if not self.intersects(other):
            return None
        start = max(self.start, other.start)
        if not self.end:
            end = other.end
        elif not other.end:
            end = self.end
        else:
            end = min(self.end, other.end)
        return KeyRange(start, end)

    def split(self, n: int) -> list[KeyRange]:
        """Cut the range into ``n`` contiguous parts of (near) equal width.

        Bounds are computed at the smallest byte width that keeps every part non-empty, so
        ``-`` split in 4 is ``-40, 40-80, 80-c0, c0-`` and in 3 is ``-55, 55-aa, aa-``.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidKeyRange(
                f"cannot split key range {self.name} into {n!r} parts; give a whole number >= 1"
            )
        if n == 1:
            return [self]
        width = max(len(self.start), len(self.end), 1)
        while True:
            low = int.from_bytes(self.start.ljust(width, b"\x00"), "big")
            high = int.from_bytes(self.end.ljust(width, b"\x00"), "big") if self.end else 256**width
            if high - low >= n:
                break
            width += 1
        cuts = [low + (high - low) * i // n for i in range(1, n)]
        bounds = [self.start, *(cut.to_bytes(width, "big") for cut in cuts), self.end]
        return [KeyRange(bounds[i], bounds[i + 1]) for i in range(n)]


FULL_RANGE = KeyRange(b"", b"")


def sort_key(key_range: KeyRange) -> tuple[bytes, bool, bytes]:
    """Order key ranges by start, then by end (an unbounded end sorts last)."""
    return (key_range.start, not key_range.end, key_range.end)


def parse_shard_name_list(names: Iterable[str]) -> list[KeyRange]:
    """Parse a sequence of shard names, in the given order."""
    if isinstance(names, str):
        return parse_shard_names(names)
    return [KeyRange.parse(name) for name in names]


def parse_shard_names(text: str) -> list[KeyRange]:
    """Parse a comma-separated list of shard names like ``-40,40-80,80-``, in the given order."""
    if not isinstance(text, str):
        raise InvalidKeyRange(f"shard list must be text like -40,40-80,80-, got {text!r}")
    names = [part.strip() for part in text.split(",")]
    if not any(names):
        raise InvalidKeyRange(f"shard list {text!r} is empty; write it like -80,80-")
    if not all(names):
        raise InvalidKeyRange(
            f"shard list {text!r} has an empty entry; separate shard names by single commas"
        )
    return [KeyRange.parse(name) for name in names]


def are_contiguous(ranges: Sequence[KeyRange]) -> bool:
    """True when the ranges, taken in start order, tile one unbroken span.

    Each range must end exactly where the next one starts: no gap and no overlap. An empty
    sequence tiles nothing and is not contiguous; a single range is.
    """
    if not ranges:
        return False
    ordered = sorted(ranges, key=sort_key)
    for left, right in itertools.pairwise(ordered):
        if not left.end or left.end != right.start:
            return False
    return True
