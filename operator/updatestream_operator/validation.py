"""Whether an UpdateStream can run against its Keyspace, and the Keyspace's own status.

Pure: problems are returned (they become the Degraded condition), never raised.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.spec import Keyspace, UpdateStreamSpec
from updatestream_operator import conditions as cond
from updatestream_operator.models import StreamRef, StreamStatus


@dataclass(frozen=True)
class Problem:
    reason: str
    message: str


def validate(
    stream: StreamRef,
    spec: UpdateStreamSpec,
    keyspace: Keyspace | None,
    keyspace_error: str | None = None,
) -> list[Problem]:
    """What makes the stream impossible to run against its Keyspace (empty when nothing)."""
    if keyspace_error is not None:
        return [Problem("InvalidKeyspace", keyspace_error)]
    if keyspace is None:
        return [
            Problem(
                "KeyspaceNotFound",
                f"Keyspace {spec.keyspace!r} does not exist in namespace {stream.namespace}; "
                "create it or correct spec.keyspace",
            )
        ]
    problems: list[Problem] = []
    try:
        ShardMap.parse(",".join(keyspace.spec.serving_shards))
    except UpdateStreamError as exc:
        problems.append(Problem("InvalidShardMap", f"Keyspace {spec.keyspace}: {exc}"))
    declared = {shard.name for shard in keyspace.spec.shards}
    undeclared = [s for s in keyspace.spec.serving_shards if s not in declared]
    if undeclared:
        problems.append(
            Problem(
                "InvalidShardMap",
                f"Keyspace {spec.keyspace}: serving shards {', '.join(undeclared)} are not "
                "declared in spec.shards; declare them (name, mysql, credentialsSecret)",
            )
        )
    sharded = bool(keyspace.spec.vschema.get("sharded", True))
    ranges = [KeyRange.parse(k) for k in spec.key_ranges]
    for key_range in ranges:
        if not sharded and key_range.name != "-":
            problems.append(
                Problem(
                    "KeyRangeOutsideKeyspace",
                    f"key range {key_range} is outside Keyspace {spec.keyspace}: it is "
                    "unsharded (its only shard is -); use keyRanges: ['-']",
                )
            )
    for index, left in enumerate(ranges):
        for right in ranges[index + 1 :]:
            if left.intersects(right):
                problems.append(
                    Problem(
                        "OverlappingKeyRanges",
                        f"keyRanges {left} and {right} overlap, so their changes would be "
                        "delivered twice; use non-overlapping key ranges",
                    )
                )
    known = set((keyspace.spec.vschema.get("tables") or {}).keys())
    unknown = [t for t in spec.tables if t not in known]
    if unknown and (known or sharded):
        listed = ", ".join(sorted(known)) or "none"
        problems.append(
            Problem(
                "UnknownTable",
                f"tables {', '.join(unknown)} are not in the VSchema of Keyspace "
                f"{spec.keyspace} (tables there: {listed}); add them to the VSchema or "
                "remove them from spec.tables",
            )
        )
    return problems


def keyspace_status(
    keyspace: Keyspace, current: Mapping[str, object] | None, now: dt.datetime, generation: int
) -> dict[str, object]:
    """The status of a Keyspace: its serving shard map and whether that map is valid."""
    previous = StreamStatus.parse({"conditions": (current or {}).get("conditions") or []})
    try:
        serving = str(ShardMap.parse(",".join(keyspace.spec.serving_shards)))
        ready, reason, message = True, "ShardMapValid", f"serving shards {serving}"
    except UpdateStreamError as exc:
        serving = ",".join(keyspace.spec.serving_shards)
        ready, reason, message = False, "InvalidShardMap", str(exc)
    conditions = cond.set_condition(
        previous.conditions, cond.READY, ready, reason, message, now=now, generation=generation
    )
    return {
        "observedGeneration": generation,
        "servingShardMap": serving,
        "conditions": [c.dump() for c in conditions],
    }
