"""The driver's planning of the source: where a stream starts, and what each batch reads.

`BatchPlanner` keeps one control session per shard and the endpoints of every shard the
Keyspace declares (a hop reads shards that did not exist when the stream started). It turns a
start into the first offset (`start_offset`) and a batch's start and end offsets into its
partitions (`partitions`): per shard the range between its two tokens, held rows when the
shard's binlog tail holds them, the range of a retired shard read from its destinations, and
the batch's snapshot chunks. Both the streaming and the batch reader plan through it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from updatestream.binlog.config import ShardEndpoint, endpoints_of
from updatestream.binlog.errors import BinlogReadError, SourceOptionsError, StartPositionError
from updatestream.binlog.row_converter import EventRow
from updatestream.binlog.session import ShardSession, connection_settings, flavor_of
from updatestream.binlog.start_positions import (
    check_start_available,
    earliest_start,
    find_start_by_timestamp,
)
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import position_contains
from updatestream.core.keyrange import KeyRange
from updatestream.core.recent_rows import RecentTransactions
from updatestream.core.start import Start
from updatestream.core.token import EventToken
from updatestream.spec import Keyspace
from updatestream_jobs.source.binlog_ranges import ShardRange
from updatestream_jobs.source.copy_groups import Via
from updatestream_jobs.source.hopper import (
    Hopper,
    map_for_shards,
    serving_map,
    stopped_serving_at,
)
from updatestream_jobs.source.offsets import HopInfo, StreamOffset
from updatestream_jobs.source.options import SourceConfig
from updatestream_jobs.source.partitions import (
    BinlogRangePartition,
    HeldRowsPartition,
    SourcePartition,
)
from updatestream_jobs.source.snapshots import SnapshotPlanner
from updatestream_jobs.source.tails import Tails

log = logging.getLogger(__name__)

Planned = tuple[ShardRange, list[EventRow] | None]  # a range, and its rows when a tail holds them


class _Announcer:
    """Hands the hop marker of a hop batch to exactly one range: the first of the new map's."""

    def __init__(self, hop: HopInfo | None) -> None:
        self.hop = hop
        self._marker = hop.to_json() if hop is not None else None

    def take(self, shard: str) -> str | None:
        if self.hop is None or self._marker is None or shard not in self.hop.to_shards:
            return None
        marker, self._marker = json.dumps(self._marker, sort_keys=True), None
        return marker


@dataclass
class _Batch:
    begin: StreamOffset
    finish: StreamOffset
    declared: set[str] | None  # the shards the Keyspace declares now (None: no hops)
    dedup: DedupFilter | None
    announcer: _Announcer


