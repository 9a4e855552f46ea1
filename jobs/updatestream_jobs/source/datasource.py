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

With `tail=true` (the default), the stream reader also follows every shard it reads with one
long-lived binlog connection in the driver (`source.tailing`): an idle shard costs no query, and
a batch's range that the tail holds (a small one, the usual case) travels with its partition,
so the worker opens no connection for it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
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

from updatestream.binlog.errors import (
    BinlogReadError,
    SourceOptionsError,
    StartPositionError,
)
from updatestream.binlog.events import SPARK_SCHEMA_DDL
from updatestream.binlog.offsets import StreamOffset
from updatestream.binlog.options import (
    ShardEndpoint,
    SourceConfig,
    StartSpec,
    endpoints_of,
    parse_options,
)
from updatestream.binlog.positions import (
    check_start_available,
    earliest_start,
    find_start_by_timestamp,
)
from updatestream.binlog.session import ShardSession, connection_settings, flavor_of
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import position_contains
from updatestream.core.keyrange import KeyRange
from updatestream.core.snapshot import SnapshotRange
from updatestream.core.token import EventToken
from updatestream.spec import Keyspace
from updatestream_jobs.source.hopping import Hopper, map_for_shards, serving_map
from updatestream_jobs.source.keyspace_watch import KeyspaceWatch, open_watch
from updatestream_jobs.source.partition import (
    ARROW_SCHEMA,
    HeldRanges,
    ShardRange,
    Via,
    read_shard_range,
    read_shard_rows,
    record_batches,
)
from updatestream_jobs.source.snapshotting import ChunkRange, SnapshotPlanner, chunk_batches
from updatestream_jobs.source.tailing import Tails

log = logging.getLogger(__name__)

SHORT_NAME = "updatestream"

__all__ = [
    "ARROW_SCHEMA",
    "ShardRange",
    "UpdateStreamDataSource",
    "read_shard_range",
    "read_shard_rows",
    "record_batches",
    "register",
]


