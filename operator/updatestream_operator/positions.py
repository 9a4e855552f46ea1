"""Positions: where each shard of a key range starts, how job reports advance them, and what
a relaunch is told (its start, the dedup filter of its hops). Pure functions over status data.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from updatestream.core.dedup import DedupFilter
from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import Comparison, Flavor, MariaDBPosition, MySQLGTIDSet
from updatestream.core.hop_plan import plan_hop
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken, compare
from updatestream.spec import Keyspace, StartPosition, UpdateStreamSpec
from updatestream_operator import conditions as cond
from updatestream_operator.models import (
    HopRecord,
    JobProgress,
    KeyRangeStatus,
    ShardPosition,
)


def relevant_shards(shard_map: str, key_range: str) -> list[str]:
    """The shards of `shard_map` that hold keyspace ids of `key_range`, in key order."""
    return [s.name for s in ShardMap.parse(shard_map).shards_for(KeyRange.parse(key_range))]


def spec_hash(
    spec: UpdateStreamSpec, keyspace: Keyspace, key_range: str, shard_map: str | None = None
) -> str:
    """A hash of what a running job was configured with; a change means relaunching it.

    Covers the stream's tables, sinks and Spark settings, the VSchema, and the endpoints of the
    shards the key range reads in `shard_map` (default: the serving map; a shard no longer
    declared counts as no endpoint). Not the start (positions win), suspend, the serving map
    itself or its history: a change there is a hop, and a job that hops in place keeps its
    configuration.
    """
    serving = shard_map or ",".join(keyspace.spec.serving_shards)
    declared = {shard.name: shard for shard in keyspace.spec.shards}
    shards = [declared.get(name) for name in relevant_shards(serving, key_range)]
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


def flavor_of(keyspace: Keyspace, shard: str) -> Flavor:
    try:
        return Flavor(keyspace.spec.shard(shard).flavor)
    except UpdateStreamError:
        return Flavor.MARIADB


def delivered_token(position: ShardPosition, flavor: Flavor) -> EventToken:
    """The last delivered token of a shard; without one, a floor: nothing delivered since the
    shard's start (its start timestamp, or 0 with its start GTID as the watermark)."""
    if position.token is not None:
        return EventToken.from_json(position.token)
    if position.gtid:
        from updatestream.core.gtid import parse_position

        return EventToken(0, position.name, parse_position(position.gtid, flavor))
    empty = MariaDBPosition() if flavor is Flavor.MARIADB else MySQLGTIDSet()
    return EventToken(position.start_timestamp or 0, position.name, empty)


def initial_positions(
    start: StartPosition, shards: Sequence[str], now: dt.datetime
) -> list[ShardPosition]:
    """Where each shard starts on a stream's first launch, as resumable positions."""
    positions = []
    for shard in shards:
        token = (start.tokens or {}).get(shard) if start.mode == "tokens" else None
        gtid = (start.gtid or {}).get(shard) if start.mode == "gtid" else None
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
    tokens = {p.name: p.token for p in entry.shards if p.token is not None}
    gtids = {p.name: p.gtid for p in entry.shards if p.token is None and p.gtid}
    stamps = {
        p.name: p.start_timestamp or 0 for p in entry.shards if p.token is None and not p.gtid
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


def dedup_filter(hops: Sequence[HopRecord]) -> dict[str, Any] | None:
    """The dedup filter (JSON) of a key range's hops, oldest first, merged (later ones win)."""
    merged: DedupFilter | None = None
    for hop in hops:
        if not hop.last_delivered:
            continue
        plan = plan_hop(
            ShardMap.parse(hop.from_map),
            ShardMap.parse(hop.to_map),
            {name: EventToken.from_json(t) for name, t in hop.last_delivered.items()},
            KeyRange.parse(hop.key_range),
        )
        found = DedupFilter.from_plan(plan)
        merged = found if merged is None else merged.merged(found)
    return merged.to_json() if merged is not None and not merged.is_empty() else None


def fold_progress(entry: KeyRangeStatus, progress: JobProgress | None) -> KeyRangeStatus:
    """Positions, counts and lag of `entry` advanced by its job's report (of the same launch)."""
    if progress is None or progress.launch_id != entry.launch_id:
        return entry
    by_name = {KeyRange.parse(name).name: report for name, report in progress.shards.items()}
    shards = []
    for position in entry.shards:
        report = by_name.get(position.name)
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
            "message": progress.error,
        }
    )


def seconds_between(start: str, end: dt.datetime) -> float:
    return max(0.0, (end - cond.parse_rfc3339(start)).total_seconds())
