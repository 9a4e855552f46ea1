"""Hops of one key range from the shards of one serving map to those of the next (pure).

Two ways, one hop record (`keyRanges[].hop` while it lasts, then `status.hops`) per serving-map
change and key range:

* **in the job** (`method: InJob`): a running job launched watching its Keyspace notices the
  change itself and hops inside its query, keeping its checkpoint. The operator records the
  hop (phase `InJob`), and completes the record when the job's report says it reads the new
  shards and its hop is complete, from the job's own numbers (times, duplicates dropped) and
  tokens. A job that has not reported it within `Settings.in_job_hop_timeout` is stopped, and
  the hop goes on the other way.
* **by relaunch** (`method: Relaunch`): stop the job (phase `Stopping`); once it is gone plan
  the hop from its final positions with `core.hop.plan_hop` (phase `Launching`) and relaunch
  it with the plan's starts and dedup filter; the new job existing completes the hop.

Everything needed to continue is in the status and the job's report, so an operator restart
at any point neither loses a hop nor records one twice.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from updatestream.core.hop_plan import HopPlan, plan_hop
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken
from updatestream.spec import Keyspace, UpdateStreamSpec
from updatestream_operator.reconciler import conditions as cond
from updatestream_operator.reconciler.models import (
    HopRecord,
    JobInfo,
    JobPhase,
    JobProgress,
    KeyRangeStatus,
    ReportedHop,
    ShardPosition,
)
from updatestream_operator.reconciler.shard_positions import (
    delivered_token,
    relevant_shards,
    seconds_between,
    shard_flavor,
    spec_hash,
)
from updatestream_operator.reconciler.steps import Step


def _plan(
    entry: KeyRangeStatus, keyspace: Keyspace, to_map: ShardMap
) -> tuple[HopPlan, dict[str, dict[str, Any]]]:
    """The hop plan from the entry's shards and positions to `to_map`, and its inputs."""
    assert entry.shard_map is not None
    last = {p.name.name: delivered_token(p, shard_flavor(keyspace, p.name)) for p in entry.shards}
    plan = plan_hop(entry.shard_map, to_map, last, entry.key_range)
    sources = {s for d in plan.destinations.values() for s in d.sources}
    return plan, {n: t.to_json() for n, t in last.items() if n in sources}


def _reported_tokens(report: JobProgress | None) -> dict[KeyRange, EventToken]:
    """Shard -> the last token the job reported for it."""
    if report is None:
        return {}
    return {name: shard.token for name, shard in report.shards.items() if shard.token is not None}


# -- by relaunch ---------------------------------------------------------------------------------


def stop_for_hop(
    step: Step,
    entry: KeyRangeStatus,
    job: JobInfo,
    reads: ShardMap,
    serving: ShardMap,
    why: str = "",
) -> KeyRangeStatus:
    """The job reads the shards of `reads`, not those of `serving`: record the hop, stop it."""
    hop = entry.hop
    if hop is None or hop.to_map != serving:
        hop = HopRecord(
            key_range=entry.key_range,
            from_map=reads,
            to_map=serving,
            from_shards=relevant_shards(reads, entry.key_range),
            to_shards=relevant_shards(serving, entry.key_range),
            started_at=step.now_text,
        )
        step.note(
            "Normal",
            "HopStarted",
            f"key range {entry.key_range}: serving shards changed from {reads} to {serving}; "
            f"stopping job {job.job_id} to relaunch it from its positions",
        )
    elif hop.phase == "InJob":
        hop = hop.model_copy(update={"phase": "Stopping", "method": "Relaunch"})
        step.note(
            "Warning",
            "HopFallback",
            f"key range {entry.key_range}: job {job.job_id} {why or 'cannot hop in place'}; "
            f"stopping it to relaunch it from planned positions on {_names(hop.to_shards)}",
        )
    step.stop(job, f"hop from {reads} to {serving}")
    return entry.model_copy(update={"hop": hop, "phase": "Hopping"})


