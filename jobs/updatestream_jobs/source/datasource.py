"""The `updatestream` Spark Python Data Source: shard binlogs as a stream of change events.

Offsets are JSON objects of shard -> Event Token (`EventToken.to_json()`): the shard's GTID
position and the time at which it was observed. `latestOffset` asks each shard for
`@@gtid_binlog_pos` (one cheap query); `partitions` gives one partition per shard per
micro-batch (a long range is cut at binlog file boundaries); `read` opens its own connection and
streams exactly the transactions between the two positions, then ends the shard's last partition
with a heartbeat event carrying the end token.

Heartbeat promise: a heartbeat with token (T, shard, P) says that every transaction the shard had
written to its binlog when it was asked for its position at server time T -- exactly the
transactions up to and including P -- has been emitted before it, in this batch or an earlier
one. It says nothing about transactions committed after T. For a shard fed by filtered
replication, later transactions may carry source timestamps lower than T.

An idle keyspace still yields a (heartbeat-only) micro-batch every `heartbeatIntervalSeconds`, so
per-shard watermarks keep moving.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from updatestream.core.gtid import position_contains
from updatestream.core.token import EventToken
from updatestream_jobs.events import SPARK_SCHEMA_DDL, ChangeEvent
from updatestream_jobs.source.binlog import BinlogRangeReader
from updatestream_jobs.source.errors import (
    BinlogReadError,
    SourceOptionsError,
    StartPositionError,
)
from updatestream_jobs.source.options import SourceConfig, StartSpec, parse_options
from updatestream_jobs.source.positions import (
    check_start_available,
    earliest_start,
    find_start_by_timestamp,
)
from updatestream_jobs.source.rows import EventRow, RowConverter, heartbeat
from updatestream_jobs.source.session import ShardSession, connection_settings, flavor_of

log = logging.getLogger(__name__)

SHORT_NAME = "updatestream"
_FIELDS = tuple(ChangeEvent.__dataclass_fields__)
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


class ShardRange(InputPartition):
    """One shard's slice of a micro-batch: start and end Event Tokens (JSON text)."""

    def __init__(self, shard: str, start: str, end: str, heartbeat: bool) -> None:
        super().__init__((shard, start, end, heartbeat))
        self.shard = shard
        self.start = start
        self.end = end
        self.heartbeat = heartbeat

    def __repr__(self) -> str:
        return f"ShardRange({self.shard}, {self.start} -> {self.end})"


def _batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    # Lists, not tuples: pyarrow converts a tuple of strings ~300 times slower.
    columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in _FIELDS]
    return pa.RecordBatch.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(columns, ARROW_SCHEMA, strict=True)],
        schema=ARROW_SCHEMA,
    )


def record_batches(rows: Iterator[EventRow], max_rows: int) -> Iterator[pa.RecordBatch]:
    """Group event rows into Arrow record batches of at most `max_rows` rows (and ~8 MB)."""
    batch: list[EventRow] = []
    size = 0
    for row in rows:
        batch.append(row)
        size += len(row[_AFTER] or "") + len(row[_BEFORE] or "") + 256
        if len(batch) >= max_rows or size >= _MAX_BATCH_BYTES:
            yield _batch(batch)
            batch, size = [], 0
    if batch:
        yield _batch(batch)


def read_shard_rows(config: SourceConfig, part: ShardRange) -> Iterator[EventRow]:
    """The change events of one partition as tuples (runs on a worker, opens its own
    connections); the shard's last partition ends with its heartbeat."""
    endpoint = config.endpoint(part.shard)
    start = EventToken.loads(part.start)
    end = EventToken.loads(part.end)
    if not position_contains(start.position, end.position):
        with ShardSession(endpoint, config) as session:
            session.check_settings()
        converter = RowConverter(config, part.shard, flavor_of(endpoint))
        reader = BinlogRangeReader(endpoint, config, start.position, end.position, converter)
        yield from reader.rows()
    if part.heartbeat:
        yield _ROW(heartbeat(config.keyspace, end))


def read_shard_range(config: SourceConfig, part: ShardRange) -> Iterator[ChangeEvent]:
    """The change events of one partition (see `read_shard_rows`)."""
    return (ChangeEvent(*row) for row in read_shard_rows(config, part))


