"""The hop inside a running query: from the shards a stream reads to the serving ones.

Before every micro-batch the stream reader asks `Hopper.check` whether the shards its key range
reads are still the serving ones. When the Keyspace's serving map changed (a split, a merge, or
several reshards while the stream was stopped), the hop is planned with the core
(`plan_hop`) from the offset the last batch ended at, which is exactly what was delivered:

* each destination starts at the minimum of its sources' last delivered timestamps, or when
  the serving map changed if that is earlier (the destination's own writes start then), minus
  `hop_lookback` seconds (a transaction's binlog time can be older than its commit; reading a
  little earlier costs only duplicates, which are dropped exactly);
* each source's watermark is its last delivered GTID position: a destination event copied from
  that source at or below it is a hop duplicate, marked by the reader and dropped by the job;
* shards that serve in both maps keep their tokens.

The stream moves through the Keyspace's shard map history one map at a time, so a stream that
was stopped during two reshards reads the intermediate shards while they still exist.

Coverage: a destination's binlog holds a source's transactions only from the position its
filtered replication started at (`_vt.vreplication.start_pos` on the destination when the
development cluster records it; on real Vitess, read from the destination's binlog by
`scan_copy_starts`). If a source's watermark is older than that, the changes in between exist
only in the source's binlog: while the source is still declared, the hop waits and the stream
keeps reading the source; once it is retired, `HopGapError` says what is missing instead of
losing it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from updatestream.binlog.copy_starts import CopyStart, floor, scan_copy_starts
from updatestream.binlog.errors import HopGapError, SourceOptionsError
from updatestream.binlog.session import ShardSession, connection_settings
from updatestream.binlog.start_positions import find_start_by_timestamp
from updatestream.binlog.vreplication import decode_position, source_fields
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import GTIDParseError, GTIDPosition, parse_position, position_contains
from updatestream.core.hop_plan import HopPlan, canonical_shard_name, plan_hop
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken
from updatestream.spec import Keyspace
from updatestream_jobs.source.journals import Draining, Journals
from updatestream_jobs.source.keyspace_watch import KeyspaceWatch
from updatestream_jobs.source.offsets import HopInfo, StreamOffset

log = logging.getLogger(__name__)

_COVERAGE_COLUMN = (
    "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '_vt' "
    "AND TABLE_NAME = 'vreplication' AND COLUMN_NAME = 'start_pos'"
)
_COVERAGE = "SELECT source, start_pos FROM _vt.vreplication WHERE copy_done = 1 ORDER BY id"


def serving_map(keyspace: Keyspace) -> ShardMap:
    return keyspace.spec.serving_map


def _history(keyspace: Keyspace) -> list[tuple[float, ShardMap]]:
    return [(entry.at, entry.shard_map) for entry in keyspace.spec.shard_map_history]


def map_for_shards(keyspace: Keyspace, shards: set[str], key_range: KeyRange) -> ShardMap:
    """The latest shard map (serving, else from the history) in which `key_range` reads
    exactly `shards`: where a stream whose offset names those shards stands."""
    candidates = [serving_map(keyspace)] + [m for _, m in reversed(_history(keyspace))]
    for shard_map in candidates:
        if {s.name for s in shard_map.shards_for(key_range)} == shards:
            return shard_map
    raise SourceOptionsError(
        f"the start names shards {','.join(sorted(shards))}, which no shard map of Keyspace "
        f"{keyspace.metadata.name} (serving or in its shardMapHistory) serves for key range "
        f"{key_range}; give tokens of the serving shards, or of shards from the history"
    )


def next_map(
    keyspace: Keyspace, old: ShardMap, key_range: KeyRange
) -> tuple[ShardMap, float | None]:
    """The map a stream reading `old` hops to next, and when it started serving.

    The first map after `old` in the history whose new shards (for `key_range`) are all still
    declared; the serving map when there is none or `old` is not in the history.
    """
    declared = {shard.name for shard in keyspace.spec.shards}
    history = _history(keyspace)
    serving = serving_map(keyspace)
    index = max((i for i, (_, m) in enumerate(history) if m == old), default=None)
    if index is not None:
        for at, candidate in history[index + 1 :]:
            new = {s.name for s in candidate.shards_for(key_range)} - set(old.names)
            if candidate == serving or new <= declared:
                return candidate, at
    changed = next((t for t, m in reversed(history) if m == serving), None)
    return serving, changed


def stopped_serving_at(keyspace: Keyspace, shard: str) -> float | None:
    """When `shard` stopped serving: the time of the first map in the history after the last
    one that names it; None while it serves, or when the history does not say."""
    if shard in keyspace.spec.serving_shards:
        return None
    history = keyspace.spec.shard_map_history
    last = max((i for i, entry in enumerate(history) if shard in entry.shards), default=None)
    if last is None or last + 1 >= len(history):
        return None
    return history[last + 1].at


@dataclass(frozen=True)
class Gap:
    destination: str
    source: str
    watermark: GTIDPosition
    covered_from: GTIDPosition


class Hopper:
    """Decides, before each micro-batch, whether the stream hops (driver side)."""

    def __init__(
        self,
        key_range: str,
        watch: KeyspaceWatch,
        session: Callable[[str], ShardSession],
        *,
        lookback: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.key_range = KeyRange.parse(key_range)
        self.watch = watch
        self._session = session
        self.lookback = lookback
        self._clock = clock
        self._waiting: str | None = None
        self.journals = Journals(session)
        self._scanned: dict[str, dict[str, CopyStart]] = {}  # endpoint -> its copy starts

    def keyspace(self) -> Keyspace:
        return self.watch.current()

    def check(self, offset: StreamOffset) -> StreamOffset | None:
        """The end offset of the hop batch, or None when the stream stays on its shards."""
        keyspace = self.keyspace()
        serving = serving_map(keyspace)
        reading = set(offset.tokens)
        if reading == {s.name for s in serving.shards_for(self.key_range)}:
            self._waiting = None
            return None
        old = (
            ShardMap.parse(offset.shard_map)
            if offset.shard_map
            else map_for_shards(keyspace, reading, self.key_range)
        )
        if {s.name for s in old.shards_for(self.key_range)} != reading:
            old = map_for_shards(keyspace, reading, self.key_range)
        new, changed_at = next_map(keyspace, old, self.key_range)
        plan = plan_hop(old, new, offset.tokens, self.key_range)
        declared = {shard.name for shard in keyspace.spec.shards}
        delivered = {name: token.position for name, token in offset.tokens.items()}
        journaled = self.journals.starts(plan, delivered, declared)
        if isinstance(journaled, Draining):
            return None
        if journaled is not None:
            return self._hop_offset(offset, plan, changed_at, journaled)
        gaps = self._gaps(plan)
        if gaps:
            gone = [g for g in gaps if g.source not in declared]
            if gone:
                raise _gap_error(gone, keyspace)
            self._wait_for(gaps)
            return None
        self._waiting = None
        return self._hop_offset(offset, plan, changed_at)

    def _wait_for(self, gaps: list[Gap]) -> None:
        text = "; ".join(
            f"{g.destination} holds {g.source}'s changes only after {g.covered_from}, the stream "
            f"delivered {g.source} up to {g.watermark}"
            for g in gaps
        )
        if text != self._waiting:
            log.warning("hop deferred: %s; reading the source shards further first", text)
            self._waiting = text

    def _gaps(self, plan: HopPlan) -> list[Gap]:
        gaps = []
        for name, start in plan.destinations.items():
            covered = self.coverage(name)
            for source in start.sources:
                watermark = plan.watermarks[source]
                text = covered.get(source)
                if text is None:
                    continue
                try:
                    covered_from = parse_position(text, watermark.flavor)
                except GTIDParseError:
                    log.warning("destination %s: unreadable start_pos %r of %s", name, text, source)
                    continue
                if not position_contains(watermark, covered_from):
                    gaps.append(Gap(name, source, watermark, covered_from))
        return gaps

    def retired_range(
        self, shard: str, start: EventToken, end: EventToken
    ) -> list[tuple[str, EventToken, EventToken]]:
        """Where the changes of retired `shard` after `start` up to `end` can still be read:
        (destination, from, to) for every serving shard that took part of its key range and
        whose binlog covers it from `start` on; HopGapError when one does not."""
        keyspace = self.keyspace()
        wanted = KeyRange.parse(shard).intersection(self.key_range)
        assert wanted is not None, f"shard {shard} does not intersect {self.key_range}"
        found = []
        for destination in serving_map(keyspace).shards_for(wanted):
            name = destination.name
            text = self.coverage(name).get(shard)
            covered = parse_position(text, start.position.flavor) if text is not None else None
            if covered is None or not position_contains(start.position, covered):
                gap = Gap(name, shard, start.position, covered or start.position)
                raise _gap_error([gap], keyspace, known=covered is not None)
            first, last = self._read_range(name, start.timestamp - self.lookback)
            found.append((name, self._floored(first, {shard: start.position}), last))
        return found

    def _read_range(self, shard: str, target: int) -> tuple[EventToken, EventToken]:
        """Where to read `shard` from (just before its first transaction at or after `target`)
        and up to (its position now)."""
        session = self._session(shard)
        session.check_settings()
        target = max(0, target)
        settings = connection_settings(session.endpoint, session.config)
        first = find_start_by_timestamp(session, settings, target)
        current, now = session.current_position()
        return EventToken(target, shard, first), EventToken(max(now, target + 1), shard, current)

    def coverage(self, shard: str) -> dict[str, str]:
        """Source shard -> the position after which `shard`'s binlog holds its transactions
        (`_vt.vreplication.start_pos` of a finished copy; the empty position: all of them);
        no entry when the shard does not record it."""
        session = self._session(shard)
        if not session.query(_COVERAGE_COLUMN)[0][0]:
            return self._scanned_coverage(shard, session)
        found: dict[str, str] = {}
        for source, start_pos in session.query(_COVERAGE):
            name = canonical_shard_name(source_fields(_text(source))[1])
            position = decode_position(start_pos, session.flavor) if start_pos else None
            found[name] = str(position) if position is not None else ""  # the newest row wins
        return found

    def _scanned_coverage(self, shard: str, session: ShardSession) -> dict[str, str]:
        """Real Vitess keeps no copy start in a table: it is read from the shard's binlog."""
        return {name: str(start.source) for name, start in self._copy_starts(session).items()}

    def _copy_starts(self, session: ShardSession) -> dict[str, CopyStart]:
        """`scan_copy_starts` of the shard, read once: it is asked only about the targets of
        a serving map change, whose copy phases ended before the switch."""
        endpoint = session.endpoint.describe()
        known = self._scanned.get(endpoint)
        if known is None:
            known = self._scanned[endpoint] = scan_copy_starts(session)
            text = {name: str(start.source) for name, start in known.items()}
            log.info("%s holds copies from: %s", endpoint, text or "nowhere")
        return known

    def _floored(self, start: EventToken, delivered: dict[str, GTIDPosition]) -> EventToken:
        """`start` on a real Vitess target moved past the copy-phase rows (no marker) of the
        sources the stream delivered beyond them (`copy_starts.floor`)."""
        session = self._session(start.shard)
        if session.query(_COVERAGE_COLUMN)[0][0]:
            return start  # the development cluster's: `coverage` reads where its copies start
        after = floor(self._copy_starts(session), delivered)
        if after is None or position_contains(start.position, after):
            return start
        log.info("%s: reading from %s, after its copy phase", start.shard, after)
        return EventToken(start.timestamp, start.shard, after)

    def _hop_offset(
        self,
        offset: StreamOffset,
        plan: HopPlan,
        changed_at: float | None,
        journaled: dict[str, GTIDPosition] | None = None,
    ) -> StreamOffset:
        tokens: dict[str, EventToken] = {
            name: offset.tokens[name] for name in plan.unchanged if name in offset.tokens
        }
        starts: dict[str, EventToken] = {}
        for name, destination in plan.destinations.items():
            target = _start_second(destination.start_timestamp, changed_at) - self.lookback
            if journaled is not None:  # at the switch, exactly: no copy is read again
                current, now = self._session(name).current_position()
                second = max(0, int(changed_at or now))
                starts[name] = EventToken(second, name, journaled[name])
                tokens[name] = EventToken(max(now, second), name, current)
            else:
                first, tokens[name] = self._read_range(name, target)
                delivered = {source: plan.watermarks[source] for source in destination.sources}
                starts[name] = self._floored(first, delivered)
        dedup = DedupFilter.from_plan(plan, offset.recent)
        if offset.dedup is not None:
            dedup = offset.dedup.merged(dedup)
        hop = HopInfo(
            number=(offset.hop.number + 1) if offset.hop else 1,
            from_map=str(plan.old),
            to_map=str(plan.new),
            from_shards=tuple(s.name for s in plan.old.shards_for(self.key_range)),
            to_shards=tuple(s.name for s in plan.new.shards_for(self.key_range)),
            detected_at=self._clock(),
            serving_changed_at=changed_at,
            starts=starts,
            watermarks={name: str(p) for name, p in plan.watermarks.items()},
        )
        log.info(
            "hop %d of key range %s: %s -> %s; destinations start at %s",
            hop.number,
            self.key_range,
            ",".join(hop.from_shards),
            ",".join(hop.to_shards),
            ", ".join(f"{n}@{t.timestamp}" for n, t in sorted(starts.items())),
        )
        # The snapshot goes on after the hop: its progress is kept by key range, and the hop
        # batch reads no chunks (a chunk reads its rows from the shards serving after it).
        snapshot = offset.snapshot.advance(()) if offset.snapshot is not None else None
        recent = {shard: r for shard, r in offset.recent.items() if shard in tokens}
        return StreamOffset(tokens, str(plan.new), dedup, hop, snapshot, recent)


def _start_second(planned: int, changed_at: float | None) -> int:
    """Where a destination is read from: the planned start, but never after the serving map
    changed, because the destination's own writes begin then. A stream that was stopped, or
    that read its sources up to their last position, has last delivered timestamps later than
    the change."""
    if changed_at is None:
        return planned
    return min(planned, int(changed_at))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value or "")


def _gap_error(gaps: list[Gap], keyspace: Keyspace, known: bool = True) -> HopGapError:
    first = gaps[0]
    details = "; ".join(
        f"shard {g.source}'s changes after {g.watermark} up to {g.covered_from} (destination "
        f"{g.destination} holds them only from there)"
        if known
        else f"shard {g.source}'s changes after {g.watermark} (destination {g.destination} "
        "does not record since when its binlog holds them)"
        for g in gaps
    )
    return HopGapError(
        f"cannot hop Keyspace {keyspace.metadata.name}: {details} are only in the binlog of "
        f"retired shard {first.source}. Nothing was skipped; the stream stopped. Bring "
        f"{first.source} back (declare it in the Keyspace again) so the stream can read it, or "
        "reshard with a replay window that reaches back to the stream's position, or restart "
        "the stream from a new start position",
        source=first.source,
        destination=first.destination,
    )