def plan_relaunch(
    step: Step, entry: KeyRangeStatus, keyspace: Keyspace, serving: ShardMap
) -> KeyRangeStatus:
    """No job runs and the entry's shards are not the serving ones: plan the hop, record it.

    A destination shard the stopped job already read (it had begun hopping in place) resumes
    from the token it reported: the job delivered everything up to it."""
    assert entry.shard_map is not None
    plan, last_delivered = _plan(entry, keyspace, serving)
    old_shards = relevant_shards(entry.shard_map, entry.key_range)
    new_shards = relevant_shards(serving, entry.key_range)
    hop = entry.hop
    if hop is None or hop.to_map != serving:
        hop = HopRecord(
            key_range=entry.key_range,
            from_map=entry.shard_map,
            to_map=serving,
            started_at=step.now_text,
        )
    hop = hop.model_copy(
        update={
            "from_map": entry.shard_map,
            "from_shards": old_shards,
            "to_shards": new_shards,
            "method": "Relaunch",
            "phase": "Launching",
            "destinations": {n: d.start_timestamp for n, d in plan.destinations.items()},
            "watermarks": {n: str(p) for n, p in plan.watermarks.items()},
            "last_delivered": last_delivered,
        }
    )
    reported = _reported_tokens(step.report(entry))
    positions = []
    for shard in new_shards:
        existing = entry.shard(shard)
        if shard.name in plan.unchanged and existing is not None:
            positions.append(existing)
        elif shard in reported:
            positions.append(ShardPosition(name=shard, token=reported[shard].to_json()))
        else:
            start = plan.destinations[shard.name].start_timestamp
            positions.append(ShardPosition(name=shard, start_timestamp=start))
    step.note(
        "Normal",
        "HopPlanned",
        f"key range {entry.key_range}: hop from {_names(old_shards)} to "
        f"{_names(new_shards)}; destinations start at "
        + ", ".join(
            f"{p.name}@{'its last token' if p.token else p.start_timestamp}"
            for p in positions
            if p.name.name in plan.destinations
        ),
    )
    return entry.model_copy(update={"shards": positions, "shard_map": serving, "hop": hop})


def _completed(step: Step, done: HopRecord, duration: float) -> None:
    status = step.status
    status.hops = [*status.hops, done][-step.settings.hops_kept :]
    status.hop_count += 1
    status.hop_seconds_total = round(status.hop_seconds_total + duration, 3)


def complete_relaunch(step: Step, entry: KeyRangeStatus, job: JobInfo) -> KeyRangeStatus:
    """The job relaunched for a hop exists: the hop is done."""
    hop = entry.hop
    if hop is None or hop.phase != "Launching" or job.launch_id != entry.launch_id:
        return entry
    duration = seconds_between(hop.started_at, step.obs.now)
    done = hop.model_copy(
        update={
            "phase": "Completed",
            "completed_at": step.now_text,
            "duration_seconds": round(duration, 3),
            "launch_id": job.launch_id,
        }
    )
    _completed(step, done, duration)
    step.note(
        "Normal",
        "HopCompleted",
        f"key range {entry.key_range}: now reading {_names(hop.to_shards)} "
        f"(was {_names(hop.from_shards)}) with job {job.job_id}, after {duration:.1f}s",
    )
    return entry.model_copy(update={"hop": None})


# -- in the job ----------------------------------------------------------------------------------


def can_hop_in_job(step: Step, entry: KeyRangeStatus, job: JobInfo) -> str:
    """Why the job cannot hop in place now ("" when it can)."""
    if not job.in_job_hops:
        return "was not launched watching its Keyspace"
    if not step.settings.in_job_hops:
        return "may not hop in place: in-job hops are turned off"
    if job.phase is not JobPhase.RUNNING:
        return f"is {job.phase.value}, not running"
    if job.launch_id != entry.launch_id:
        return "is of another launch than the one recorded"
    if entry.hop is not None and entry.hop.phase != "InJob":
        return "is being stopped for the hop already"
    return ""


def _seen(step: Step, entry: KeyRangeStatus) -> float:
    """When the job noticed the newest in-job hop already recorded for its launch."""
    times = [
        h.detected_at
        for h in step.status.hops
        if h.key_range == entry.key_range
        and h.launch_id == entry.launch_id
        and h.method == "InJob"
        and h.detected_at is not None
    ]
    return max(times, default=float("-inf"))


