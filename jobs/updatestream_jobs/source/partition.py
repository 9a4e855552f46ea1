"""One shard's slice of a micro-batch and how a worker turns it into Arrow record batches.

`read_shard_rows` runs on a Spark worker: it opens its own connections, streams exactly the
transactions between the partition's start and end tokens, and ends the shard's last partition
with a heartbeat. After a hop, each row also gets the dedup rule's verdict (`RowClassifier`), and
the hop batch starts with a `hop` marker row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from updatestream.binlog.events import HOP_MARKER, SPARK_SCHEMA_DDL, ChangeEvent
from updatestream.binlog.offsets import HopInfo
from updatestream.binlog.options import ShardEndpoint, SourceConfig
from updatestream.binlog.reader import BinlogRangeReader
from updatestream.binlog.rows import EventRow, RowConverter, heartbeat
from updatestream.binlog.session import ShardSession, flavor_of
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import (
    GTIDPosition,
    parse_position,
    position_contains,
    position_from_json,
    position_to_json,
)
from updatestream.core.hop import canonical_shard_name
from updatestream.core.snapshot import SnapshotFilter, SnapshotRange
from updatestream.core.token import EventToken

_ALL_FIELDS = tuple(ChangeEvent.__dataclass_fields__)
_FIELDS = _ALL_FIELDS[:-1]  # what a reader's row tuples hold; the dedup verdict is added last
assert _ALL_FIELDS[-1] == "dedup"
_ROW = attrgetter(*_FIELDS)
_ARROW_TYPES = {"STRING": pa.string(), "BIGINT": pa.int64(), "INT": pa.int32()}
ARROW_SCHEMA = pa.schema(
    [
        pa.field(name, _ARROW_TYPES[kind])
        for name, kind in (part.strip().split(" ") for part in SPARK_SCHEMA_DDL.split(","))
    ]
)
_MAX_BATCH_BYTES = 8 * 1024 * 1024
_BEFORE, _AFTER = _FIELDS.index("before"), _FIELDS.index("after")
_OP, _SHARD, _TS = _FIELDS.index("op"), _FIELDS.index("shard"), _FIELDS.index("timestamp")
_TOKEN, _SOURCE = _FIELDS.index("token"), _FIELDS.index("source_shard")
_SOURCE_GTID = _FIELDS.index("source_gtid")
_TABLE, _KSID, _PK = _FIELDS.index("table"), _FIELDS.index("keyspace_id"), _FIELDS.index("pk")

Classifier = Callable[[EventRow], str | None]


class ShardRange(InputPartition):
    """One shard's slice of a micro-batch: start and end Event Tokens (JSON text).

    `endpoint` says where the shard listens (a shard a hop brought in is not in the config the
    workers got); `dedup` is the dedup rule for the rows read (pickled with the partition, as the
    object it is); `marker` is the JSON of a
    hop that this partition announces with a first `hop` row.
    """

    def __init__(
        self,
        shard: str,
        start: str,
        end: str,
        heartbeat: bool,
        endpoint: ShardEndpoint | None = None,
        dedup: DedupFilter | None = None,
        marker: str | None = None,
        via: str | None = None,
    ) -> None:
        super().__init__((shard, start, end, heartbeat))
        self.shard = shard
        self.start = start
        self.end = end
        self.heartbeat = heartbeat
        self.endpoint = endpoint
        self.dedup = dedup
        self.marker = marker
        self.via = via  # see `Via`
        # unfinished snapshot ranges: their binlog events above the frontier are dropped
        self.holdback: tuple[SnapshotRange, ...] | None = None
        # the range's rows, read by the driver's binlog tail (None: the worker reads them)
        self.rows: list[EventRow] | None = None

    def __repr__(self) -> str:
        held = "" if self.rows is None else f", {len(self.rows)} rows held"
        return f"ShardRange({self.shard}, {self.start} -> {self.end}{held})"

    def classifier(self) -> Classifier | None:
        if self.dedup is None or self.dedup.is_empty():
            return None
        return RowClassifier(self.dedup)


class HeldRanges(InputPartition):
    """Several shards' ranges whose rows the driver's tails hold, read as one partition (one
    Spark task instead of one per shard: a batch's fixed cost grows with its tasks). Each
    range is read as on its own, one after the other: per shard the same rows in the same
    order, each ending with its heartbeat."""

    def __init__(self, parts: list[ShardRange]) -> None:
        super().__init__(tuple(p.shard for p in parts))
        self.parts = parts

    def __repr__(self) -> str:
        return f"HeldRanges({', '.join(map(repr, self.parts))})"


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


def _batch(rows: list[tuple[Any, ...]], classify: Classifier | None = None) -> pa.RecordBatch:
    # Lists, not tuples: pyarrow converts a tuple of strings ~300 times slower.
    columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in _FIELDS]
    columns.append([classify(row) for row in rows] if classify else [None] * len(rows))
    return pa.RecordBatch.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(columns, ARROW_SCHEMA, strict=True)],
        schema=ARROW_SCHEMA,
    )


def record_batches(
    rows: Iterator[EventRow], max_rows: int, classify: Classifier | None = None
) -> Iterator[pa.RecordBatch]:
    """Group event rows into Arrow record batches of at most `max_rows` rows (and ~8 MB),
    with the dedup verdict of each row from `classify` (none without it)."""
    batch: list[EventRow] = []
    size = 0
    for row in rows:
        batch.append(row)
        size += len(row[_AFTER] or "") + len(row[_BEFORE] or "") + 256
        if len(batch) >= max_rows or size >= _MAX_BATCH_BYTES:
            yield _batch(batch, classify)
            batch, size = [], 0
    if batch:
        yield _batch(batch, classify)


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


def read_shard_rows(config: SourceConfig, part: ShardRange) -> Iterator[EventRow]:
    """The change events of one partition as tuples (runs on a worker, opens its own
    connections unless the partition carries its rows); the shard's last partition ends with its
    heartbeat."""
    start = EventToken.loads(part.start)
    end = EventToken.loads(part.end)
    if part.marker:
        yield hop_marker(config.keyspace, HopInfo.from_json(json.loads(part.marker)), start)
    if not position_contains(start.position, end.position):
        rows: Iterator[EventRow]
        if part.rows is not None:  # read by the driver's tail, with the same converter
            rows = iter(part.rows)
        else:
            endpoint = part.endpoint or config.endpoint(part.shard)
            with ShardSession(endpoint, config) as session:
                session.check_settings()
            converter = RowConverter(config, part.shard, flavor_of(endpoint))
            reader = BinlogRangeReader(endpoint, config, start.position, end.position, converter)
            rows = reader.rows()
        if part.via:
            rows = filter(Via.from_json(part.via), rows)
        if part.holdback:
            held = SnapshotFilter(part.holdback).holds_back
            rows = (r for r in rows if not held(r[_TABLE], r[_KSID], r[_PK]))
        yield from rows
    if part.heartbeat:
        yield _ROW(heartbeat(config.keyspace, end))


def read_shard_range(config: SourceConfig, part: ShardRange) -> Iterator[ChangeEvent]:
    """The change events of one partition (see `read_shard_rows`)."""
    return (ChangeEvent(*row) for row in read_shard_rows(config, part))
