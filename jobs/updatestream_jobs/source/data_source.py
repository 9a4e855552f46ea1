"""The `updatestream` Spark Python Data Source: shard binlogs as a stream of change events.

Offsets are JSON objects of shard -> Event Token (`EventToken.to_json()`): the shard's GTID
position and the time at which it was observed (`offsets`). `latestOffset` asks each shard for
its GTID position (one cheap query) unless its binlog tail tells that nothing is new;
`partitions` plans the batch (`planner`); every partition reads itself on a worker
(`partitions`) and a shard's last range ends with a heartbeat event carrying the end token.

Heartbeat promise: a heartbeat with token (T, shard, P) says that every transaction the shard had
written to its binlog when it was asked for its position at server time T -- exactly the
transactions up to and including P -- has been emitted before it, in this batch or an earlier
one. It says nothing about transactions committed after T. For a shard fed by filtered
replication, later transactions may carry source timestamps lower than T.

An idle keyspace still yields a (heartbeat-only) micro-batch every `heartbeatIntervalSeconds`, so
per-shard watermarks keep moving. With `tail=true` (the default) the stream reader follows every
shard it reads with one long-lived binlog connection in the driver (`tails`). The options are in
`options`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from updatestream.binlog.events import SPARK_SCHEMA_DDL
from updatestream.core.gtid import position_contains
from updatestream.core.recent_rows import RecentTransactions
from updatestream.core.start import Start
from updatestream.core.token import EventToken
from updatestream_jobs.source.fast_lane import FastLane
from updatestream_jobs.source.hopper import Hopper
from updatestream_jobs.source.keyspace_watch import open_watch
from updatestream_jobs.source.offsets import StreamOffset
from updatestream_jobs.source.options import SourceConfig, parse_options
from updatestream_jobs.source.partitions import HeldRowsPartition, SourcePartition
from updatestream_jobs.source.planner import BatchPlanner
from updatestream_jobs.source.tails import Tails

log = logging.getLogger(__name__)

SHORT_NAME = "updatestream"

__all__ = ["UpdateStreamDataSource", "register"]


class UpdateStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._planner = BatchPlanner(config)
        self._hopper: Hopper | None = None
        self._available_now = False
        self._target: StreamOffset | None = None
        self._initial: dict[str, Any] | None = None
        self._reading: list[str] | None = None  # the shards of the last offset handed out
        self.fast_lane = FastLane(config) if config.tail and config.fast_lane_sinks else None
        self._tails = Tails(config, self._planner.endpoint, self.fast_lane) if config.tail else None

    def _tailing(self) -> Tails | None:
        return None if self._available_now else self._tails

    def _hops(self) -> Hopper:
        """The hop planner, with the Keyspace watch (opened in the driver only)."""
        if self._hopper is None:
            config = self.config
            watch = open_watch(
                config.keyspace_watch, config.keyspace_spec(), config.keyspace_source
            )
            self._hopper = Hopper(
                config.key_range, watch, self._planner.session, lookback=config.hop_lookback
            )
        return self._hopper

    def _handed_out(self, offset: StreamOffset) -> dict[str, Any]:
        self._reading = sorted(offset.tokens)
        if self.fast_lane is not None:
            self.fast_lane.rule(offset)
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
            if self.fast_lane is not None and not self.fast_lane.ruled:  # a restarted query
                self.fast_lane.rule(offset)
            self._tails.follow(offset.tokens)
        hopped = hopper.check(offset)
        if hopped is not None:
            return self._handed_out(hopped)
        return self._handed_out(self._planner.snapshots.plan(self._latest(offset)))

    def _latest(self, offset: StreamOffset) -> StreamOffset:
        # While the snapshot reads, every batch ends each shard with a fresh token: its chunks
        # are read as of that token, and its heartbeat tells the sinks that time.
        snapshotting = offset.snapshot is not None and not offset.snapshot.finished
        tails = self._tailing()
        ask = list(offset.tokens)
        if tails is not None and not snapshotting:  # a tail at the last end: nothing new
            ask = [s for s in ask if not tails.idle(s, offset.tokens[s])]
        tokens = dict(offset.tokens)
        for shard, token in self._planner.current(ask).items():
            tokens[shard] = self._end_of(shard, offset.tokens[shard], token, snapshotting, tails)
        recent = _recent_after(offset, tokens, tails)
        return dataclasses.replace(offset, tokens=tokens, recent=recent)

    def _end_of(
        self,
        shard: str,
        previous: EventToken,
        token: EventToken,
        snapshotting: bool,
        tails: Tails | None,
    ) -> EventToken:
        """Where the next batch ends `shard`, given its position `token` now."""
        if tails is not None:
            tails.asked(shard, token.timestamp)
        if snapshotting:
            return token
        if (
            previous.position == token.position
            and token.timestamp - previous.timestamp < self.config.heartbeat_interval
        ):
            return previous  # nothing new and the last heartbeat is recent: no batch
        if tails is not None:
            cut = tails.cut(shard, previous)  # admission control: at most maxBatchRows
            if cut is not None and position_contains(token.position, cut.position):
                return cut
            if tails.reaches(shard, previous, token):
                return token
            held = tails.held_end(shard, previous, token)  # a tail behind: what it has read
            if held is not None and position_contains(token.position, held.position):
                return held
        # A range the tail does not hold (a backlog past its buffer, a tail behind or off):
        # at most maxBatchBytes of binlog, so a backlog never becomes one unbounded batch.
        return self._planner.binlog_cut(shard, previous, token)

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
            ending = StreamOffset.from_json(end)
            snapshotting = ending.snapshot is not None and not ending.snapshot.finished
            tails.follow(ending.tokens, skip_ahead=not snapshotting)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SourcePartition), partition
        return partition.read(self.config)

    def commit(self, end: dict[str, Any]) -> None:
        if self._tails is not None:
            self._tails.commit(StreamOffset.from_json(end).tokens)

    def stop(self) -> None:
        if self._tails is not None:
            self._tails.stop()
        self._planner.close()


class PrefetchingStreamReader(UpdateStreamStreamReader, _SimpleStreamReaderWrapper):
    """The stream reader with `prefetchHeld`: a batch that is one `HeldRowsPartition` (every
    range in it held by a tail) is handed to Spark with its plan.

    Spark's streaming source runner sends the rows of a `_SimpleStreamReaderWrapper`'s
    `getCache` to the JVM with the batch's partitions; the JVM stores them in its block manager
    and the batch's scan reads them there, with no Python worker task. A batch that is not held
    whole (a binlog range, a snapshot chunk) gets no cached rows and its partitions are read on
    the workers as ever. The runner treats such a reader as a simple reader in one more way: it
    does not ask it for `reportLatestOffset`; each offset it hands out names instead the shards
    whose tail had read past it (`_behind`), which the job's lag reads."""

    def __init__(self, config: SourceConfig) -> None:
        super().__init__(config)
        # the runner asks `simple_reader` whether it supports trigger AvailableNow, and to
        # prepare for it
        self.simple_reader = cast(SimpleDataSourceStreamReader, self)
        self.cache = []
        self._planned: tuple[str, str, HeldRowsPartition] | None = None

    def _handed_out(self, offset: StreamOffset) -> dict[str, Any]:
        tails = self._tailing()
        known = tails.latest(sorted(offset.tokens)) if tails is not None else None
        behind = {  # a tail past the offset: the shard has more than the offset holds
            shard: token
            for shard, token in (known or {}).items()
            if token.position != (end := offset.tokens[shard].position)
            and position_contains(token.position, end)
        }
        return super()._handed_out(dataclasses.replace(offset, behind=behind))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        parts = super().partitions(start, end)
        self._planned = None
        if len(parts) == 1 and isinstance(parts[0], HeldRowsPartition):
            self._planned = (_key(start), _key(end), parts[0])
        return parts

    def getCache(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Any] | None:
        planned, self._planned = self._planned, None
        if planned is None or planned[:2] != (_key(start), _key(end)):
            return None
        return planned[2].read(self.config)


