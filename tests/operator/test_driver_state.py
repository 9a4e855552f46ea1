"""A driver Pod's state as the operator reads it: the driver container, not the Pod's phase
(the progress sidecar keeps a Pod whose driver exited `Running`), and the scheduler's verdict."""

from __future__ import annotations

from typing import Any

import pytest
from updatestream_operator.launchers.driver_state import driver_state
from updatestream_operator.reconciler.models import JobPhase

DRIVER = "spark-kubernetes-driver"


def pod(phase: str, driver: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    sidecar = {"name": "progress-publisher", "state": {"running": {}}, "restartCount": 0}
    containers = [sidecar] + ([{"name": DRIVER, "restartCount": 0, **driver}] if driver else [])
    return {
        "metadata": {"name": "us-x"},
        "status": {"phase": phase, "containerStatuses": containers, **status},
    }


UNSCHEDULED = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/1 nodes are available: 1 Insufficient cpu.",
}


@pytest.mark.parametrize(
    ("found", "phase", "reason", "words"),
    [
        (
            pod("Running", {"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}),
            JobPhase.FAILED,
            "DriverExited",
            "the driver exited with code 1 (Error)",
        ),
        (
            pod("Running", {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}),
            JobPhase.SUCCEEDED,
            "DriverExited",
            "code 0",
        ),
        (
            pod(
                "Running",
                {
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "restartCount": 4,
                },
            ),
            JobPhase.PENDING,
            "CrashLoopBackOff",
            "CrashLoopBackOff: back-off (restarted 4 times)",
        ),
        (
            pod("Pending", {"state": {"waiting": {"reason": "ImagePullBackOff"}}}),
            JobPhase.PENDING,
            "ImagePullBackOff",
            "ImagePullBackOff",
        ),
        (
            {"metadata": {}, "status": {"phase": "Pending", "conditions": [UNSCHEDULED]}},
            JobPhase.PENDING,
            "Unschedulable",
            "Insufficient cpu",
        ),
        (
            pod("Pending", {"state": {"waiting": {"reason": "ContainerCreating"}}}),
            JobPhase.PENDING,
            "",
            "ContainerCreating",
        ),
        (pod("Running", {"state": {"running": {}}}), JobPhase.RUNNING, "", ""),
        (
            {"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}, "status": {}},
            JobPhase.TERMINATING,
            "",
            "being deleted",
        ),
        (
            pod("Failed", None, reason="Evicted", message="low memory"),
            JobPhase.FAILED,
            "Evicted",
            "low memory",
        ),
    ],
)
def test_the_job_state_comes_from_the_driver_container_and_the_scheduler(
    found: dict[str, Any], phase: JobPhase, reason: str, words: str
) -> None:
    state = driver_state(found, DRIVER)
    assert (state.phase, state.reason) == (phase, reason)
    assert words in state.message