def _finished(
    step: Step, entry: KeyRangeStatus, report: JobProgress | None, to_shards: list[KeyRange]
) -> ReportedHop | None:
    """The newest hop to `to_shards` the job reports complete and that is not recorded yet."""
    if report is None or report.shard_map is None:
        return None  # not a job that hops in place
    seen = _seen(step, entry)
    for hop in reversed(report.hops):
        if not hop.completed or list(hop.to_shards) != to_shards:
            continue
        if hop.detected_at is not None and hop.detected_at <= seen:
            return None  # that one is recorded: the job has not made this hop yet
        return hop
    return None


def _record_in_job(step: Step, entry: KeyRangeStatus, job: JobInfo, serving: ShardMap) -> HopRecord:
    """The record of the hop the job makes in place to `serving` (made, or retargeted, once)."""
    assert entry.shard_map is not None
    wanted = relevant_shards(serving, entry.key_range)
    hop = entry.hop
    if hop is not None and hop.to_map == serving:
        return hop
    if hop is not None:  # the serving map moved on before the job finished its hop
        step.note(
            "Normal",
            "HopStarted",
            f"key range {entry.key_range}: serving shards changed again, to {serving}; job "
            f"{job.job_id} hops in place to {_names(wanted)}",
        )
        return hop.model_copy(update={"to_map": serving, "to_shards": wanted})
    step.note(
        "Normal",
        "HopStarted",
        f"key range {entry.key_range}: serving shards changed from {entry.shard_map} to "
        f"{serving}; job {job.job_id} hops in place (relaunched from planned positions if it "
        f"has not within {step.settings.in_job_hop_timeout:.0f}s)",
    )
    return HopRecord(
        key_range=entry.key_range,
        from_map=entry.shard_map,
        to_map=serving,
        from_shards=relevant_shards(entry.shard_map, entry.key_range),
        to_shards=wanted,
        method="InJob",
        phase="InJob",
        started_at=step.now_text,
    )


def _positions_after(
    step: Step, entry: KeyRangeStatus, hop: HopRecord, plan: HopPlan
) -> list[ShardPosition]:
    """The positions on `hop`'s destination shards: the tokens the job reported, else (a shard
    the hop left alone) the entry's own, else the plan's start, where a relaunch would begin."""
    reports = step.report(entry)
    by_name = {} if reports is None else reports.shards
    positions = []
    for name in hop.to_shards:
        shard, existing = by_name.get(name), entry.shard(name)
        if shard is not None and shard.token is not None:
            positions.append(
                ShardPosition(
                    name=name,
                    token=shard.token.to_json(),
                    events=dict(shard.events),
                    lag_seconds=shard.lag_seconds,
                )
            )
        elif existing is not None and name.name in plan.unchanged:
            positions.append(existing)
        else:
            start = plan.destinations[name.name].start_timestamp
            positions.append(ShardPosition(name=name, start_timestamp=start))
    return positions


def _in_job_duration(done: ReportedHop) -> float:
    """How long the job's hop took: its own figure, else from when the serving shards changed
    (or it noticed) until it completed."""
    assert done.completed_at is not None
    began = done.serving_changed_at or done.detected_at
    duration = done.duration_seconds
    if duration is None:
        duration = done.completed_at - began if began is not None else 0.0
    return max(0.0, duration)