def _key(offset: dict[str, Any]) -> str:
    return json.dumps(offset, sort_keys=True)


def _recent_after(
    offset: StreamOffset, ends: dict[str, EventToken], tails: Tails | None
) -> dict[str, RecentTransactions]:
    """Each shard's record of what it read last (`RecentTransactions`), through its end token:
    the record of `offset` followed by the transactions the tail holds up to the end; a shard
    whose range the tail does not hold starts a new, empty record at its end."""
    if tails is None:
        return {}
    recent = dict(offset.recent)
    for shard, end in ends.items():
        start = offset.tokens[shard]
        if start.position == end.position and shard in recent:
            continue
        known = recent.get(shard)
        if known is None or known.position != start.position:
            known = RecentTransactions(start.position)
        read = tails.read_between(shard, start.position, end.position)
        recent[shard] = known.then(read) if read is not None else RecentTransactions(end.position)
    return recent


class UpdateStreamBatchReader(DataSourceReader):
    """A bounded read: from `start` to `end` (default now), same events as the stream."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config

    def partitions(self) -> Sequence[InputPartition]:
        planner = BatchPlanner(self.config)
        try:
            start = planner.resolve(self.config.start)
            end = planner.resolve(self.config.end or Start("now"), check=False)
            finish = StreamOffset(end, dedup=self.config.dedup)
            return planner.partitions(StreamOffset(start).to_json(), finish.to_json())
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SourcePartition), partition
        return partition.read(self.config)


class UpdateStreamDataSource(DataSource):
    """`spark.readStream.format("updatestream")`; the options are in `source.options`."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def _config(self) -> SourceConfig:
        return parse_options(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        config = self._config()
        if config.prefetch_held and config.tail:
            return PrefetchingStreamReader(config)
        return UpdateStreamStreamReader(config)

    def reader(self, schema: StructType) -> DataSourceReader:
        return UpdateStreamBatchReader(self._config())


def register(spark: Any) -> None:
    """Make `format("updatestream")` available in a SparkSession."""
    spark.dataSource.register(UpdateStreamDataSource)
