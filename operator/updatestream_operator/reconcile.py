"""The pure reconcile service: what to do next for one UpdateStream, and its new status.

`reconcile` is given what was observed (the stream's spec, its Keyspace, its current status,
the jobs that exist for it and their progress reports) and returns one step: the status to
write first, then the jobs to stop and to launch. The caller writes the status, performs the
actions, observes again and calls `reconcile` again until no action is left. Because the
status (the intent) is written before anything is done, and the jobs themselves carry the
shard map and launch they belong to, a crash between any two steps leaves a state from which
the next call continues: a hop is planned once per serving-map change, and a key range never
gets a second job while one exists. How a key range hops (inside the running job, or by
stopping and relaunching it) is in `hops.py`; the step's input and output types in `steps.py`.

No Kubernetes client and no kopf here: everything is data in, data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from updatestream.core.hop_plan import HopPlanningError
from updatestream.core.keyrange import KeyRange
from updatestream.spec import Keyspace, StartPosition, UpdateStreamSpec
from updatestream_operator import conditions as cond
from updatestream_operator.hops import (
    can_hop_in_job,
    complete_relaunch,
    count_hop_duplicates,
    in_job_hop,
    plan_relaunch,
    stop_for_hop,
)
from updatestream_operator.models import (
    JobInfo,
    JobPhase,
    JobProgress,
    JobSpec,
    KeyRangeStatus,
    ShardPosition,
    StreamStatus,
)
from updatestream_operator.naming import job_name
from updatestream_operator.positions import (
    dedup_filter,
    fold_progress,
    initial_positions,
    relevant_shards,
    resume_start,
    secret_names,
    spec_hash,
)
from updatestream_operator.steps import (
    Action,
    Decision,
    Launch,
    Observed,
    Settings,
    Stop,
)
from updatestream_operator.steps import Step as _Step
from updatestream_operator.validation import Problem, validate

__all__ = [
    "Action",
    "Decision",
    "Launch",
    "Observed",
    "Settings",
    "Stop",
    "reconcile",
    "resume_start",
]


# -- the reconciler -----------------------------------------------------------------------------


def _group_jobs(step: _Step, wanted: Sequence[str]) -> dict[str, JobInfo]:
    """One job per wanted key range; stop every other job of the stream."""
    by_range: dict[str, list[JobInfo]] = {}
    for job in step.obs.jobs:
        by_range.setdefault(KeyRange.parse(job.key_range).name, []).append(job)
    chosen: dict[str, JobInfo] = {}
    for key_range, jobs in by_range.items():
        if key_range not in wanted:
            for job in jobs:
                step.stop(job, f"key range {key_range} is no longer in spec.keyRanges")
            continue
        entry = step.status.key_range(key_range)
        current = entry.launch_id if entry else None
        ordered = sorted(jobs, key=lambda j: (j.launch_id != current, -j.launch_id, j.job_id))
        chosen[key_range] = ordered[0]
        for extra in ordered[1:]:
            step.stop(extra, f"a second job for key range {key_range} ({ordered[0].job_id} kept)")
    return chosen


def _launch(
    step: _Step,
    entry: KeyRangeStatus,
    spec: UpdateStreamSpec,
    keyspace: Keyspace,
    start: StartPosition,
) -> KeyRangeStatus:
    serving = str(keyspace.spec.serving_map)
    launch_id = entry.launch_id + 1
    hops = [
        h for h in step.status.hops if h.key_range == entry.key_range and h.phase == "Completed"
    ]
    pending = entry.hop if entry.hop is not None and entry.hop.phase == "Launching" else None
    if pending is not None:
        hops.append(pending)
    hop_started_at = (
        cond.parse_rfc3339(pending.started_at).timestamp() if pending is not None else None
    )
    job = JobSpec(
        job_id=job_name(step.obs.stream, entry.key_range),
        stream=step.obs.stream,
        key_range=entry.key_range,
        shard_map=serving,
        spec_hash=spec_hash(spec, keyspace, entry.key_range),
        launch_id=launch_id,
        spec=spec.model_copy(update={"start": start, "suspend": False}),
        keyspace=keyspace,
        secret_names=secret_names(spec, keyspace),
        dedup=dedup_filter(hops[-step.settings.hops_kept :]),
        hop_started_at=hop_started_at,
        in_job_hops=step.settings.in_job_hops,
    )
    step.actions.append(Launch(job))
    step.note(
        "Normal",
        "Launched" if launch_id == 1 else "Relaunched",
        f"key range {entry.key_range}: launching job {job.job_id} (launch {launch_id}) over "
        f"shards {','.join(p.name for p in entry.shards)} with {step.settings.launcher}",
    )
    return entry.model_copy(
        update={
            "job": job.job_id,
            "launcher": step.settings.launcher,
            "phase": "Launching",
            "shard_map": serving,
            "spec_hash": job.spec_hash,
            "launch_id": launch_id,
            "launched_at": step.now_text,
        }
    )


def _adopt(
    step: _Step, entry: KeyRangeStatus, job: JobInfo, spec: UpdateStreamSpec, keyspace: Keyspace
) -> KeyRangeStatus:
    """The status was lost but the job runs: adopt it, positions unknown until it reports.
    A job that hopped in place says which map it reads now."""
    report = step.obs.progress.get(entry.key_range)
    reads = job.shard_map
    if report is not None and report.launch_id == job.launch_id and report.shard_map:
        reads = report.shard_map
    same = relevant_shards(reads, entry.key_range) == relevant_shards(
        job.shard_map, entry.key_range
    )
    return entry.model_copy(
        update={
            "launch_id": job.launch_id,
            "shard_map": reads,
            "spec_hash": job.spec_hash
            if same
            else spec_hash(spec, keyspace, entry.key_range, reads),
            "shards": [ShardPosition(name=n) for n in relevant_shards(reads, entry.key_range)],
        }
    )


def _key_range_step(
    step: _Step,
    entry: KeyRangeStatus,
    job: JobInfo | None,
    spec: UpdateStreamSpec,
    keyspace: Keyspace,
) -> KeyRangeStatus:
    serving = str(keyspace.spec.serving_map)
    if job is None:
        return _without_job(step, entry, spec, keyspace, serving)
    entry, reads = _follow_job(step, entry, job, spec, keyspace)
    if job.phase is JobPhase.TERMINATING:
        return entry.model_copy(update={"phase": "Stopping"})
    if job.phase in (JobPhase.FAILED, JobPhase.SUCCEEDED):
        return _job_ended(step, entry, job)
    if relevant_shards(reads, entry.key_range) != relevant_shards(serving, entry.key_range):
        why = can_hop_in_job(step, entry, job)
        if why:
            return stop_for_hop(step, entry, job, reads, serving, why)
        try:
            entry = in_job_hop(step, entry, job, spec, keyspace, serving)
        except HopPlanningError as exc:
            step.degraded.append(Problem("HopPlanningFailed", str(exc)))
            return entry.model_copy(update={"message": str(exc)})
        if entry.hop is not None or step.stopping(job):
            return entry
        reads = entry.shard_map or reads
    return _running(step, entry, job, spec, keyspace, reads, serving)


def _without_job(
    step: _Step, entry: KeyRangeStatus, spec: UpdateStreamSpec, keyspace: Keyspace, serving: str
) -> KeyRangeStatus:
    """No job exists for the key range: launch its first from `spec.start`, or relaunch it
    from its positions (planning the hop first if the serving shards changed meanwhile)."""
    wanted_shards = relevant_shards(serving, entry.key_range)
    if entry.launch_id == 0:
        fresh = entry.model_copy(
            update={
                "shards": initial_positions(spec.start, wanted_shards, step.obs.now),
                "start_mode": spec.start.mode,
            }
        )
        return _launch(step, fresh, spec, keyspace, spec.start)
    if entry.shard_map and relevant_shards(entry.shard_map, entry.key_range) != wanted_shards:
        try:
            entry = plan_relaunch(step, entry, keyspace, serving)
        except HopPlanningError as exc:
            step.degraded.append(Problem("HopPlanningFailed", str(exc)))
            return entry.model_copy(update={"phase": "Degraded", "message": str(exc)})
    return _launch(step, entry, spec, keyspace, resume_start(entry))


def _follow_job(
    step: _Step, entry: KeyRangeStatus, job: JobInfo, spec: UpdateStreamSpec, keyspace: Keyspace
) -> tuple[KeyRangeStatus, str]:
    """The entry brought up to the job that exists, and the map whose shards the job reads:
    what it was launched for, or hopped to in place."""
    reads = entry.shard_map or job.shard_map
    if entry.launch_id == 0:
        entry = _adopt(step, entry, job, spec, keyspace)
        reads = entry.shard_map or job.shard_map
    elif job.launch_id != entry.launch_id:
        # Two launches raced (an operator killed while launching, restarted, launching again):
        # the API server kept one job; it is the launch that runs, so its reports count.
        entry = entry.model_copy(update={"launch_id": job.launch_id})
        reads = job.shard_map
    entry = entry.model_copy(update={"job": job.job_id, "phase": job.phase.value})
    return complete_relaunch(step, entry, job), reads


def _job_ended(step: _Step, entry: KeyRangeStatus, job: JobInfo) -> KeyRangeStatus:
    """A streaming job ended: relaunch it from its positions, up to `max_restarts` times."""
    if entry.restarts >= step.settings.max_restarts:
        message = (
            f"job {job.job_id} of key range {entry.key_range} ended ({job.phase.value}: "
            f"{job.message or entry.message or 'no message'}) and was relaunched "
            f"{entry.restarts} times; fix the cause, then set spec.suspend to true and "
            "back to false to relaunch it from its positions"
        )
        step.degraded.append(Problem("JobFailed", message))
        return entry.model_copy(update={"message": message})
    step.stop(job, f"it ended ({job.phase.value}); relaunching from its positions")
    step.note("Warning", "JobFailed", f"job {job.job_id} ended: {job.message or job.phase}")
    return entry.model_copy(update={"restarts": entry.restarts + 1, "phase": "Restarting"})


def _running(
    step: _Step,
    entry: KeyRangeStatus,
    job: JobInfo,
    spec: UpdateStreamSpec,
    keyspace: Keyspace,
    reads: str,
    serving: str,
) -> KeyRangeStatus:
    """A job that reads the serving shards: relaunch it if its configuration changed."""
    # after an in-job hop the job runs with what its record says, not what it was launched with
    same = relevant_shards(reads, entry.key_range) == relevant_shards(
        job.shard_map, entry.key_range
    )
    configured = job.spec_hash if same else entry.spec_hash
    if configured != spec_hash(spec, keyspace, entry.key_range, reads):
        step.stop(job, "its configuration changed; relaunching from its positions")
        step.note(
            "Normal",
            "Reconfiguring",
            f"key range {entry.key_range}: configuration changed; relaunching job "
            f"{job.job_id} from its positions",
        )
        return entry.model_copy(update={"phase": "Restarting"})
    if job.launch_id == entry.launch_id and entry.shard_map != serving:
        entry = entry.model_copy(update={"shard_map": serving})  # change elsewhere: no hop
    if entry.message:
        step.degraded.append(Problem("JobError", f"key range {entry.key_range}: {entry.message}"))
    return entry


def _conditions(step: _Step, suspended: bool) -> None:
    status, now, gen = step.status, step.obs.now, step.obs.stream.generation
    entries = status.key_ranges
    hopping = [e for e in entries if e.hop is not None]
    running = [e for e in entries if e.phase == JobPhase.RUNNING.value]
    launched = [e for e in entries if e.phase in (JobPhase.PENDING.value, JobPhase.RUNNING.value)]
    settled = not step.actions and not hopping and len(launched) == len(step.obs.spec.key_ranges)

    conditions = list(status.conditions)

    def put(type_: str, value: bool, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = cond.set_condition(
            conditions, type_, value, reason, message, now=now, generation=gen
        )

    if step.degraded:
        first = step.degraded[0]
        put(cond.DEGRADED, True, first.reason, "; ".join(p.message for p in step.degraded))
    else:
        put(cond.DEGRADED, False, "AsExpected", "no problem found")
    if hopping:
        ranges = ", ".join(
            f"{e.key_range} to {','.join(e.hop.to_shards)}" for e in hopping if e.hop
        )
        put(cond.HOPPING, True, "ServingShardsChanged", f"hopping key ranges {ranges}")
    elif status.hop_count:
        put(cond.HOPPING, False, "HopCompleted", f"{status.hop_count} hops completed")
    else:
        put(cond.HOPPING, False, "NoHop", "reading the serving shards")
    snapshotting = _snapshotting(step.obs.progress)
    if snapshotting is not None:
        put(cond.SNAPSHOTTING, *snapshotting)
    if suspended:
        put(cond.READY, False, "Suspended", "spec.suspend is true; positions are kept")
        put(cond.PROGRESSING, False, "Suspended", "spec.suspend is true")
    elif step.degraded:
        put(cond.READY, False, step.degraded[0].reason, step.degraded[0].message)
        put(cond.PROGRESSING, bool(step.actions), "Degraded", "see the Degraded condition")
    elif settled:
        all_running = len(running) == len(entries)
        reason = "Streaming" if all_running else "Launched"
        message = (
            "every key range's job is running"
            if all_running
            else "every key range has its job; waiting for the drivers to run"
        )
        put(cond.READY, True, reason, message)
        put(cond.PROGRESSING, not all_running, reason, message)
    else:
        reason = "Hopping" if hopping else "Launching"
        put(cond.READY, False, reason, "jobs are being launched or relaunched")
        put(cond.PROGRESSING, True, reason, "jobs are being launched or relaunched")
    status.conditions = conditions


def _snapshotting(progress: Mapping[str, JobProgress]) -> tuple[bool, str, str] | None:
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


def _summarise(status: StreamStatus, generation: int) -> None:
    shards: list[str] = []
    lags: list[float] = []
    for entry in status.key_ranges:
        for position in entry.shards:
            if position.name not in shards:
                shards.append(position.name)
            if position.lag_seconds is not None:
                lags.append(position.lag_seconds)
    status.shards = ",".join(sorted(shards, key=lambda n: KeyRange.parse(n).start)) or None
    status.max_lag_seconds = max(lags) if lags else None
    status.observed_generation = generation


def reconcile(obs: Observed, settings: Settings | None = None) -> Decision:
    """The next step for one UpdateStream: the status to write, then the actions to take."""
    step = _Step(obs, settings or Settings(), obs.status.model_copy(deep=True))
    spec, keyspace = obs.spec, obs.keyspace
    wanted = [KeyRange.parse(k).name for k in spec.key_ranges]
    jobs = _group_jobs(step, wanted)
    problems = validate(obs.stream, spec, keyspace, obs.keyspace_error)
    step.degraded.extend(problems)

    entries: list[KeyRangeStatus] = []
    watchers: list[JobInfo] = []
    for key_range in wanted:
        entry = step.status.key_range(key_range) or KeyRangeStatus(key_range=key_range)
        job = jobs.get(key_range)
        entry = fold_progress(entry, obs.progress.get(key_range))
        if spec.suspend:
            if job is not None:
                step.stop(job, "spec.suspend is true")
                step.note("Normal", "Suspending", f"stopping job {job.job_id}; positions kept")
            entry = entry.model_copy(update={"phase": "Suspended"})
        elif problems or keyspace is None:
            if job is not None:
                entry = entry.model_copy(update={"job": job.job_id, "phase": job.phase.value})
        else:
            entry = _key_range_step(step, entry, job, spec, keyspace)
            if job is not None and _watches(step, job):
                watchers.append(job)
        entries.append(entry)
        count_hop_duplicates(step, entry)
    # entries of removed key ranges stay until their job is gone
    for entry in step.status.key_ranges:
        if entry.key_range not in wanted and any(
            isinstance(a, Stop) and KeyRange.parse(a.job.key_range).name == entry.key_range
            for a in step.actions
        ):
            entries.append(entry.model_copy(update={"phase": "Stopping"}))
    step.status.key_ranges = entries

    _conditions(step, spec.suspend)
    _summarise(step.status, obs.stream.generation)
    return Decision(step.status, tuple(step.actions), tuple(step.notes), tuple(watchers))


def _watches(step: _Step, job: JobInfo) -> bool:
    """A running job that hops in place is shown the Keyspace (when it is valid)."""
    return (
        step.settings.in_job_hops
        and job.in_job_hops
        and job.phase.is_alive
        and not step.stopping(job)
    )
