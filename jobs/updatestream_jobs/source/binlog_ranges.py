"""One shard's range of a micro-batch, and the change-event rows it yields.

A `ShardRange` says what a batch reads of one shard: the transactions after its start token up
to its end token, with what the batch applies to them: the dedup rule after a hop (each row gets
its verdict, `copy_groups.RowClassifier`), a hop marker that the range announces with a first
`hop` row, the unfinished snapshot ranges whose binlog events it holds back, and, for a retired
shard read from a destination, the `Via` that keeps only the rows copied from it. The shard's
last range of the batch ends with its heartbeat.

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
    position_contains,
)
from updatestream.core.snapshot_plan import SnapshotFilter, SnapshotRange
from updatestream.core.token import EventToken
from updatestream_jobs.source.arrow_rows import FIELDS
from updatestream_jobs.source.copy_groups import RowClassifier, Via
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
    are dropped; `stopped_serving_at` caps the time of the heartbeat of a shard read on after
    it stopped serving (a deferred hop), so the sinks are not told that seconds whose writes
    are on the destinations are complete.
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
    stopped_serving_at: int | None = None

    def __repr__(self) -> str:
        return f"ShardRange({self.shard}, {self.start} -> {self.end})"

    def with_holdback(self, holdback: tuple[SnapshotRange, ...] | None) -> ShardRange:
        return replace(self, holdback=holdback)

    def classifier(self) -> RowClassifier:
        """The dedup rule's verdicts for this range's rows (the reverse-copy rule applies even
        to a stream that never hopped), and its `Via` when it reads a retired shard."""
        via = Via.from_json(self.via) if self.via else None
        return RowClassifier(self.dedup or DedupFilter({}), via)


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
    """The change events of one range as complete tuples (the dedup verdict last): from `rows`
    when the driver's tail read them, else from the shard (on a worker, with its own
    connections); the shard's last range ends with its heartbeat."""
    start = EventToken.loads(part.start)
    end = EventToken.loads(part.end)
    if part.marker:
        yield (
            *hop_marker(config.keyspace, HopInfo.from_json(json.loads(part.marker)), start),
            None,
        )
    if not position_contains(start.position, end.position):
        found: Iterator[EventRow]
        found = iter(rows) if rows is not None else _binlog_rows(config, part, start, end)
        marked = part.classifier().marked(found)
        if part.holdback:
            held = SnapshotFilter(part.holdback).holds_back
            marked = (r for r in marked if not held(r[_TABLE], r[_KSID], r[_PK]))
        yield from marked
    if part.heartbeat:
        yield (*_ROW(heartbeat(config.keyspace, end, part.stopped_serving_at)), None)


def read_shard_range(
    config: SourceConfig, part: ShardRange, rows: list[EventRow] | None = None
) -> Iterator[ChangeEvent]:
    """The change events of one range (see `read_shard_rows`)."""
    return (ChangeEvent(*row) for row in read_shard_rows(config, part, rows))
