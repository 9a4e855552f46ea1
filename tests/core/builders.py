"""Short constructors the core tests share: key ranges and Event Tokens from text."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from updatestream.core.gtid import parse_position
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken, SourceProvenance


def refusal(error: type[Exception], call: Callable[[], object]) -> str:
    """The message of the `error` that `call()` raises; the test fails when it raises none."""
    with pytest.raises(error) as info:
        call()
    return str(info.value)


def kr(text: str) -> KeyRange:
    return KeyRange.parse(text)


def tok(ts: int, shard: str, pos: str, source: tuple[str, str, int] | None = None) -> EventToken:
    """A token; ``source`` is (shard, pos, ts) of the copied source transaction."""
    provenance = None
    if source is not None:
        provenance = SourceProvenance(source[0], parse_position(source[1]), source[2])
    return EventToken(ts, shard, parse_position(pos), provenance)