class _Planner:
    """Driver-side work shared by the streaming and the batch reader."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._sessions: dict[str, ShardSession] = {}
        self.endpoints: dict[str, ShardEndpoint] = {e.shard: e for e in config.shards}
        self.snapshots = SnapshotPlanner(config, self.session)

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_sessions": {}, "endpoints": dict(self.endpoints)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.snapshots = SnapshotPlanner(self.config, self.session)

    def update(self, keyspace: Keyspace) -> None:
        """Learn the endpoints of every shard the Keyspace declares now (a hop reads shards
        that did not exist when the stream started); a moved shard gets a new session."""
        for endpoint in endpoints_of(keyspace):
            known = self.endpoints.get(endpoint.shard)
            if known != endpoint:
                self.endpoints[endpoint.shard] = endpoint
                stale = self._sessions.pop(endpoint.shard, None)
                if stale is not None:
                    stale.close()

    def endpoint(self, shard: str) -> ShardEndpoint:
        return self.endpoints.get(shard) or self.config.endpoint(shard)

    def session(self, shard: str) -> ShardSession:
        if shard not in self._sessions:
            self._sessions[shard] = ShardSession(self.endpoint(shard), self.config)
        return self._sessions[shard]

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def current(self, shards: Iterable[str] | None = None) -> dict[str, EventToken]:
        tokens = {}
        for shard in shards if shards is not None else [e.shard for e in self.config.shards]:
            position, now = self.session(shard).current_position()
            tokens[shard] = EventToken(now, shard, position)
        return tokens

    def start_offset(self, spec: StartSpec, keyspace: Keyspace) -> StreamOffset:
        """Where a new stream starts: the serving shards, or, when the start names the shards
        of an earlier shard map (a stream stopped before a reshard), those shards and that map:
        the first micro-batch then hops to the serving shards."""
        key_range = KeyRange.parse(self.config.key_range)
        serving = serving_map(keyspace)
        wanted = {s.name for s in serving.shards_for(key_range)}
        named = {s for s, _ in spec.positions} | {s for s, _, _ in spec.resume}
        dedup = _dedup(self.config)
        if spec.mode == "snapshot":
            return self.snapshots.begin(StreamOffset(self.resolve(spec), str(serving), dedup))
        if spec.mode not in ("tokens", "resume", "gtid") or wanted <= named:
            return StreamOffset(self.resolve(spec), str(serving), dedup)
        old = map_for_shards(keyspace, named & _shards_in_maps(keyspace, key_range), key_range)
        shards = [s.name for s in old.shards_for(key_range)]
        declared = {shard.name for shard in keyspace.spec.shards}
        tokens = self.resolve(spec, shards=shards, check_shards=declared)
        log.info("stream starts on shards %s of shard map %s", ",".join(shards), old)
        return StreamOffset(tokens, str(old), dedup)

    def resolve(
        self,
        spec: StartSpec,
        *,
        check: bool = True,
        shards: Sequence[str] | None = None,
        check_shards: set[str] | None = None,
    ) -> dict[str, EventToken]:
        """Start (or end) tokens per shard (default: the config's shards); checks settings and
        binlog availability (of `check_shards` only, when given: retired shards cannot be)."""
        tokens: dict[str, EventToken] = {}
        for shard in shards if shards is not None else [e.shard for e in self.config.shards]:
            reachable = check_shards is None or shard in check_shards
            given = None
            if not reachable and spec.mode in ("tokens", "resume", "gtid"):
                given = spec.given_token(shard)
            tokens[shard] = given or self._start_of(spec, shard, check=check)
        return tokens

    def _start_of(self, spec: StartSpec, shard: str, *, check: bool) -> EventToken:
        """Where `spec` starts `shard`, read from the shard itself."""
        session = self.session(shard)
        if check:
            session.check_settings()
        if spec.mode in ("now", "snapshot"):
            position, now = session.current_position()
            return EventToken(now, shard, position)
        if spec.mode == "earliest":
            position, opened = earliest_start(session)
            return EventToken(opened, shard, position)
        if spec.mode == "timestamp":
            assert spec.timestamp is not None
            return self._at_timestamp(session, spec.timestamp)
        named = spec.named(shard)
        if named is None:
            forms = "a token, a GTID position or a timestamp" if spec.mode == "resume" else ""
            raise StartPositionError(
                f"the start names no position for shard {shard} (it names "
                f"{', '.join(spec.shards_named())}); give every shard of the key range "
                f"{forms or 'a position'}",
                shard=shard,
            )
        if named[0] == "timestamp":
            return self._at_timestamp(session, int(named[1]))
        token = spec.given_token(shard, flavor_of(session.endpoint))
        assert token is not None
        if check:
            check_start_available(session, token.position)
        return token

    def _at_timestamp(self, session: ShardSession, timestamp: int) -> EventToken:
        settings = connection_settings(session.endpoint, self.config)
        position = find_start_by_timestamp(session, settings, timestamp)
        return EventToken(timestamp, session.endpoint.shard, position)

    def partitions(
        self,
        start: dict[str, Any],
        end: dict[str, Any],
        hopper: Hopper | None = None,
        tails: Tails | None = None,
    ) -> list[ShardRange | ChunkRange | HeldRanges]:
        """The partitions of the batch from `start` to `end`. A shard the Keyspace no longer
        declares (retired after the batch was planned) is read from its destinations. A range
        that a shard's tail holds (`tails`) carries its rows; such ranges share one partition."""
        begin, finish = StreamOffset.from_json(start), StreamOffset.from_json(end)
        declared = {s.name for s in hopper.keyspace().spec.shards} if hopper else None
        hop = finish.new_hop(begin)
        dedup = finish.dedup if finish.dedup and not finish.dedup.is_empty() else None
        marker = json.dumps(hop.to_json(), sort_keys=True) if hop is not None else None
        parts: list[ShardRange] = []
        holdback = _holdback(begin)
        for shard in sorted(finish.tokens):
            end_token = finish.tokens[shard]
            start_token = begin.tokens.get(shard)
            if start_token is None and hop is not None:
                start_token = hop.starts.get(shard)
            if start_token is None:
                raise SourceOptionsError(f"offset has no start for shard {shard}")
            if start_token == end_token:
                if hop is not None:  # a kept shard's heartbeat: it is read on, not retired
                    held, announce, marker = end_token.dumps(), marker, None
                    parts.append(ShardRange(shard, held, held, True, marker=announce))
                continue
            if not position_contains(end_token.position, start_token.position):
                raise BinlogReadError(
                    f"shard {shard} went back from {start_token.position} to "
                    f"{end_token.position}; its binlog history changed (restored or reset?)"
                )
            if hopper is not None and declared is not None and shard not in declared:
                parts += self._via_destinations(hopper, shard, start_token, end_token, dedup)
                continue
            rows = tails.rows(shard, start_token, end_token) if tails is not None else None
            if rows is not None:
                announce = marker if hop is not None and shard in hop.to_shards else None
                if announce is not None:
                    marker = None  # one marker per hop batch
                start_text, end_text = start_token.dumps(), end_token.dumps()
                endpoint = self.endpoint(shard)
                part = ShardRange(shard, start_text, end_text, True, endpoint, dedup, announce)
                part.rows = rows
                parts.append(part)
                continue
            cuts = self.session(shard).split_points(
                start_token.position, end_token.position, self.config.max_partition_bytes
            )
            edges = [start_token.dumps()]
            edges += [EventToken(start_token.timestamp, shard, c).dumps() for c in cuts]
            edges.append(end_token.dumps())
            endpoint = self.endpoint(shard)
            for index in range(len(edges) - 1):
                last = index == len(edges) - 2
                announce = marker if hop is not None and shard in hop.to_shards else None
                if announce is not None:
                    marker = None  # one marker per hop batch
                parts.append(
                    ShardRange(
                        shard, edges[index], edges[index + 1], last, endpoint, dedup, announce
                    )
                )
        for part in parts:
            part.holdback = holdback
        chunks = self.snapshots.chunk_partitions(begin, finish, self.endpoint)
        inline = [part for part in parts if part.rows is not None]
        if len(inline) > 1:
            first = parts.index(inline[0])
            rest = [part for part in parts if part.rows is None]
            return [*rest[:first], HeldRanges(inline), *rest[first:], *chunks]
        return [*parts, *chunks]

    def _via_destinations(
        self,
        hopper: Hopper,
        shard: str,
        start: EventToken,
        end: EventToken,
        dedup: DedupFilter | None,
    ) -> list[ShardRange]:
        via = Via(shard, start.position, end.position).to_json()
        parts = []
        for destination, first, last in hopper.retired_range(shard, start, end):
            endpoint = self.endpoint(destination)
            parts.append(
                ShardRange(
                    destination, first.dumps(), last.dumps(), False, endpoint, dedup, None, via
                )
            )
        log.info("reading retired shard %s from %s up to %s", shard, start.position, end.position)
        # The retired shard's own heartbeat: it was read up to `end`.
        parts.append(ShardRange(shard, end.dumps(), end.dumps(), True))
        return parts


def _holdback(begin: StreamOffset) -> tuple[SnapshotRange, ...] | None:
    """The unfinished snapshot ranges whose binlog events the batch after `begin` drops."""
    if begin.snapshot is None or begin.snapshot.finished:
        return None
    return tuple(begin.snapshot.pending())


def _shards_in_maps(keyspace: Keyspace, key_range: KeyRange) -> set[str]:
    """Every shard that reads part of `key_range` in the serving map or its history."""
    names = {s.name for s in serving_map(keyspace).shards_for(key_range)}
    for entry in keyspace.spec.shard_map_history:
        names |= {s.name for s in entry.shard_map.shards_for(key_range)}
    return names


class UpdateStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._planner = _Planner(config)
        self._hopper: Hopper | None = None
        self._available_now = False
        self._target: StreamOffset | None = None
        self._initial: dict[str, Any] | None = None
        self._reading: list[str] | None = None  # the shards of the last offset handed out
        self._tails = Tails(config, self._planner.endpoint) if config.tail else None

    def _tailing(self) -> Tails | None:
        return None if self._available_now else self._tails

    def _hops(self) -> Hopper:
        """The hop planner, with the Keyspace watch (opened in the driver only)."""
        if self._hopper is None:
            config = self.config
            watch: KeyspaceWatch = open_watch(
                config.keyspace_watch, config.keyspace_spec(), config.keyspace_source
            )
            self._hopper = Hopper(
                config.key_range, watch, self._planner.session, lookback=config.hop_lookback
            )
        return self._hopper

    def _handed_out(self, offset: StreamOffset) -> dict[str, Any]:
        self._reading = sorted(offset.tokens)
        return offset.to_json()

    def initialOffset(self) -> dict[str, Any]:
        # Spark may ask more than once; a start read from the shards ("now", "snapshot") must
        # not move between the asks, or the first batch would end before it starts.
        if self._initial is None:
            keyspace = self._hops().keyspace()
            self._planner.update(keyspace)
            offset = self._planner.start_offset(self.config.start, keyspace)
            log.info("stream starts at %s", {s: t.to_json() for s, t in offset.tokens.items()})
            self._initial = self._handed_out(offset)
        return self._initial

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        offset = StreamOffset.from_json(start)
        if self._available_now:  # a bounded read: up to what the shards hold now, no hop
            if self._target is None:
                self._target = self._latest(offset)
            target = self._target
            if offset.snapshot is not None:  # the snapshot goes on until it is finished
                target = dataclasses.replace(target, snapshot=offset.snapshot)
                target = self._planner.snapshots.plan(target)
            return self._handed_out(target)
        hopper = self._hops()
        self._planner.update(hopper.keyspace())
        if self._tails is not None and not self._tails.tailers:  # before the first batch
            self._tails.follow(offset.tokens)
        hopped = hopper.check(offset)
        if hopped is not None:
            return self._handed_out(hopped)
        return self._handed_out(self._planner.snapshots.plan(self._latest(offset)))

    def _latest(self, offset: StreamOffset) -> StreamOffset:
        tokens: dict[str, EventToken] = {}
        # While the snapshot reads, every batch ends each shard with a fresh token: its chunks
        # are read as of that token, and its heartbeat tells the sinks that time.
        snapshotting = offset.snapshot is not None and not offset.snapshot.finished
        tails = self._tailing()
        ask = list(offset.tokens)
        if tails is not None and not snapshotting:  # a tail at the last end: nothing new
            ask = [s for s in ask if not tails.idle(s, offset.tokens[s])]
        for shard, token in self._planner.current(ask).items():
            previous = offset.tokens[shard]
            if tails is not None:
                tails.asked(shard, token.timestamp)
            if (
                not snapshotting
                and previous.position == token.position
                and token.timestamp - previous.timestamp < self.config.heartbeat_interval
            ):
                token = previous  # nothing new and the last heartbeat is recent: no batch
            elif tails is not None and not snapshotting:
                cut = tails.cut(shard, previous)  # admission control: at most maxBatchRows
                if cut is not None and position_contains(token.position, cut.position):
                    token = cut
            tokens[shard] = token
        tokens = {shard: tokens.get(shard, token) for shard, token in offset.tokens.items()}
        return dataclasses.replace(offset, tokens=tokens)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        tails = self._tailing()
        known = tails.latest(self._reading or []) if tails is not None else None
        if known is not None:  # every shard followed: no query
            return {s: t.to_json() for s, t in known.items()}
        return {s: t.to_json() for s, t in self._planner.current(self._reading).items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        hopper = self._hops()
        self._planner.update(hopper.keyspace())
        tails = self._tailing()
        parts = self._planner.partitions(start, end, hopper, tails)
        if tails is not None:
            tails.follow(StreamOffset.from_json(end).tokens)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.config, partition)

    def commit(self, end: dict[str, Any]) -> None:
        if self._tails is not None:
            self._tails.commit(StreamOffset.from_json(end).tokens)

    def stop(self) -> None:
        if self._tails is not None:
            self._tails.stop()
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
            finish = StreamOffset(end, dedup=_dedup(self.config))
            return planner.partitions(StreamOffset(start).to_json(), finish.to_json())
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.config, partition)


def _read(config: SourceConfig, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, HeldRanges):
        return itertools.chain.from_iterable(_read(config, p) for p in partition.parts)
    if isinstance(partition, ChunkRange):
        return chunk_batches(config, partition, ARROW_SCHEMA, max(config.arrow_batch_rows, 8192))
    assert isinstance(partition, ShardRange)
    rows = read_shard_rows(config, partition)
    return record_batches(rows, config.arrow_batch_rows, partition.classifier())


def _dedup(config: SourceConfig) -> DedupFilter | None:
    return config.dedup


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
