"""Reading a job's progress report: the JSON status file the streaming job writes.

The job writes, per shard, the last delivered Event Token, event counts by op (`byOp`) and the
lag; and counts of dropped duplicates by cause (`duplicates`). A job that hops inside its
running query also writes the serving shard map it reads (`shardMap`) and its hops (`hops`,
oldest first). The reader accepts camelCase and snake_case keys, shards as a mapping or a list,
and tokens as JSON text or objects, and ignores fields it does not know, so it does not break
when the job adds some. A report that cannot be read gives a `ProgressError` naming what was
wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken, TokenError
from updatestream_operator.models import JobProgress, ReportedHop, ShardProgress


class ProgressError(UpdateStreamError):
    """A job's progress report is malformed."""


def _first(data: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in data:
            return data[key]
    return None


def _counts(value: Any, what: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ProgressError(f"{what} must be an object of counts, got {value!r}")
    counts: dict[str, int] = {}
    for key, count in value.items():
        if isinstance(count, bool) or not isinstance(count, int | float) or count < 0:
            raise ProgressError(f"{what}.{key} must be a non-negative count, got {count!r}")
        counts[str(key)] = int(count)
    return counts


def _token(value: Any, shard: str) -> EventToken | None:
    if value is None or value == "":
        return None
    try:
        if isinstance(value, str):
            return EventToken.loads(value)
        if isinstance(value, Mapping):
            return EventToken.from_json(value)
    except TokenError as exc:
        raise ProgressError(f"shard {shard}: last token is invalid: {exc}") from None
    raise ProgressError(f"shard {shard}: last token must be JSON text or an object, got {value!r}")


def _lag(value: Any, shard: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProgressError(f"shard {shard}: lag must be a number of seconds, got {value!r}")
    return max(0.0, float(value))


def _seconds(value: Any, what: str) -> float | None:
    """Unix seconds (or a duration): a finite number, or null."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProgressError(f"{what} must be a number of seconds or null, got {value!r}")
    return float(value)


def _shard_map(value: Any, what: str) -> str | None:
    """A serving shard map, `-40,40-80,80-` (or a list of names), in canonical form."""
    if value is None or value == "":
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str):
        raise ProgressError(f"{what} must be a shard map such as '-80,80-', got {value!r}")
    try:
        return str(ShardMap.parse(value))
    except UpdateStreamError as exc:
        raise ProgressError(f"{what} is not a shard map: {exc}") from None


def _shard_names(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProgressError(f"{what} must be a list of shard names, got {value!r}")
    try:
        return tuple(KeyRange.parse(v).name for v in value)
    except UpdateStreamError as exc:
        raise ProgressError(f"{what} holds a name that is not a shard: {exc}") from None


def _hops(raw: Any) -> tuple[ReportedHop, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProgressError(f"hops must be a list, got {type(raw).__name__}")
    hops = []
    for index, item in enumerate(raw):
        where = f"hops[{index}]"
        if not isinstance(item, Mapping):
            raise ProgressError(f"{where} must be an object, got {item!r}")
        from_map = _shard_map(_first(item, "fromMap", "from_map"), f"{where}.fromMap")
        to_map = _shard_map(_first(item, "toMap", "to_map"), f"{where}.toMap")
        if from_map is None or to_map is None:
            missing = "fromMap" if from_map is None else "toMap"
            raise ProgressError(f"{where}.{missing} is missing")
        dropped = _first(item, "duplicatesDropped", "duplicates_dropped")
        if dropped is None:
            dropped = 0
        if isinstance(dropped, bool) or not isinstance(dropped, int) or dropped < 0:
            raise ProgressError(
                f"{where}.duplicatesDropped must be a non-negative count, got {dropped!r}"
            )
        hops.append(
            ReportedHop(
                from_map=from_map,
                to_map=to_map,
                from_shards=_shard_names(item.get("from"), f"{where}.from"),
                to_shards=_shard_names(item.get("to"), f"{where}.to"),
                detected_at=_seconds(
                    _first(item, "detectedAt", "detected_at"), f"{where}.detectedAt"
                ),
                serving_changed_at=_seconds(
                    _first(item, "servingChangedAt", "serving_changed_at"),
                    f"{where}.servingChangedAt",
                ),
                completed_at=_seconds(
                    _first(item, "completedAt", "completed_at"), f"{where}.completedAt"
                ),
                duration_seconds=_seconds(
                    _first(item, "durationSeconds", "duration_seconds"),
                    f"{where}.durationSeconds",
                ),
                duplicates_dropped=dropped,
            )
        )
    return tuple(hops)


def _shard_entries(raw: Any) -> list[tuple[str, Mapping[str, Any]]]:
    if raw is None:
        return []
    if isinstance(raw, Mapping):
        entries = list(raw.items())
    elif isinstance(raw, list):
        entries = []
        for item in raw:
            name = _first(item, "shard", "name") if isinstance(item, Mapping) else None
            if not isinstance(name, str):
                raise ProgressError(f"a shards entry needs a shard name, got {item!r}")
            entries.append((name, item))
    else:
        raise ProgressError(f"shards must be an object or a list, got {type(raw).__name__}")
    for name, item in entries:
        if not isinstance(item, Mapping):
            raise ProgressError(f"shard {name}: progress must be an object, got {item!r}")
    return entries


def parse_progress(data: Any, *, launch_id: int | None) -> JobProgress:
    """Turn a decoded status report into a `JobProgress` of launch `launch_id`."""
    if not isinstance(data, Mapping):
        raise ProgressError(f"a progress report must be a JSON object, got {type(data).__name__}")
    shards: dict[str, ShardProgress] = {}
    for name, item in _shard_entries(data.get("shards")):
        token = _token(_first(item, "token", "lastToken", "last_token"), name)
        by_op = _first(item, "byOp", "by_op")
        raw_events = by_op if by_op is not None else item.get("events")
        if isinstance(raw_events, int) and not isinstance(raw_events, bool):
            raw_events = None  # a total without the split by op
        events = _counts(raw_events, f"shards.{name}.{'byOp' if by_op is not None else 'events'}")
        events.pop("heartbeat", None)  # progress markers, not changes
        shards[name] = ShardProgress(
            token=token,
            events=events,
            lag_seconds=_lag(_first(item, "lagSeconds", "lag_seconds", "lag"), name),
        )
    updated = _first(data, "updatedAt", "updated_at", "time")
    error = data.get("error")
    phase = data.get("phase")
    return JobProgress(
        launch_id=launch_id,
        shards=shards,
        duplicates=_counts(data.get("duplicates"), "duplicates"),
        updated_at=float(updated) if isinstance(updated, int | float) else None,
        error=str(error) if error else None,
        phase=phase if isinstance(phase, str) and phase else None,
        shard_map=_shard_map(_first(data, "shardMap", "shard_map"), "shardMap"),
        hops=_hops(data.get("hops")),
    )


def loads_progress(text: str, *, launch_id: int | None, source: str) -> JobProgress:
    """Parse a status report's text; errors name `source` (a file or a ConfigMap)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ProgressError(f"progress report {source} is not JSON: {exc}") from None
    try:
        return parse_progress(data, launch_id=launch_id)
    except ProgressError as exc:
        raise ProgressError(f"progress report {source}: {exc}") from None
