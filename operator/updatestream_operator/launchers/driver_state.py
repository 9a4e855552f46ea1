"""What a driver Pod says about its job: from what really runs, not from the Pod's phase alone.

The driver Pod holds the Spark driver and the progress-publisher sidecar, so the Pod stays
`Running` after the driver has exited. The job's phase therefore comes from the driver
container: terminated (with its exit code), waiting for a reason that will not pass by itself
(an image that cannot be pulled, a crash loop, a configuration it cannot start with), or running;
and, before any container runs, from the scheduler's verdict (Unschedulable, with its message).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from updatestream_operator.reconciler.models import STUCK_REASONS, JobPhase

UNSCHEDULABLE = "Unschedulable"
DRIVER_EXITED = "DriverExited"


@dataclass(frozen=True)
class DriverState:
    phase: JobPhase
    reason: str = ""  # a word saying why, when something is wrong or the job waits
    message: str = ""


def driver_state(pod: dict[str, Any], container: str) -> DriverState:
    """The job's state from its driver Pod; `container` names the driver container."""
    metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return DriverState(JobPhase.TERMINATING, "", "being deleted")
    driver = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == container), None
    )
    if driver is not None:
        found = _from_container(driver)
        if found is not None:
            return found
    phase = status.get("phase", "")
    if phase == "Pending":
        return _pending(status)
    mapped = {
        "Running": JobPhase.RUNNING,
        "Succeeded": JobPhase.SUCCEEDED,
        "Failed": JobPhase.FAILED,
    }.get(phase, JobPhase.UNKNOWN)
    return DriverState(mapped, status.get("reason") or "", status.get("message") or "")


def _from_container(driver: dict[str, Any]) -> DriverState | None:
    state = driver.get("state") or {}
    restarts = int(driver.get("restartCount") or 0)
    again = f" (restarted {restarts} times)" if restarts else ""
    ended = state.get("terminated")
    if ended:
        code = int(ended.get("exitCode") or 0)
        detail = ended.get("message") or ended.get("reason") or ""
        message = f"the driver exited with code {code}" + (f" ({detail})" if detail else "")
        phase = JobPhase.SUCCEEDED if code == 0 else JobPhase.FAILED
        return DriverState(phase, DRIVER_EXITED, message + again)
    waiting = state.get("waiting")
    if waiting and waiting.get("reason") in STUCK_REASONS:
        reason = str(waiting["reason"])
        detail = waiting.get("message") or ""
        return DriverState(JobPhase.PENDING, reason, f"{reason}: {detail}".rstrip(": ") + again)
    if state.get("running"):
        return DriverState(JobPhase.RUNNING, "", again.strip(" ()"))
    return None


def _pending(status: dict[str, Any]) -> DriverState:
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == UNSCHEDULABLE
        ):
            return DriverState(JobPhase.PENDING, UNSCHEDULABLE, condition.get("message") or "")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return DriverState(JobPhase.PENDING, "", str(waiting["reason"]))
    return DriverState(JobPhase.PENDING, "", status.get("message") or status.get("reason") or "")