def _complete_in_job(
    step: Step,
    entry: KeyRangeStatus,
    job: JobInfo,
    spec: UpdateStreamSpec,
    keyspace: Keyspace,
    hop: HopRecord,
    done: ReportedHop,
) -> KeyRangeStatus:
    """The job reports it reads `hop`'s shards: complete the record with the job's numbers,
    and move the entry's positions to the new shards."""
    assert entry.shard_map is not None and done.completed_at is not None
    plan, last_delivered = _plan(entry, keyspace, hop.to_map)
    positions = _positions_after(step, entry, hop, plan)
    duration = _in_job_duration(done)
    record = hop.model_copy(
        update={
            "from_shards": relevant_shards(entry.shard_map, entry.key_range),
            "phase": "Completed",
            "completed_at": _rfc3339(done.completed_at),
            "duration_seconds": round(duration, 3),
            "launch_id": job.launch_id,
            "duplicates_dropped": done.duplicates_dropped,
            "detected_at": done.detected_at,
            "serving_changed_at": (
                _rfc3339(done.serving_changed_at) if done.serving_changed_at is not None else None
            ),
            "destinations": {n: d.start_timestamp for n, d in plan.destinations.items()},
            "watermarks": {n: str(p) for n, p in plan.watermarks.items()},
            "last_delivered": last_delivered,
        }
    )
    _completed(step, record, duration)
    step.note(
        "Normal",
        "HopCompleted",
        f"key range {entry.key_range}: job {job.job_id} now reads {_names(hop.to_shards)} "
        f"(was {_names(record.from_shards)}), hopped in place in {duration:.1f}s, "
        f"{done.duplicates_dropped} duplicates dropped",
    )
    return entry.model_copy(
        update={
            "shards": positions,
            "shard_map": hop.to_map,
            "spec_hash": spec_hash(spec, keyspace, entry.key_range, hop.to_map),
            "hop": None,
        }
    )


def in_job_hop(
    step: Step,
    entry: KeyRangeStatus,
    job: JobInfo,
    spec: UpdateStreamSpec,
    keyspace: Keyspace,
    serving: ShardMap,
) -> KeyRangeStatus:
    """The running job hops itself to `serving`: complete what it reports done, otherwise
    record the hop and wait, until the timeout (then stop it: the hop goes by relaunch)."""
    key_range = entry.key_range
    wanted = relevant_shards(serving, key_range)
    report = step.report(entry)
    hop = entry.hop
    if hop is not None and hop.to_map != serving:
        # recorded toward a map the serving one has moved on from: the job may have got there
        done = _finished(step, entry, report, hop.to_shards)
        if done is not None:
            entry = _complete_in_job(step, entry, job, spec, keyspace, hop, done)
    assert entry.shard_map is not None
    if relevant_shards(entry.shard_map, key_range) == wanted:
        return entry
    done = _finished(step, entry, report, wanted)
    reads_now = report.shard_map if report is not None else None
    if done is not None and reads_now and relevant_shards(reads_now, key_range) == wanted:
        hop = _record_in_job(step, entry, job, serving)
        return _complete_in_job(step, entry, job, spec, keyspace, hop, done)
    entry = entry.model_copy(update={"hop": _record_in_job(step, entry, job, serving)})
    assert entry.hop is not None
    waited = seconds_between(entry.hop.started_at, step.obs.now)
    if waited > step.settings.in_job_hop_timeout:
        why = (
            f"did not report its hop to {_names(wanted)} within "
            f"{step.settings.in_job_hop_timeout:.0f}s"
        )
        return stop_for_hop(step, entry, job, entry.shard_map or serving, serving, why)
    return entry.model_copy(update={"phase": "Hopping"})


def count_hop_duplicates(step: Step, entry: KeyRangeStatus) -> None:
    """Attribute dropped duplicates to the hops of the entry's launch: an in-job hop gets the
    job's own count for it; a relaunch hop what the job dropped besides."""
    status, report = step.status, step.report(entry)
    in_job, relaunched = 0, []
    for index, hop in enumerate(status.hops):
        if hop.key_range != entry.key_range or hop.launch_id != entry.launch_id:
            continue
        if hop.method != "InJob":
            relaunched.append(index)
            continue
        for reported in report.hops if report is not None else ():
            if (
                reported.detected_at == hop.detected_at
                and list(reported.to_shards) == hop.to_shards
            ):
                hop = hop.model_copy(update={"duplicates_dropped": reported.duplicates_dropped})
                status.hops[index] = hop
        in_job += hop.duplicates_dropped
    for index in relaunched:
        dropped = max(0, entry.duplicates_dropped - in_job)
        status.hops[index] = status.hops[index].model_copy(update={"duplicates_dropped": dropped})


def _rfc3339(seconds: float) -> str:
    return cond.rfc3339(dt.datetime.fromtimestamp(seconds, dt.UTC))


def _names(shards: Iterable[KeyRange]) -> str:
    return ",".join(shard.name for shard in shards)
