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

from collections.abc import Sequence

from updatestream.core.hop_plan import HopPlanningError
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.spec import Keyspace, StartPosition, UpdateStreamSpec
from updatestream_operator.reconciler import conditions as cond
from updatestream_operator.reconciler.hop_steps import (
    can_hop_in_job,
    complete_relaunch,
    count_hop_duplicates,
    in_job_hop,
    plan_relaunch,
    stop_for_hop,
)
from updatestream_operator.reconciler.job_failures import (
    job_ended,
    job_error,
    job_stuck,
    sink_back,
)
from updatestream_operator.reconciler.models import (
    JobInfo,
    JobPhase,
    JobSpec,
    KeyRangeStatus,
    ShardPosition,
)
from updatestream_operator.reconciler.naming import job_name
from updatestream_operator.reconciler.readiness import set_conditions, summarise
from updatestream_operator.reconciler.shard_positions import (
    fold_progress,
    initial_positions,
    launch_dedup,
    relevant_shards,
    resume_start,
    secret_names,
    spec_hash,
)
from updatestream_operator.reconciler.spec_checks import Problem, validate
from updatestream_operator.reconciler.steps import (
    Action,
    Decision,
    Launch,
    Observed,
    Settings,
    Stop,
)
from updatestream_operator.reconciler.steps import Step as _Step

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


def _group_jobs(step: _Step, wanted: Sequence[KeyRange]) -> dict[KeyRange, JobInfo]:
    """One job per wanted key range; stop every other job of the stream."""
    by_range: dict[KeyRange, list[JobInfo]] = {}
    for job in step.obs.jobs:
        by_range.setdefault(job.key_range, []).append(job)
    chosen: dict[KeyRange, JobInfo] = {}
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
    serving = keyspace.spec.serving_map
    launch_id = entry.launch_id + 1
    hops = [
        h for h in step.status.hops if h.key_range == entry.key_range and h.phase == "Completed"
    ]
    pending = entry.hop if entry.hop is not None and entry.hop.phase == "Launching" else None
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
        dedup=launch_dedup(entry, hops[-step.settings.hops_kept :], pending),
        hop_started_at=hop_started_at,
        in_job_hops=step.settings.in_job_hops,
    )
    step.actions.append(Launch(job))
    step.note(
        "Normal",
        "Launched" if launch_id == 1 else "Relaunched",
        f"key range {entry.key_range}: launching job {job.job_id} (launch {launch_id}) over "
        f"shards {','.join(p.name.name for p in entry.shards)} with {step.settings.launcher}",
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
            # nothing reported before the first launch: its lag counts from there
            "reported_at": entry.reported_at or step.now_text,
            "dedup": job.dedup,
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
    serving = keyspace.spec.serving_map
    if job is None:
        return _without_job(step, entry, spec, keyspace, serving)
    entry, reads = _follow_job(step, entry, job, spec, keyspace)
    if job.phase is JobPhase.TERMINATING:
        return entry.model_copy(update={"phase": "Stopping"})
    if job.phase in (JobPhase.FAILED, JobPhase.SUCCEEDED):
        return job_ended(step, entry, job, spec, keyspace)
    stuck = job_stuck(step, entry, job)
    if stuck is not None:
        return stuck
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
    step: _Step,
    entry: KeyRangeStatus,
    spec: UpdateStreamSpec,
    keyspace: Keyspace,
    serving: ShardMap,
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
) -> tuple[KeyRangeStatus, ShardMap]:
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


def _running(
    step: _Step,
    entry: KeyRangeStatus,
    job: JobInfo,
    spec: UpdateStreamSpec,
    keyspace: Keyspace,
    reads: ShardMap,
    serving: ShardMap,
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
        # a new configuration: what went wrong with the old one no longer counts
        update = {"phase": "Restarting", "message": None, "restarts": 0, "failed_at": None}
        return entry.model_copy(update=update)
    if job.launch_id == entry.launch_id and entry.shard_map != serving:
        entry = entry.model_copy(update={"shard_map": serving})  # change elsewhere: no hop
    return entry


def reconcile(obs: Observed, settings: Settings | None = None) -> Decision:
    """The next step for one UpdateStream: the status to write, then the actions to take."""
    step = _Step(obs, settings or Settings(), obs.status.model_copy(deep=True))
    spec, keyspace = obs.spec, obs.keyspace
    wanted = list(spec.key_ranges)
    jobs = _group_jobs(step, wanted)
    problems = validate(obs.stream, spec, keyspace, obs.keyspace_error)
    step.degraded.extend(problems)

    entries: list[KeyRangeStatus] = []
    watchers: list[JobInfo] = []
    for key_range in wanted:
        entry = step.status.key_range(key_range) or KeyRangeStatus(key_range=key_range)
        job = jobs.get(key_range)
        previous = entry.message
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
            found = len(step.degraded)
            entry = _key_range_step(step, entry, job, spec, keyspace)
            if entry.message and len(step.degraded) == found:
                # its job's error stays the key range's problem until a launch delivers
                step.degraded.append(job_error(step, entry, previous))
            sink_back(step, entry, previous)
            if job is not None and _watches(step, job):
                watchers.append(job)
        entries.append(entry)
        count_hop_duplicates(step, entry)
    # entries of removed key ranges stay until their job is gone
    for entry in step.status.key_ranges:
        if entry.key_range not in wanted and any(
            isinstance(a, Stop) and a.job.key_range == entry.key_range for a in step.actions
        ):
            entries.append(entry.model_copy(update={"phase": "Stopping"}))
    step.status.key_ranges = entries

    set_conditions(step, jobs, spec.suspend)
    summarise(step.status, obs.stream.generation)
    return Decision(step.status, tuple(step.actions), tuple(step.notes), tuple(watchers))


def _watches(step: _Step, job: JobInfo) -> bool:
    """A running job that hops in place is shown the Keyspace (when it is valid)."""
    return (
        step.settings.in_job_hops
        and job.in_job_hops
        and job.phase.is_alive
        and not step.stopping(job)
    )