class BatchPlanner:
    """Driver-side planning shared by the streaming and the batch reader."""

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
        """Learn the endpoints of every shard the Keyspace declares now; a moved shard gets a
        new session."""
        for endpoint in endpoints_of(keyspace):
            if self.endpoints.get(endpoint.shard) != endpoint:
                self.endpoints[endpoint.shard] = endpoint
                stale = self._sessions.pop(endpoint.shard, None)
                if stale is not None:
                    stale.close()

    def endpoint(self, shard: str) -> ShardEndpoint:
        return self.endpoints.get(shard) or self.config.endpoint(shard)

    def session(self, shard: str) -> ShardSession:
        if shard not in self._sessions:
            self._sessions[shard] = ShardSession(self.endpoint(shard), self.config.reader)
        return self._sessions[shard]

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def binlog_cut(self, shard: str, start: EventToken, end: EventToken) -> EventToken:
        """`end`, or an earlier end about `maxBatchBytes` of binlog after `start` when the range
        is longer (an exact GTID position; the start's timestamp: nothing is promised past the
        start's time)."""
        limit = self.config.max_batch_bytes
        if limit <= 0 or start.position == end.position:
            return end
        points = self.session(shard).split_points(start.position, end.position, limit)
        return EventToken(start.timestamp, shard, points[0]) if points else end

    def current(self, shards: Iterable[str] | None = None) -> dict[str, EventToken]:
        tokens = {}
        for shard in shards if shards is not None else [e.shard for e in self.config.shards]:
            position, now = self.session(shard).current_position()
            tokens[shard] = EventToken(now, shard, position)
        return tokens

    # -- where a stream starts ------------------------------------------------------------------

    def start_offset(self, start: Start, keyspace: Keyspace) -> StreamOffset:
        """Where a new stream starts: the serving shards, or, when the start names the shards
        of an earlier shard map (a stream stopped before a reshard), those shards and that map:
        the first micro-batch then hops to the serving shards."""
        key_range = KeyRange.parse(self.config.key_range)
        serving = serving_map(keyspace)
        wanted = {s.name for s in serving.shards_for(key_range)}
        named = set(start.shards_named())
        dedup = self.config.dedup
        if start.mode == "snapshot":
            return self.snapshots.begin(StreamOffset(self.resolve(start), str(serving), dedup))
        if start.mode not in ("tokens", "resume", "gtid") or wanted <= named:
            return StreamOffset(self.resolve(start), str(serving), dedup)
        old = map_for_shards(keyspace, named & _shards_in_maps(keyspace, key_range), key_range)
        shards = [s.name for s in old.shards_for(key_range)]
        declared = {shard.name for shard in keyspace.spec.shards}
        tokens = self.resolve(start, shards=shards, check_shards=declared)
        log.info("stream starts on shards %s of shard map %s", ",".join(shards), old)
        return StreamOffset(tokens, str(old), dedup)

    def resolve(
        self,
        start: Start,
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
            given = None if reachable else start.given_token(shard)
            tokens[shard] = given or self._start_of(start, shard, check=check)
        return tokens

    def _start_of(self, start: Start, shard: str, *, check: bool) -> EventToken:
        """Where `start` starts `shard`, read from the shard itself."""
        session = self.session(shard)
        if check:
            session.check_settings()
        if start.mode in ("now", "snapshot"):
            position, now = session.current_position()
            return EventToken(now, shard, position)
        if start.mode == "earliest":
            position, opened = earliest_start(session)
            return EventToken(opened, shard, position)
        if start.mode == "timestamp":
            assert start.timestamp is not None
            return self._at_timestamp(session, start.timestamp)
        named = start.named(shard)
        if named is None:
            forms = "a token, a GTID position or a timestamp" if start.mode == "resume" else ""
            raise StartPositionError(
                f"the start names no position for shard {shard} (it names "
                f"{', '.join(start.shards_named())}); give every shard of the key range "
                f"{forms or 'a position'}",
                shard=shard,
            )
        if named.kind == "timestamp":
            assert named.timestamp is not None
            return self._at_timestamp(session, named.timestamp)
        token = named.given_token(flavor_of(session.endpoint))
        assert token is not None
        if check:
            check_start_available(session, token.position)
        return token

    def _at_timestamp(self, session: ShardSession, timestamp: int) -> EventToken:
        settings = connection_settings(session.endpoint, self.config.reader)
        position = find_start_by_timestamp(session, settings, timestamp)
        return EventToken(timestamp, session.endpoint.shard, position)

    # -- what a batch reads ----------------------------------------------------------------------

    def partitions(
        self,
        start: dict[str, Any],
        end: dict[str, Any],
        hopper: Hopper | None = None,
        tails: Tails | None = None,
    ) -> list[SourcePartition]:
        """The partitions of the batch from `start` to `end`. A shard the Keyspace no longer
        declares (retired after the batch was planned) is read from its destinations. Ranges
        that the shards' tails hold share one partition that carries their rows."""
        begin, finish = StreamOffset.from_json(start), StreamOffset.from_json(end)
        dedup = finish.dedup if finish.dedup and not finish.dedup.is_empty() else None
        keyspace = hopper.keyspace() if hopper else None  # one read for the batch
        declared = {s.name for s in keyspace.spec.shards} if keyspace else None
        batch = _Batch(begin, finish, declared, dedup, _Announcer(finish.new_hop(begin)))
        planned: list[Planned] = []
        for shard in sorted(finish.tokens):
            planned += self._shard_ranges(batch, shard, hopper, tails)
        if keyspace is not None:
            planned = _capped(planned, keyspace)
        holdback = begin.holdback()
        parts: list[SourcePartition] = []
        held = [(part.with_holdback(holdback), rows) for part, rows in planned if rows is not None]
        for part, rows in planned:
            if rows is None:
                parts.append(BinlogRangePartition(part.with_holdback(holdback)))
            elif held:  # the held ranges' partition goes where the first of them was
                parts.append(HeldRowsPartition(held))
                held = []
        return [*parts, *self.snapshots.chunk_partitions(begin, finish, self.endpoint)]

    def _shard_ranges(
        self, batch: _Batch, shard: str, hopper: Hopper | None, tails: Tails | None
    ) -> list[Planned]:
        end_token = batch.finish.tokens[shard]
        start_token = batch.begin.tokens.get(shard)
        hop = batch.announcer.hop
        if start_token is None and hop is not None:
            start_token = hop.starts.get(shard)
        if start_token is None:
            raise SourceOptionsError(f"offset has no start for shard {shard}")
        if start_token == end_token:
            if hop is None:
                return []
            held = end_token.dumps()  # a kept shard's heartbeat: it is read on, not retired
            return [(ShardRange(shard, held, held, True, marker=batch.announcer.take(shard)), None)]
        if not position_contains(end_token.position, start_token.position):
            raise BinlogReadError(
                f"shard {shard} went back from {start_token.position} to "
                f"{end_token.position}; its binlog history changed (restored or reset?)"
            )
        if hopper is not None and batch.declared is not None and shard not in batch.declared:
            record = batch.finish.recent.get(shard)
            return self._via_destinations(
                hopper, shard, start_token, end_token, batch.dedup, record
            )
        rows = tails.rows(shard, start_token, end_token) if tails is not None else None
        endpoint = self.endpoint(shard)
        if rows is not None:
            marker = batch.announcer.take(shard)
            part = ShardRange(
                shard, start_token.dumps(), end_token.dumps(), True, endpoint, batch.dedup, marker
            )
            return [(part, rows)]
        return self._binlog_pieces(batch, shard, start_token, end_token, endpoint)

    def _binlog_pieces(
        self,
        batch: _Batch,
        shard: str,
        start: EventToken,
        end: EventToken,
        endpoint: ShardEndpoint,
    ) -> list[Planned]:
        """The shard's range in pieces of about `maxPartitionBytes` of binlog, read in
        parallel; only the last one ends with the shard's heartbeat."""
        cuts = self.session(shard).split_points(
            start.position, end.position, self.config.max_partition_bytes
        )
        edges = [start.dumps()]
        edges += [EventToken(start.timestamp, shard, c).dumps() for c in cuts]
        edges.append(end.dumps())
        pieces: list[Planned] = []
        for index in range(len(edges) - 1):
            last = index == len(edges) - 2
            marker = batch.announcer.take(shard)
            part = ShardRange(
                shard, edges[index], edges[index + 1], last, endpoint, batch.dedup, marker
            )
            pieces.append((part, None))
        return pieces

    def _via_destinations(
        self,
        hopper: Hopper,
        shard: str,
        start: EventToken,
        end: EventToken,
        dedup: DedupFilter | None,
        record: RecentTransactions | None,
    ) -> list[Planned]:
        via = Via(shard, start.position, end.position, record).to_json()
        pieces: list[Planned] = []
        for destination, first, last in hopper.retired_range(shard, start, end):
            endpoint = self.endpoint(destination)
            part = ShardRange(
                destination, first.dumps(), last.dumps(), False, endpoint, dedup, None, via
            )
            pieces.append((part, None))
        log.info("reading retired shard %s from %s up to %s", shard, start.position, end.position)
        # The retired shard's own heartbeat: it was read up to `end`.
        pieces.append((ShardRange(shard, end.dumps(), end.dumps(), True), None))
        return pieces


def _capped(planned: list[Planned], keyspace: Keyspace) -> list[Planned]:
    """The ranges, each of a shard that no longer serves in `keyspace` with its heartbeat
    capped at the time it stopped (see `ShardRange`)."""
    capped: list[Planned] = []
    for part, rows in planned:
        stopped = stopped_serving_at(keyspace, part.shard)
        if stopped is not None:
            part = dataclasses.replace(part, stopped_serving_at=int(stopped))
        capped.append((part, rows))
    return capped


def _shards_in_maps(keyspace: Keyspace, key_range: KeyRange) -> set[str]:
    """Every shard that reads part of `key_range` in the serving map or its history."""
    names = {s.name for s in serving_map(keyspace).shards_for(key_range)}
    for entry in keyspace.spec.shard_map_history:
        names |= {s.name for s in entry.shard_map.shards_for(key_range)}
    return names
