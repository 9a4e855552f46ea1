"""A stream's conditions and summary from one reconcile step (pure).

`Ready` means changes flow: True only once every key range's job runs and has reported a
micro-batch of its current launch (or, on a keyspace without changes, that its query read the
shards and found nothing new). Until then it says what it waits for, the most telling
first: a problem (Degraded's reason), a driver that cannot be scheduled, a driver that is
pending, a job that runs but has not finished a batch yet. `Degraded` lists the problems found;
`Hopping` and `Snapshotting` follow the hops and the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping

from updatestream.core.keyrange import KeyRange
from updatestream_operator.reconciler import conditions as cond
from updatestream_operator.reconciler.models import (
    JobInfo,
    JobPhase,
    JobProgress,
    KeyRangeStatus,
    StreamStatus,
)
from updatestream_operator.reconciler.steps import Step

UNSCHEDULABLE = "Unschedulable"


def set_conditions(step: Step, jobs: Mapping[KeyRange, JobInfo], suspended: bool) -> None:
    """Every condition of the step's status, from its entries, problems and actions."""
    status = step.status
    put = _Setter(step)
    if step.degraded:
        first = step.degraded[0]
        put(cond.DEGRADED, True, first.reason, "; ".join(p.message for p in step.degraded))
    else:
        put(cond.DEGRADED, False, "AsExpected", "no problem found")
    hopping = [e for e in status.key_ranges if e.hop is not None]
    if hopping:
        ranges = ", ".join(
            f"{e.key_range} to {','.join(s.name for s in e.hop.to_shards)}"
            for e in hopping
            if e.hop
        )
        put(cond.HOPPING, True, "ServingShardsChanged", f"hopping key ranges {ranges}")
    elif status.hop_count:
        put(cond.HOPPING, False, "HopCompleted", f"{status.hop_count} hops completed")
    else:
        put(cond.HOPPING, False, "NoHop", "reading the serving shards")
    snapshotting = _snapshotting(step.obs.progress)
    if snapshotting is not None:
        put(cond.SNAPSHOTTING, *snapshotting)
    ready, reason, message = _readiness(step, jobs, suspended, bool(hopping))
    put(cond.READY, ready, reason, message)
    if suspended:
        put(cond.PROGRESSING, False, "Suspended", "spec.suspend is true")
    elif step.degraded:
        put(cond.PROGRESSING, bool(step.actions), "Degraded", "see the Degraded condition")
    else:
        put(cond.PROGRESSING, not ready, reason, message)
    status.conditions = put.conditions


class _Setter:
    def __init__(self, step: Step) -> None:
        self.conditions = list(step.status.conditions)
        self.now, self.generation = step.obs.now, step.obs.stream.generation

    def __call__(self, type_: str, value: bool, reason: str, message: str) -> None:
        self.conditions = cond.set_condition(
            self.conditions, type_, value, reason, message, now=self.now, generation=self.generation
        )


def _readiness(
    step: Step, jobs: Mapping[KeyRange, JobInfo], suspended: bool, hopping: bool
) -> tuple[bool, str, str]:
    """Ready's status, reason and message."""
    if suspended:
        return False, "Suspended", "spec.suspend is true; positions are kept"
    if step.degraded:
        return False, step.degraded[0].reason, step.degraded[0].message
    if step.actions or hopping:
        reason = "Hopping" if hopping else "Launching"
        return False, reason, "jobs are being launched or relaunched"
    waits = [_waiting(step, entry, jobs.get(entry.key_range)) for entry in step.status.key_ranges]
    for reason in (UNSCHEDULABLE, "Pending", "Starting"):
        found = [message for why, message in waits if why == reason]
        if found:
            return False, reason, "; ".join(found)
    return True, "Streaming", "every key range's job runs and delivers"


def _waiting(step: Step, entry: KeyRangeStatus, job: JobInfo | None) -> tuple[str, str]:
    """What the key range waits for ("" when its job delivers), and a message saying so."""
    where = f"key range {entry.key_range}"
    if job is None:
        return "Pending", f"{where}: no job yet"
    if job.reason == UNSCHEDULABLE:
        detail = f": {job.message}" if job.message else ""
        return UNSCHEDULABLE, f"{where}: driver Pod {job.job_id} cannot be scheduled{detail}"
    if job.phase is not JobPhase.RUNNING:
        detail = f" ({job.message})" if job.message else ""
        return "Pending", f"{where}: job {job.job_id} is {job.phase.value}{detail}"
    report = step.report(entry)
    if report is None or (report.batches == 0 and report.idle_triggers == 0):
        return "Starting", f"{where}: job {job.job_id} runs; waiting for its first batch"
    return "", ""


def _snapshotting(progress: Mapping[KeyRange, JobProgress]) -> tuple[bool, str, str] | None:
    """The Snapshotting condition from the jobs' snapshot reports; None when none snapshots."""
    reports = {kr: p.snapshot for kr, p in sorted(progress.items()) if p.snapshot is not None}
    if not reports:
        return None
    reading = {kr: s for kr, s in reports.items() if not s.finished}
    if not reading:
        rows = sum(s.rows for s in reports.values())
        return False, "SnapshotFinished", f"every key range's snapshot is done ({rows:,} rows)"
    parts = []
    for key_range, report in reading.items():
        eta = "unknown" if report.eta_seconds is None else f"{report.eta_seconds:.0f}s"
        parts.append(
            f"key range {key_range}: {report.chunks_done}/{report.chunks_total} chunks, "
            f"{report.rows:,} rows, {report.rows_per_second:,.0f} rows/s, ETA {eta}"
        )
    return True, "ReadingChunks", "; ".join(parts)


def summarise(status: StreamStatus, generation: int) -> None:
    """The printer columns' fields: the shards streamed, the highest lag."""
    shards: set[KeyRange] = set()
    lags: list[float] = []
    for entry in status.key_ranges:
        for position in entry.shards:
            shards.add(position.name)
            if position.lag_seconds is not None:
                lags.append(position.lag_seconds)
    status.shards = ",".join(s.name for s in sorted(shards, key=lambda s: s.start)) or None
    status.max_lag_seconds = max(lags) if lags else None
    status.observed_generation = generation