class _Planner:
    """Driver-side work shared by the streaming and the batch reader."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._sessions: dict[str, ShardSession] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_sessions": {}}

    def session(self, shard: str) -> ShardSession:
        if shard not in self._sessions:
            self._sessions[shard] = ShardSession(self.config.endpoint(shard), self.config)
        return self._sessions[shard]

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def current(self) -> dict[str, EventToken]:
        tokens = {}
        for endpoint in self.config.shards:
            position, now = self.session(endpoint.shard).current_position()
            tokens[endpoint.shard] = EventToken(now, endpoint.shard, position)
        return tokens

    def resolve(self, spec: StartSpec, *, check: bool = True) -> dict[str, EventToken]:
        """Start (or end) tokens per shard; checks settings and binlog availability."""
        tokens: dict[str, EventToken] = {}
        for endpoint in self.config.shards:
            shard = endpoint.shard
            session = self.session(shard)
            if check:
                session.check_settings()
            if spec.mode == "now":
                position, now = session.current_position()
                tokens[shard] = EventToken(now, shard, position)
                continue
            if spec.mode == "earliest":
                position, opened = earliest_start(session)
                tokens[shard] = EventToken(opened, shard, position)
                continue
            if spec.mode == "timestamp":
                assert spec.timestamp is not None
                settings = connection_settings(endpoint, self.config)
                position = find_start_by_timestamp(session, settings, spec.timestamp)
                tokens[shard] = EventToken(spec.timestamp, shard, position)
                continue
            kind: str = "gtid" if spec.mode == "gtid" else "token"
            if spec.mode == "resume":
                chosen = spec.resume_for(shard)
                kind, raw = chosen if chosen else ("", None)
                named = ", ".join(s for s, _, _ in spec.resume)
            else:
                raw = spec.for_shard(shard)
                named = ", ".join(s for s, _ in spec.positions)
            if raw is None:
                forms = "a token, a GTID position or a timestamp" if kind == "" else "a position"
                raise StartPositionError(
                    f"the start names no position for shard {shard} (it names {named}); give "
                    f"every shard of the key range {forms}",
                    shard=shard,
                )
            if kind == "timestamp":
                settings = connection_settings(endpoint, self.config)
                position = find_start_by_timestamp(session, settings, int(raw))
                tokens[shard] = EventToken(int(raw), shard, position)
                continue
            if kind == "gtid":
                from updatestream.core.gtid import parse_position

                token = EventToken(0, shard, parse_position(raw, flavor_of(endpoint)))
            else:
                token = EventToken.loads(raw)
            if check:
                check_start_available(session, token.position)
            tokens[shard] = token
        return tokens

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShardRange]:
        parts: list[ShardRange] = []
        for shard in sorted(end):
            end_token = EventToken.from_json(end[shard])
            if shard not in start:
                raise SourceOptionsError(f"offset has no start for shard {shard}")
            start_token = EventToken.from_json(start[shard])
            if start_token == end_token:
                continue
            if not position_contains(end_token.position, start_token.position):
                raise BinlogReadError(
                    f"shard {shard} went back from {start_token.position} to "
                    f"{end_token.position}; its binlog history changed (restored or reset?)"
                )
            cuts = self.session(shard).split_points(
                start_token.position, end_token.position, self.config.max_partition_bytes
            )
            edges = [start_token.dumps()]
            edges += [EventToken(start_token.timestamp, shard, c).dumps() for c in cuts]
            edges.append(end_token.dumps())
            for index in range(len(edges) - 1):
                last = index == len(edges) - 2
                parts.append(ShardRange(shard, edges[index], edges[index + 1], last))
        return parts


class UpdateStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._planner = _Planner(config)
        self._target: dict[str, Any] | None = None

    def initialOffset(self) -> dict[str, Any]:
        tokens = self._planner.resolve(self.config.start)
        log.info("stream starts at %s", {s: t.to_json() for s, t in tokens.items()})
        return {shard: token.to_json() for shard, token in tokens.items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if self._target is not None:
            return self._target
        return self._latest(start)

    def _latest(self, start: dict[str, Any] | None) -> dict[str, Any]:
        offset: dict[str, Any] = {}
        for shard, token in self._planner.current().items():
            previous = EventToken.from_json(start[shard]) if start and shard in start else None
            if (
                previous is not None
                and previous.position == token.position
                and token.timestamp - previous.timestamp < self.config.heartbeat_interval
            ):
                token = previous  # nothing new and the last heartbeat is recent: no batch
            offset[shard] = token.to_json()
        return offset

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return {shard: token.to_json() for shard, token in self._planner.current().items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest(None)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[ShardRange]:
        return self._planner.partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardRange)
        return record_batches(read_shard_rows(self.config, partition), self.config.arrow_batch_rows)

    def commit(self, end: dict[str, Any]) -> None:
        return None

    def stop(self) -> None:
        self._planner.close()


class UpdateStreamBatchReader(DataSourceReader):
    """A bounded read: from `start` to `end` (default now), same events as the stream."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def partitions(self) -> Sequence[InputPartition]:
        planner = _Planner(self.config)
        try:
            start = planner.resolve(self.config.start)
            end = planner.resolve(self.config.end or StartSpec("now"), check=False)
            return planner.partitions(
                {s: t.to_json() for s, t in start.items()},
                {s: t.to_json() for s, t in end.items()},
            )
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardRange)
        return record_batches(read_shard_rows(self.config, partition), self.config.arrow_batch_rows)


class UpdateStreamDataSource(DataSource):
    """`spark.readStream.format("updatestream")`; see the options module for the options."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def _config(self) -> SourceConfig:
        return parse_options(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return UpdateStreamStreamReader(self._config())

    def reader(self, schema: StructType) -> DataSourceReader:
        return UpdateStreamBatchReader(self._config())


def register(spark: Any) -> None:
    """Make `format("updatestream")` available in a SparkSession."""
    spark.dataSource.register(UpdateStreamDataSource)


def offset_json(tokens: dict[str, EventToken]) -> str:
    """An offset as the JSON text the `start` option accepts (to resume from)."""
    return json.dumps({shard: token.to_json() for shard, token in tokens.items()}, sort_keys=True)
