"""What the reconciler does with a job that ended or cannot start (pure).

A streaming job should not end. When one does (its driver exited, or its Pod failed), the key
range is Degraded at once, with the job's own fatal error from its report (else what the
driver Pod says), and a Warning Event posts it. Then:

- a job ended by something a relaunch meets again (its report says `retryable: false`: a
  wrong column in a key template, a malformed start, a purged binlog) is not relaunched: the
  key range stays Degraded until the spec changes;
- any other is relaunched from its positions after a backoff that doubles with each restart
  (`Settings.restart_backoff`), up to `Settings.max_restarts` times;
- a job configured with an older spec is relaunched at once with the new one (the way out of a
  failure: correct the spec).

A job that runs but whose sink's server does not answer reports phase `waiting` with the
sink's error: it writes the same batch again until the server is back (nothing is lost). The
key range is Degraded meanwhile, reason `SinkUnavailable`, with a Warning Event when the error
is new, and a Normal Event once a batch is delivered again; the job is not relaunched.

A driver that waits for something it will not get by waiting (an image it cannot pull, a crash
loop, a configuration error of its container) makes the key range Degraded too; it is not
relaunched, since the same Pod would wait again.
"""

from __future__ import annotations

from updatestream.contract.progress_report import WAITING
from updatestream.spec import Keyspace, UpdateStreamSpec
from updatestream_operator.reconciler.models import STUCK_REASONS, JobInfo, KeyRangeStatus
from updatestream_operator.reconciler.shard_positions import seconds_between, spec_hash
from updatestream_operator.reconciler.spec_checks import Problem
from updatestream_operator.reconciler.steps import Step

FAILED = "JobFailed"
STUCK = "JobCannotStart"
JOB_ERROR = "JobError"
SINK_UNAVAILABLE = "SinkUnavailable"
SINK_AVAILABLE = "SinkAvailable"


def restart_delay(step: Step, restarts: int) -> float:
    """Seconds to wait before relaunch number `restarts + 1`."""
    first, most = step.settings.restart_backoff
    return float(min(most, first * 2**restarts))


def job_ended(
    step: Step, entry: KeyRangeStatus, job: JobInfo, spec: UpdateStreamSpec, keyspace: Keyspace
) -> KeyRangeStatus:
    """The key range's job ended: Degraded now, relaunched after a backoff where that helps."""
    report = step.report(entry)
    error = (report.error if report is not None else None) or job.message or job.phase.value
    what = f"key range {entry.key_range}: job {job.job_id} ended: {error}"
    if job.spec_hash != spec_hash(spec, keyspace, entry.key_range, job.shard_map):
        step.stop(job, "it ended and its configuration changed since; relaunching")
        step.note("Normal", "Reconfiguring", f"{what}; relaunching it with the changed spec")
        update = {"phase": "Restarting", "restarts": 0, "failed_at": None, "message": None}
        return entry.model_copy(update=update)
    first_seen = entry.failed_at is None
    failed_at = entry.failed_at or step.now_text
    if first_seen:
        step.note("Warning", FAILED, what)
    retryable = report.retryable if report is not None else None
    if retryable is False:
        message = (
            f"{what}; a relaunch would meet it again: correct the spec (a changed spec "
            "relaunches the job)"
        )
    elif entry.restarts >= step.settings.max_restarts:
        message = (
            f"{what}; relaunched {entry.restarts} times: fix the cause, then set spec.suspend "
            "to true and back to false to relaunch it from its positions"
        )
    else:
        delay = restart_delay(step, entry.restarts)
        waited = seconds_between(failed_at, step.obs.now)
        if waited >= delay:
            step.stop(job, "it ended; relaunching from its positions")
            update = {"phase": "Restarting", "restarts": entry.restarts + 1, "failed_at": None}
            return entry.model_copy(update=update)
        message = (
            f"{what}; relaunching it from its positions in {delay - waited:.0f}s (relaunch "
            f"{entry.restarts + 1} of {step.settings.max_restarts})"
        )
    step.degraded.append(Problem(FAILED, message))
    return entry.model_copy(update={"phase": "Degraded", "message": error, "failed_at": failed_at})


def job_stuck(step: Step, entry: KeyRangeStatus, job: JobInfo) -> KeyRangeStatus | None:
    """The key range Degraded when its driver cannot start by waiting; None when it can."""
    if job.reason not in STUCK_REASONS:
        return None
    message = (
        f"key range {entry.key_range}: the driver of job {job.job_id} cannot start: "
        f"{job.message or job.reason}"
    )
    if entry.message != job.message:
        step.note("Warning", STUCK, message)
    step.degraded.append(Problem(STUCK, message))
    return entry.model_copy(update={"phase": "Degraded", "message": job.message or job.reason})


def job_error(step: Step, entry: KeyRangeStatus, previous: str | None) -> Problem:
    """The problem of a key range whose job reported an error (`entry.message`); `previous`
    is the message the key range had before this step."""
    message = f"key range {entry.key_range}: {entry.message}"
    report = step.report(entry)
    if report is None or report.phase != WAITING or report.error != entry.message:
        return Problem(JOB_ERROR, message)
    if previous != entry.message:
        step.note("Warning", SINK_UNAVAILABLE, message)
    return Problem(SINK_UNAVAILABLE, message)


def sink_back(step: Step, entry: KeyRangeStatus, previous: str | None) -> None:
    """A Normal Event when the key range's sink wait (the last step's Degraded reason) ended
    with a batch delivered."""
    degraded = next((c for c in step.obs.status.conditions if c.type == "Degraded"), None)
    if previous is None or entry.message is not None or degraded is None:
        return
    if degraded.status == "True" and degraded.reason == SINK_UNAVAILABLE:
        step.note(
            "Normal",
            SINK_AVAILABLE,
            f"key range {entry.key_range}: every sink takes batches again; delivered up to "
            f"batch {entry.batches}",
        )
