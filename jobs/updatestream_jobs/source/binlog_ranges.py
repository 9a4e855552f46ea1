"""One shard's range of a micro-batch, and the change-event rows it yields.

A `ShardRange` says what a batch reads of one shard: the transactions after its start token up
to its end token, with what the batch applies to them: the dedup rule after a hop (each row gets
its verdict, `RowClassifier`), a hop marker that the range announces with a first `hop` row, the
unfinished snapshot ranges whose binlog events it holds back, and, for a retired shard read
from a destination, the `Via` filter that keeps only the rows copied from it. The shard's last
range of the batch ends with its heartbeat.

`read_shard_rows` yields the rows: from the binlog (opening its own connections: it runs on a
Spark worker), or from the rows the driver's binlog tail already converted with the same
converter (`rows`), applying the same filters to both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from operator import attrgetter

from updatestream.binlog.config import ShardEndpoint
from updatestream.binlog.events import HOP_MARKER, ChangeEvent
from updatestream.binlog.range_reader import BinlogRangeReader
from updatestream.binlog.row_converter import EventRow, RowConverter, heartbeat
from updatestream.binlog.session import ShardSession, flavor_of
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import (
    GTIDPosition,
    parse_position,
    position_contains,
    position_from_json,
    position_to_json,
)
from updatestream.core.hop_plan import canonical_shard_name
from updatestream.core.snapshot_plan import SnapshotFilter, SnapshotRange
from updatestream.core.token import EventToken
from updatestream_jobs.source.arrow_rows import FIELDS, Classifier
from updatestream_jobs.source.offsets import HopInfo
from updatestream_jobs.source.options import SourceConfig

_ROW = attrgetter(*FIELDS)
_OP, _SHARD, _TS = FIELDS.index("op"), FIELDS.index("shard"), FIELDS.index("timestamp")
_TOKEN, _SOURCE = FIELDS.index("token"), FIELDS.index("source_shard")
_SOURCE_GTID = FIELDS.index("source_gtid")
_TABLE, _KSID, _PK = FIELDS.index("table"), FIELDS.index("keyspace_id"), FIELDS.index("pk")


@dataclass(frozen=True)
class ShardRange:
    """One shard's range of a micro-batch: start and end Event Tokens (JSON text).

    `endpoint` says where the shard listens (a shard a hop brought in is not in the config the
    workers got); `dedup` is the dedup rule for the rows read; `marker` the JSON of a hop this
    range announces with a first `hop` row; `via` a retired shard read from a destination (see
    `Via`); `holdback` the unfinished snapshot ranges whose binlog events above the frontier
    are dropped.
    """

    shard: str
    start: str
    end: str
    heartbeat: bool
    endpoint: ShardEndpoint | None = None
    dedup: DedupFilter | None = None
    marker: str | None = None
    via: str | None = None
    holdback: tuple[SnapshotRange, ...] | None = None

    def __repr__(self) -> str:
        return f"ShardRange({self.shard}, {self.start} -> {self.end})"

    def with_holdback(self, holdback: tuple[SnapshotRange, ...] | None) -> ShardRange:
        return replace(self, holdback=holdback)

    def classifier(self) -> Classifier | None:
        if self.dedup is None or self.dedup.is_empty():
            return None
        return RowClassifier(self.dedup)


class RowClassifier:
    """The dedup rule's verdict for one row tuple: "hop", "unknown" or None (deliver)."""

    def __init__(self, dedup: DedupFilter) -> None:
        self.dedup = dedup
        self._by_token: dict[str, str | None] = {}

    def __call__(self, row: EventRow) -> str | None:
        op = row[_OP]
        if op == "heartbeat" or op == HOP_MARKER:
            return None
        if row[_SOURCE] is None:
            until = self.dedup.overlap_until.get(row[_SHARD])
            return "unknown" if until is not None and row[_TS] <= until else None
        text = row[_TOKEN]  # one per transaction: classify each transaction once
        if text not in self._by_token:
            if len(self._by_token) > 4096:
                self._by_token.clear()
            verdict = self.dedup.classify(EventToken.loads(text)).value
            self._by_token[text] = None if verdict == "deliver" else verdict
        return self._by_token[text]


