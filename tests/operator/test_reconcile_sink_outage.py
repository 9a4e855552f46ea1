"""A job whose sink's server does not answer: Degraded with reason SinkUnavailable while it
waits (one Warning Event), no relaunch, and everything clear once it delivers again."""

from __future__ import annotations

from dataclasses import replace

from updatestream_operator.reconciler.models import JobPhase, JobProgress

from tests.operator.reconcile_world import World, condition

WAITING = (
    "spec.sinks[1]: mirror 127.0.0.1:3307 does not answer (MySQL error 2003: Can't connect); "
    "the job writes batch 7 to it again every 15s at most, for up to 900s, and nothing is "
    "lost meanwhile: check that the server runs and that the job reaches it"
)


def running_world() -> World:
    world = World()
    world.settle()
    world.run()
    return world


def report(world: World, *, phase: str, error: str | None, batches: int) -> None:
    entry = world.status.key_range("-")
    assert entry is not None
    world.progress["-"] = JobProgress(
        launch_id=entry.launch_id,
        phase=phase,
        error=error,
        retryable=True if error else None,
        batches=batches,
    )


def test_a_job_waiting_for_its_sink_is_degraded_with_the_sinks_error_and_not_relaunched() -> None:
    world = running_world()
    report(world, phase="running", error=None, batches=6)
    assert condition(world.step().status, "Degraded") == ("False", "AsExpected")
    report(world, phase="waiting", error=WAITING, batches=6)
    waiting = world.step()
    assert condition(waiting.status, "Degraded") == ("True", "SinkUnavailable")
    degraded = waiting.status.condition("Degraded")
    assert degraded is not None and degraded.message == f"key range -: {WAITING}"
    assert condition(waiting.status, "Ready") == ("False", "SinkUnavailable")
    assert [(n.type, n.reason) for n in waiting.notes] == [("Warning", "SinkUnavailable")]
    assert waiting.actions == ()
    again = world.step()  # still waiting: the same condition, no second Event, no relaunch
    assert condition(again.status, "Degraded") == ("True", "SinkUnavailable")
    assert again.notes == () and again.actions == ()
    assert world.launches()[-1].job.launch_id == 1


def test_a_batch_delivered_again_clears_degraded_with_a_normal_event() -> None:
    world = running_world()
    report(world, phase="waiting", error=WAITING, batches=6)
    world.step()
    report(world, phase="running", error=None, batches=7)
    back = world.step()
    assert condition(back.status, "Degraded") == ("False", "AsExpected")
    assert condition(back.status, "Ready") == ("True", "Streaming")
    assert [(n.type, n.reason) for n in back.notes] == [("Normal", "SinkAvailable")]
    entry = back.status.key_range("-")
    assert entry is not None and entry.message is None
    assert world.step().notes == ()


def test_another_error_of_a_running_job_stays_a_job_error() -> None:
    world = running_world()
    report(world, phase="running", error="memcached mc:1 is down", batches=3)
    decision = world.step()
    assert condition(decision.status, "Degraded") == ("True", "JobError")
    assert [n.reason for n in decision.notes] == []


def test_a_job_that_gave_up_waiting_is_relaunched_as_any_retryable_failure() -> None:
    world = running_world()
    report(world, phase="waiting", error=WAITING, batches=6)
    world.step()
    gave_up = "spec.sinks[1]: mirror 127.0.0.1:3307 did not answer for 900s (...)"
    report(world, phase="failed", error=gave_up, batches=6)
    world.jobs = [replace(job, phase=JobPhase.FAILED) for job in world.jobs]
    ended = world.step()
    assert condition(ended.status, "Degraded") == ("True", "JobFailed")
    assert [n.reason for n in ended.notes] == ["JobFailed"]
