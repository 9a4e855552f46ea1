"""Whether an UpdateStream can run against its Keyspace, and the Keyspace's own status.

Pure: problems are returned (they become the Degraded condition), never raised.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from updatestream.spec import Keyspace, UpdateStreamSpec
from updatestream.validation import describe, keyspace_problems, stream_problems
from updatestream_operator.reconciler import conditions as cond
from updatestream_operator.reconciler.models import StreamRef, StreamStatus


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
    """What makes the stream impossible to run against its Keyspace (empty when nothing).

    The checks are the shared ones (`updatestream.validation`) that the admission webhook and
    the job run too; a Keyspace's own problems come first, prefixed with its name.
    """
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
    problems = [
        Problem(p.reason, f"Keyspace {spec.keyspace}: {p}") for p in keyspace_problems(keyspace)
    ]
    problems.extend(Problem(p.reason, p.message) for p in stream_problems(spec, keyspace))
    return problems


def keyspace_status(
    keyspace: Keyspace, current: Mapping[str, object] | None, now: dt.datetime, generation: int
) -> dict[str, object]:
    """The status of a Keyspace: its serving shard map, Ready only when the spec can serve
    streams (the VSchema builds, the serving shards form a shard map, ...)."""
    problems = keyspace_problems(keyspace)
    serving = ",".join(keyspace.spec.serving_shards)
    if problems:
        return not_ready_status(
            problems[0].reason, describe(problems), current, now, generation, serving
        )
    serving = str(keyspace.spec.serving_map)
    return _status(
        True, "ShardMapValid", f"serving shards {serving}", current, now, generation, serving
    )


def not_ready_status(
    reason: str,
    message: str,
    current: Mapping[str, object] | None,
    now: dt.datetime,
    generation: int,
    serving: str = "",
) -> dict[str, object]:
    """The status of a Keyspace that cannot serve streams, saying why."""
    return _status(False, reason, message, current, now, generation, serving)


def _status(
    ready: bool,
    reason: str,
    message: str,
    current: Mapping[str, object] | None,
    now: dt.datetime,
    generation: int,
    serving: str,
) -> dict[str, object]:
    previous = StreamStatus.parse({"conditions": (current or {}).get("conditions") or []})
    conditions = cond.set_condition(
        previous.conditions, cond.READY, ready, reason, message, now=now, generation=generation
    )
    return {
        "observedGeneration": generation,
        "servingShardMap": serving,
        "conditions": [c.dump() for c in conditions],
    }
