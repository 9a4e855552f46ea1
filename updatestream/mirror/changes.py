"""Change events as mirror changes: one row state per key, with its order token.

An insert, update or snapshot row becomes an upsert of its after image; a delete becomes a
tombstone of its key. An update that changes the primary key becomes a tombstone of the old
key and an upsert of the new one, both with the change's token. :func:`collapse` keeps, per
table and key, the newest change of a batch (by the rule of :mod:`updatestream.mirror.order`)
and counts the others.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from updatestream.binlog.events import ChangeEvent
from updatestream.mirror.order import Order, Verdict, classify, ignore_cause, order_of

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Change:
    table: str
    pk: Row  # primary-key column -> JSON-safe value (as the event carries it)
    row: Row | None  # the after image; None: a tombstone
    order: Order
    gtid: str  # the origin's GTID position
    read_from: str  # the shard the change was read from
    key: tuple[str, tuple[Any, ...]]  # table and key values, hashable (see `key_of`)


_PLAIN = frozenset({str, int, float, bool, type(None)})


def key_of(table: str, pk: Row) -> tuple[str, tuple[Any, ...]]:
    """Table and primary-key values as a hashable tuple (blobs as their JSON text)."""
    values = tuple(pk.values())
    for value in values:
        if type(value) not in _PLAIN:
            values = tuple(
                v if type(v) in _PLAIN else json.dumps(v, sort_keys=True) for v in values
            )
            break
    return table, values


def _object(text: str | None, what: str, event: ChangeEvent) -> Row:
    value = json.loads(text) if text is not None else None
    if not isinstance(value, dict):
        raise ValueError(f"{event.op} event on {event.table} ({event.shard}) has no {what} object")
    return value


def changes_of(event: ChangeEvent) -> list[Change]:
    """The mirror changes of one change event (none for a heartbeat)."""
    if event.op == "heartbeat" or event.table is None:
        return []
    pk = _object(event.pk, "pk", event)
    order = order_of(event)
    gtid = event.source_gtid if event.source_gtid is not None else event.gtid

    table = event.table

    def change(key: Row, row: Row | None) -> Change:
        return Change(table, key, row, order, gtid, event.shard, key_of(table, key))

    if event.op == "delete" or event.after is None:
        return [change(pk, None)]
    after = _object(event.after, "after", event)
    found = [change(pk, after)]
    if event.before is not None and not _same_key(event.pk or "", event.before):
        before = _object(event.before, "before", event)
        old = {column: before.get(column, value) for column, value in pk.items()}
        if old != pk:
            found.insert(0, change(old, None))
    return found


def _same_key(pk_text: str, before_text: str) -> bool:
    """True when the before image visibly starts with the event's primary key (the reader
    writes both as compact JSON in column order, and keys usually lead): then the update did
    not change the key, and the before image need not be parsed. False means: parse it."""
    head = pk_text[:-1]
    return (
        len(before_text) > len(head) > 1
        and before_text.startswith(head)
        and before_text[len(head)] in ",}"
    )


@dataclass
class Collapsed:
    changes: dict[tuple[str, tuple[Any, ...]], Change]
    events: int  # row changes seen (heartbeats not counted)
    ignored: Counter[str]  # changes not kept, by cause: superseded (a newer one in the batch),
    # older or equal (a later-arriving change of this batch older than, or equal to, the kept one)
    unknown: int  # changes kept over another of the same second from another shard


def collapse(events: Iterable[ChangeEvent]) -> Collapsed:
    """Per key, the newest change of the batch; arrival order breaks UNKNOWN ties."""
    kept: dict[tuple[str, tuple[Any, ...]], Change] = {}
    ignored: Counter[str] = Counter()
    unknown = 0
    count = 0
    for event in events:
        if event.op == "heartbeat":
            continue
        count += 1
        for change in changes_of(event):
            held = kept.get(change.key)
            if held is None:
                kept[change.key] = change
                continue
            verdict = classify(change.order, held.order)
            if verdict.applies:
                unknown += verdict is Verdict.UNKNOWN
                ignored["superseded"] += 1
                kept[change.key] = change
            else:
                ignored[ignore_cause(verdict, change.order)] += 1
    return Collapsed(kept, count, ignored, unknown)
