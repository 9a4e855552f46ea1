"""Positions: where each shard of a key range starts, how job reports advance them, and what
a relaunch is told (its start, the dedup filter of its hops). Pure functions over status data.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence

from updatestream.core.dedup import DedupFilter
from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import Comparison, Flavor, MariaDBPosition, MySQLGTIDSet
from updatestream.core.hop_plan import plan_hop
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken, compare
from updatestream.spec import Keyspace, StartPosition, UpdateStreamSpec
from updatestream_operator.reconciler import conditions as cond
from updatestream_operator.reconciler.models import (
    HopRecord,
    JobProgress,
    KeyRangeStatus,
    ShardPosition,
)


def relevant_shards(shard_map: ShardMap, key_range: KeyRange) -> list[KeyRange]:
    """The shards of `shard_map` that hold keyspace ids of `key_range`, in key order."""
    return shard_map.shards_for(key_range)


def spec_hash(
    spec: UpdateStreamSpec,
    keyspace: Keyspace,
    key_range: KeyRange,
    shard_map: ShardMap | None = None,
) -> str:
    """A hash of what a running job was configured with; a change means relaunching it.

    Covers the stream's tables, sinks and Spark settings, the VSchema, and the endpoints of the
    shards the key range reads in `shard_map` (default: the serving map; a shard no longer
    declared counts as no endpoint). Not the start (positions win), suspend, the serving map
    itself or its history: a change there is a hop, and a job that hops in place keeps its
    configuration.
    """
    serving = shard_map or keyspace.spec.serving_map
    declared = {shard.name: shard for shard in keyspace.spec.shards}
    shards = [declared.get(shard.name) for shard in relevant_shards(serving, key_range)]
    content = {
        "stream": spec.model_dump(
            mode="json", by_alias=True, include={"tables", "sinks", "spark", "keyspace"}
        ),
        "vschema": keyspace.spec.vschema,
        "shards": [s.model_dump(mode="json", by_alias=True) if s else None for s in shards],
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def secret_names(spec: UpdateStreamSpec, keyspace: Keyspace) -> tuple[str, ...]:
    names = {shard.credentials_secret.name for shard in keyspace.spec.shards}
    for sink in spec.sinks:
        secret = getattr(sink, "credentials_secret", None)
        if secret is not None:
            names.add(secret.name)
    return tuple(sorted(names))


def shard_flavor(keyspace: Keyspace, shard: KeyRange) -> Flavor:
    try:
        return Flavor(keyspace.spec.shard(shard.name).flavor)
    except UpdateStreamError:
        return Flavor.MARIADB


def delivered_token(position: ShardPosition, flavor: Flavor) -> EventToken:
    """The last delivered token of a shard; without one, a floor: nothing delivered since the
    shard's start (its start timestamp, or 0 with its start GTID as the watermark)."""
    if position.token is not None:
        return EventToken.from_json(position.token)
    if position.gtid:
        from updatestream.core.gtid import parse_position

        return EventToken(0, position.name.name, parse_position(position.gtid, flavor))
    empty = MariaDBPosition() if flavor is Flavor.MARIADB else MySQLGTIDSet()
    return EventToken(position.start_timestamp or 0, position.name.name, empty)


def initial_positions(
    start: StartPosition, shards: Sequence[KeyRange], now: dt.datetime
) -> list[ShardPosition]:
    """Where each shard starts on a stream's first launch, as resumable positions."""
    positions = []
    for shard in shards:
        token = (start.tokens or {}).get(shard.name) if start.mode == "tokens" else None
        gtid = (start.gtid or {}).get(shard.name) if start.mode == "gtid" else None
        if start.mode == "timestamp":
            ts: int | None = start.timestamp or 0
        elif start.mode == "now":
            ts = int(now.timestamp())
        else:
            ts = 0 if token is None and gtid is None else None
        positions.append(ShardPosition(name=shard, token=token, gtid=gtid, start_timestamp=ts))
    return positions


