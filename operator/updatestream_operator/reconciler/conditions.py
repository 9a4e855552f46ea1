"""Status conditions: set one, keeping `lastTransitionTime` unless its status changes."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from updatestream_operator.reconciler.models import Condition

READY = "Ready"
PROGRESSING = "Progressing"
HOPPING = "Hopping"
DEGRADED = "Degraded"
SNAPSHOTTING = "Snapshotting"  # only on a stream that snapshots (start or on demand)
CONDITION_TYPES = (READY, PROGRESSING, HOPPING, DEGRADED, SNAPSHOTTING)

Status = Literal["True", "False", "Unknown"]


def rfc3339(when: dt.datetime) -> str:
    """`2024-05-01T12:00:00Z`: seconds precision, UTC, as Kubernetes writes times."""
    return when.astimezone(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: bool | Status,
    reason: str,
    message: str,
    *,
    now: dt.datetime,
    generation: int | None,
) -> list[Condition]:
    """A new list with condition `type_` set; other conditions are kept in their order."""
    value: Status = ("True" if status else "False") if isinstance(status, bool) else status
    previous = next((c for c in conditions if c.type == type_), None)
    changed = previous is None or previous.status != value
    condition = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=rfc3339(now)
        if changed or previous is None
        else previous.last_transition_time,
        observed_generation=generation,
    )
    if previous is None:
        return [*conditions, condition]
    return [condition if c.type == type_ else c for c in conditions]
