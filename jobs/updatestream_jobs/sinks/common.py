"""Helpers the sinks share: event identities, row images, key values."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from updatestream.binlog.events import ChangeEvent
from updatestream.core.gtid import GTIDParseError, parse_position


@lru_cache(maxsize=4096)
def _normal_position(text: str) -> str:
    try:
        return str(parse_position(text))
    except GTIDParseError:
        return text


def identity(event: ChangeEvent) -> tuple[str, str, str, str, int]:
    """``ChangeEvent.identity`` with its GTID position normalised (domains or server UUIDs in
    one order), so a hop duplicate whose provenance was written by filtered replication has the
    identity of the original whatever the text form of the position."""
    shard, gtid, table, pk, index = event.identity
    return shard, _normal_position(gtid), table, pk, index


def identity_text(event: ChangeEvent) -> str:
    """:func:`identity` as compact JSON text."""
    return json.dumps(identity(event), separators=(",", ":"))


def loads_object(text: str | None, what: str, event: ChangeEvent) -> dict[str, Any]:
    """Parse a JSON object field of an event; errors name the event."""
    if text is None:
        raise ValueError(f"{event.op} event on {event.table} ({event.shard}) has no {what}")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{what} of a {event.op} event on {event.table} is not a JSON object")
    return value


Row = dict[str, Any]


def row_images(event: ChangeEvent) -> tuple[Row, Row | None, Row | None]:
    """(primary key, before image, after image) of a row event; images None where absent."""
    pk = loads_object(event.pk, "pk", event)
    before = None if event.before is None else loads_object(event.before, "before", event)
    after = None if event.after is None else loads_object(event.after, "after", event)
    return pk, before, after


def pk_of(row: dict[str, Any], pk: dict[str, Any]) -> dict[str, Any]:
    """The primary key of ``row``, with the columns (and their order) of ``pk``."""
    return {column: row.get(column, value) for column, value in pk.items()}