def resume_start(entry: KeyRangeStatus) -> StartPosition:
    """The start of a relaunch: every shard from its recorded position, in the simplest form
    that says it (`tokens` when every shard has a token, one `timestamp` or `gtid` for all;
    `resume`, per shard, when the forms differ, as after a hop)."""
    tokens = {p.name.name: p.token for p in entry.shards if p.token is not None}
    gtids = {p.name.name: p.gtid for p in entry.shards if p.token is None and p.gtid}
    stamps = {
        p.name.name: p.start_timestamp or 0 for p in entry.shards if p.token is None and not p.gtid
    }
    if tokens and not gtids and not stamps:
        return StartPosition(mode="tokens", tokens=tokens)
    if gtids and not tokens and not stamps:
        return StartPosition(mode="gtid", gtid=gtids)
    if stamps and not tokens and not gtids and len(set(stamps.values())) == 1:
        (only,) = set(stamps.values())
        return StartPosition(mode="timestamp", timestamp=only)
    return StartPosition(
        mode="resume", tokens=tokens or None, gtid=gtids or None, timestamps=stamps or None
    )


def launch_dedup(
    entry: KeyRangeStatus, completed: Sequence[HopRecord], pending: HopRecord | None
) -> DedupFilter | None:
    """The dedup rule a launch starts with: the one the key range's last launch applied (as
    its job reported it, which covers the hops it made in place), merged with the rule of the
    hop the operator plans itself for this relaunch. A status written before jobs reported
    their rule has none: the completed hops are planned again, as then."""
    current = entry.dedup if entry.dedup is not None else planned_dedup(completed)
    planned = planned_dedup([pending]) if pending is not None else None
    if current is None or planned is None:
        return current or planned
    return current.merged(planned)


def planned_dedup(hops: Sequence[HopRecord]) -> DedupFilter | None:
    """The dedup rule of hops planned from their records, oldest first, merged (later ones
    win); None when there is nothing to drop."""
    merged: DedupFilter | None = None
    for hop in hops:
        if not hop.last_delivered:
            continue
        plan = plan_hop(
            hop.from_map,
            hop.to_map,
            {name: EventToken.from_json(t) for name, t in hop.last_delivered.items()},
            hop.key_range,
        )
        found = DedupFilter.from_plan(plan)
        merged = found if merged is None else merged.merged(found)
    return merged if merged is not None and not merged.is_empty() else None


def fold_progress(entry: KeyRangeStatus, progress: JobProgress | None) -> KeyRangeStatus:
    """Positions, counts and lag of `entry` advanced by its job's report (of the same launch)."""
    if progress is None or progress.launch_id != entry.launch_id:
        return entry
    shards = []
    for position in entry.shards:
        report = progress.shards.get(position.name)
        if report is None:
            shards.append(position)
            continue
        token = position.token
        newer = report.token is not None and (
            token is None
            or compare(report.token, EventToken.from_json(token)) is not Comparison.BEFORE
        )
        if newer and report.token is not None:
            token = report.token.to_json()
        shards.append(
            position.model_copy(
                update={
                    "token": token,
                    "events": dict(report.events) or position.events,
                    "lag_seconds": report.lag_seconds,
                }
            )
        )
    return entry.model_copy(
        update={
            "shards": shards,
            "duplicates": dict(progress.duplicates),
            "duplicates_dropped": sum(progress.duplicates.values()),
            "message": _message(entry, progress),
            "dedup": progress.dedup if progress.dedup is not None else entry.dedup,
            "reported_at": _reported_at(progress) or entry.reported_at,
            "batches": progress.batches,
            "duplicates_delivered": dict(progress.duplicates_delivered),
        }
    )


def _message(entry: KeyRangeStatus, progress: JobProgress) -> str | None:
    """The job's fatal error; a launch that delivers leaves its predecessor's behind. Between
    a stop and the relaunch the stopped job's report changes nothing: the stop decided."""
    if entry.phase == "Restarting":
        return entry.message
    return progress.error or (None if progress.batches else entry.message)


def _reported_at(progress: JobProgress) -> str | None:
    if progress.updated_at is None:
        return None
    return cond.rfc3339(dt.datetime.fromtimestamp(progress.updated_at, dt.UTC))


def seconds_between(start: str, end: dt.datetime) -> float:
    return max(0.0, (end - cond.parse_rfc3339(start)).total_seconds())