class Via:
    """Read a retired shard's changes from one of its destinations: the rows copied from
    `shard` whose source position is after `after` and at or before `upto`.

    A batch planned before a shard was retired may have to be replayed after the shard is gone
    (the job stopped between planning and committing it). Its changes still exist as copies
    in the destinations' binlogs (when they reach back that far: the planner checks)."""

    def __init__(self, shard: str, after: GTIDPosition, upto: GTIDPosition) -> None:
        self.shard = shard
        self.after = after
        self.upto = upto
        self._seen: dict[str, bool] = {}

    def to_json(self) -> str:
        return json.dumps(
            {
                "shard": self.shard,
                "after": position_to_json(self.after),
                "upto": position_to_json(self.upto),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Via:
        data = json.loads(text)
        return cls(
            data["shard"],
            position_from_json(data["after"], "via.after."),
            position_from_json(data["upto"], "via.upto."),
        )

    def __call__(self, row: EventRow) -> bool:
        source = row[_SOURCE]
        if source is None or canonical_shard_name(source) != self.shard:
            return False
        text = row[_SOURCE_GTID]
        if text not in self._seen:
            if len(self._seen) > 4096:
                self._seen.clear()
            position = parse_position(text, self.upto.flavor)
            self._seen[text] = position_contains(self.upto, position) and not position_contains(
                self.after, position
            )
        return self._seen[text]


def hop_marker(keyspace: str, hop: HopInfo, token: EventToken) -> EventRow:
    """The row that announces a hop: op `hop`, the hop as JSON in `after`."""
    event = ChangeEvent(
        keyspace=keyspace,
        shard=token.shard,
        op=HOP_MARKER,
        table=None,
        pk=None,
        keyspace_id=None,
        before=None,
        after=json.dumps(hop.to_json(), sort_keys=True),
        token=token.dumps(),
        timestamp=token.timestamp,
        gtid=str(token.position),
        tx_index=0,
    )
    row: EventRow = _ROW(event)
    return row


def _binlog_rows(
    config: SourceConfig, part: ShardRange, start: EventToken, end: EventToken
) -> Iterator[EventRow]:
    endpoint = part.endpoint or config.endpoint(part.shard)
    reader_config = config.reader
    with ShardSession(endpoint, reader_config) as session:
        session.check_settings()
    converter = RowConverter(reader_config, part.shard, flavor_of(endpoint))
    reader = BinlogRangeReader(endpoint, reader_config, start.position, end.position, converter)
    return reader.rows()


def read_shard_rows(
    config: SourceConfig, part: ShardRange, rows: list[EventRow] | None = None
) -> Iterator[EventRow]:
    """The change events of one range as tuples: from `rows` when the driver's tail read them,
    else from the shard (on a worker, with its own connections); the shard's last range ends
    with its heartbeat."""
    start = EventToken.loads(part.start)
    end = EventToken.loads(part.end)
    if part.marker:
        yield hop_marker(config.keyspace, HopInfo.from_json(json.loads(part.marker)), start)
    if not position_contains(start.position, end.position):
        found: Iterator[EventRow]
        found = iter(rows) if rows is not None else _binlog_rows(config, part, start, end)
        if part.via:
            found = filter(Via.from_json(part.via), found)
        if part.holdback:
            held = SnapshotFilter(part.holdback).holds_back
            found = (r for r in found if not held(r[_TABLE], r[_KSID], r[_PK]))
        yield from found
    if part.heartbeat:
        yield _ROW(heartbeat(config.keyspace, end))


def read_shard_range(
    config: SourceConfig, part: ShardRange, rows: list[EventRow] | None = None
) -> Iterator[ChangeEvent]:
    """The change events of one range (see `read_shard_rows`)."""
    return (ChangeEvent(*row) for row in read_shard_rows(config, part, rows))
