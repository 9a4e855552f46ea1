"""The pure reconcile service, step by step (no API server: data in, data out)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest
from updatestream_operator.reconciler import reconcile as rec
from updatestream_operator.reconciler.models import (
    JobPhase,
    JobProgress,
    KeyRangeStatus,
    ShardProgress,
    StreamStatus,
)

from tests.operator.reconcile_world import (
    NOW,
    T0,
    World,
    condition,
    keyspace,
    names,
    stream_spec,
    token,
)
from updatestream.contract.progress_report import SnapshotReport


@pytest.mark.parametrize(
    ("world", "reason", "words"),
    [
        (World(keyspace=None), "KeyspaceNotFound", "Keyspace 'commerce' does not exist"),
        (World(spec=stream_spec(tables=["orders", "nope"])), "UnknownTable", "nope"),
        (
            World(keyspace=keyspace(["-"], sharded=False), spec=stream_spec(keyRanges=["-80"])),
            "KeyRangeOutsideKeyspace",
            "key range -80 is outside",
        ),
        (
            World(spec=stream_spec(keyRanges=["-80", "40-"])),
            "OverlappingKeyRanges",
            "-80 and 40- overlap",
        ),
        (World(keyspace=keyspace(["-80", "80-", "zz"])), "InvalidShardMap", "zz"),
    ],
    ids=["no-keyspace", "unknown-table", "outside", "overlap", "bad-map"],
)
def test_invalid_streams_are_degraded_and_launch_nothing(
    world: World, reason: str, words: str
) -> None:
    decision = world.step()
    assert decision.actions == ()
    assert condition(decision.status, "Degraded") == ("True", reason)
    degraded = decision.status.condition("Degraded")
    assert degraded is not None and words in degraded.message
    assert degraded.observed_generation == 3
    assert condition(decision.status, "Ready")[0] == "False"


def test_a_new_stream_launches_one_job_per_key_range_then_is_ready() -> None:
    world = World(
        spec=stream_spec(keyRanges=["-80", "80-"], start={"mode": "timestamp", "timestamp": T0})
    )
    first = world.step()
    launches = [a for a in first.actions if isinstance(a, rec.Launch)]
    assert [str(a.job.key_range) for a in launches] == ["-80", "80-"]
    assert len({a.job.job_id for a in launches}) == 2
    assert all(a.job.spec.start.mode == "timestamp" for a in launches)
    assert [e.phase for e in first.status.key_ranges] == ["Launching", "Launching"]
    assert first.status.key_ranges[0].shards[0].start_timestamp == T0
    assert condition(first.status, "Ready") == ("False", "Launching")
    assert condition(first.status, "Progressing") == ("True", "Launching")
    second = world.step()
    assert second.actions == ()
    assert condition(second.status, "Ready") == ("False", "Pending")
    assert second.status.shards == "-80,80-"
    assert second.status.observed_generation == 3
    world.run()
    assert condition(world.step().status, "Ready") == ("False", "Starting")
    world.report("-80", token("-80", T0 + 1, 1), batches=1)
    starting = world.step()
    assert condition(starting.status, "Ready") == ("False", "Starting")
    ready = starting.status.condition("Ready")
    assert ready is not None and "key range 80-: job" in ready.message
    assert "first batch" in ready.message and "-80:" not in ready.message
    # Ready once every key range's job has delivered a batch
    world.report("80-", token("80-", T0 + 1, 1), batches=1)
    flowing = world.step()
    assert condition(flowing.status, "Ready") == ("True", "Streaming")
    assert condition(flowing.status, "Progressing") == ("False", "Streaming")
    # the same state again: nothing to do, the Ready transition time is kept
    again = world.step()
    assert again.actions == ()
    ready2, ready3 = flowing.status.condition("Ready"), again.status.condition("Ready")
    assert ready2 is not None and ready3 is not None
    assert ready3.last_transition_time == ready2.last_transition_time


def test_a_second_job_for_one_key_range_is_stopped_and_none_is_launched() -> None:
    world = World()
    world.settle()
    (job,) = world.jobs
    world.jobs.append(replace(job, job_id="intruder", launch_id=job.launch_id - 1))
    decision = world.step()
    assert [(type(a).__name__, a.job.job_id) for a in decision.actions] == [("Stop", "intruder")]
    assert [j.job_id for j in world.jobs] == [job.job_id]


def test_suspend_stops_jobs_keeping_positions_and_resume_continues_from_them() -> None:
    world = World()
    world.settle()
    world.report("-", a=token("-80", T0 + 10, 7), b=token("80-", T0 + 12, 9))
    world.spec = world.spec.model_copy(update={"suspend": True})
    suspended = world.step()
    assert [type(a) for a in suspended.actions] == [rec.Stop]
    assert world.jobs == []
    assert condition(suspended.status, "Ready") == ("False", "Suspended")
    entry = suspended.status.key_range("-")
    assert entry is not None and entry.phase == "Suspended"
    assert {p.name.name: p.token["pos"] for p in entry.shards if p.token} == {
        "-80": "0-1-7",
        "80-": "0-1-9",
    }
    assert world.step().actions == ()  # stays stopped

    world.spec = world.spec.model_copy(update={"suspend": False})
    world.settle()
    relaunch = world.launches()[-1].job
    assert relaunch.launch_id == 2
    assert relaunch.spec.start.mode == "tokens"
    assert relaunch.dedup is None and relaunch.hop_started_at is None
    assert relaunch.spec.start.tokens is not None
    assert relaunch.spec.start.tokens["-80"]["pos"] == "0-1-7"
    assert condition(world.status, "Ready") == ("False", "Pending")


@pytest.mark.parametrize(
    "world",
    [
        World(legacy_jobs=True),
        World(settings=rec.Settings(in_job_hops=False)),
        World(),
    ],
    ids=["job-without-in-job-hops", "in-job-hops-off", "job-not-running"],
)
def test_a_split_hops_once_from_the_planned_positions(world: World) -> None:
    world.settle()
    if world.legacy_jobs or not world.settings.in_job_hops:
        world.run()  # running, but it cannot (or may not) hop in place
    world.report("-", a=token("-80", T0 + 10, 7), b=token("80-", T0 + 12, 9))
    world.step()
    world.keyspace = keyspace(["-40", "40-80", "80-"])

    stopping = world.step()
    assert [type(a) for a in stopping.actions] == [rec.Stop]
    assert condition(stopping.status, "Hopping") == ("True", "ServingShardsChanged")
    assert [n.reason for n in stopping.notes] == ["HopStarted"]

    # the job reported once more before it stopped: the plan must use that
    world.report("-", a=token("-80", T0 + 20, 8), b=token("80-", T0 + 21, 10))
    relaunching = world.step()
    (launch,) = relaunching.actions
    assert isinstance(launch, rec.Launch)
    start = launch.job.spec.start
    assert start.mode == "resume"
    assert str(launch.job.shard_map) == "-40,40-80,80-"
    assert start.tokens is not None and set(start.tokens) == {"80-"}
    assert start.tokens["80-"]["pos"] == "0-1-10"
    assert start.timestamps == {"-40": T0 + 20, "40-80": T0 + 20}
    assert launch.job.dedup is not None and launch.job.dedup.to_json() == {
        "watermarks": {"-80": {"pos": "0-1-8", "flavor": "mariadb"}},
        "overlap_until": {"-40": T0 + 20, "40-80": T0 + 20},
    }
    assert launch.job.hop_started_at == NOW.timestamp() + 6
    entry = relaunching.status.key_range("-")
    assert entry is not None and entry.hop is not None
    assert entry.hop.watermarks == {"-80": "0-1-8"}
    assert str(entry.shard_map) == "-40,40-80,80-"

    completed = world.step()
    assert completed.actions == ()
    assert condition(completed.status, "Hopping") == ("False", "HopCompleted")
    assert condition(completed.status, "Ready") == ("False", "Pending")
    assert completed.status.hop_count == 1
    (hop,) = completed.status.hops
    assert (names(hop.from_shards), names(hop.to_shards), hop.phase) == (
        ["-80", "80-"],
        ["-40", "40-80", "80-"],
        "Completed",
    )
    assert hop.duration_seconds == 4.0
    assert "HopCompleted" in [n.reason for n in completed.notes]

    # exactly one hop: more steps, and the new job's reports, add no second one
    world.report("-", a=token("-40", T0 + 30, 3))
    for _ in range(3):
        assert world.step().actions == ()
    assert world.status.hop_count == 1 and len(world.status.hops) == 1
    assert world.status.hops[0].duplicates_dropped == 2
    assert len(world.launches()) == 2


def test_a_change_elsewhere_in_the_shard_map_is_not_a_hop() -> None:
    world = World(spec=stream_spec(keyRanges=["80-"]))
    world.settle()
    world.keyspace = keyspace(["-40", "40-80", "80-"])
    decision = world.step()
    assert decision.actions == ()
    assert decision.status.hop_count == 0
    entry = decision.status.key_range("80-")
    assert entry is not None and str(entry.shard_map) == "-40,40-80,80-"


def test_a_source_without_a_delivered_token_hops_from_its_start() -> None:
    world = World(spec=stream_spec(start={"mode": "timestamp", "timestamp": T0}))
    world.settle()
    world.keyspace = keyspace(["-40", "40-80", "80-"])
    world.settle()
    start = world.launches()[-1].job.spec.start
    assert (start.mode, start.timestamp) == ("timestamp", T0)
    assert world.launches()[-1].job.dedup is not None  # empty watermarks, an overlap window


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"tables": ["orders"]}, "Reconfiguring"),
        ({"sinks": [{"type": "cdcv2", "path": "/data"}]}, "Reconfiguring"),
    ],
)
def test_a_changed_configuration_relaunches_from_positions(
    change: dict[str, Any], reason: str
) -> None:
    world = World()
    world.settle()
    world.report("-", a=token("-80", T0, 1))
    world.spec = stream_spec(**change)
    steps = world.settle()
    assert reason in [n.reason for n in steps[0].notes]
    assert len(world.launches()) == 2
    assert world.launches()[-1].job.spec.start.tokens == {"-80": token("-80", T0, 1).to_json()}


def _fail(world: World, message: str = "the driver exited with code 1") -> None:
    world.jobs = [
        replace(j, phase=JobPhase.FAILED, message=message, reason="DriverExited")
        for j in world.jobs
    ]


def test_a_failed_job_is_degraded_at_once_then_relaunched_after_a_growing_backoff() -> None:
    world = World(settings=rec.Settings(max_restarts=2, restart_backoff=(10.0, 300.0)))
    world.settle()
    # nothing reported yet: the lag of the key range counts from its first launch
    assert world.status.key_ranges[0].reported_at == "2024-05-01T12:00:00Z"
    world.run()
    world.report("-", a=token("-80", T0, 1))
    world.step()
    for attempt, backoff in ((1, 10), (2, 20)):
        _fail(world)
        entry = world.status.key_range("-")
        assert entry is not None
        world.progress["-"] = JobProgress(
            launch_id=entry.launch_id, error="memcached 10.0.0.1:1 does not answer", retryable=True
        )
        seen = world.step()
        assert seen.actions == ()  # not at once: after the backoff
        assert condition(seen.status, "Degraded") == ("True", "JobFailed")
        assert condition(seen.status, "Ready") == ("False", "JobFailed")
        degraded = seen.status.condition("Degraded")
        assert degraded is not None
        assert "memcached 10.0.0.1:1 does not answer" in degraded.message
        assert f"relaunching it from its positions in {backoff}s" in degraded.message
        assert [n.reason for n in seen.notes] == ["JobFailed"]
        assert [e.phase for e in seen.status.key_ranges] == ["Degraded"]
        world.now += dt.timedelta(seconds=backoff - 4)
        assert world.step().actions == ()
        assert world.decisions[-1].notes == ()  # one Event per failure
        world.now += dt.timedelta(seconds=4)
        steps = world.settle()
        assert [type(a) for a in steps[0].actions] == [rec.Stop]
        assert world.status.key_ranges[0].restarts == attempt
        assert world.launches()[-1].job.launch_id == attempt + 1
        # Degraded throughout the relaunch, until the relaunched job delivers
        assert [condition(d.status, "Degraded")[0] for d in steps] == ["True"] * len(steps)
    assert world.status.key_ranges[0].reported_at == "2024-05-01T12:00:00Z"  # not a relaunch's
    _fail(world)
    decision = world.step()
    world.now += dt.timedelta(seconds=600)
    assert decision.actions == () and world.step().actions == ()
    assert condition(world.status, "Degraded") == ("True", "JobFailed")
    degraded = world.status.condition("Degraded")
    assert degraded is not None and "relaunched 2 times" in degraded.message


def test_a_relaunched_job_that_delivers_clears_degraded() -> None:
    world = World()
    world.settle()
    world.run()
    _fail(world)
    world.step()
    world.now += dt.timedelta(seconds=10)
    world.settle()
    world.run()
    assert condition(world.step().status, "Degraded") == ("True", "JobError")
    world.report("-", a=token("-80", T0, 1))
    assert condition(world.step().status, "Degraded") == ("False", "AsExpected")
    assert condition(world.status, "Ready") == ("True", "Streaming")


def test_a_job_that_ended_on_its_configuration_is_not_relaunched_until_the_spec_changes() -> None:
    world = World()
    world.settle()
    _fail(world)
    entry = world.status.key_range("-")
    assert entry is not None
    error = "spec.sinks[0].keyTemplate.users: key template 'user:{emial}' names column 'emial'"
    world.progress["-"] = JobProgress(launch_id=entry.launch_id, error=error, retryable=False)
    world.step()
    world.now += dt.timedelta(seconds=900)
    assert world.step().actions == ()
    degraded = world.status.condition("Degraded")
    assert degraded is not None and error in degraded.message
    assert "a relaunch would meet it again" in degraded.message
    world.spec = stream_spec(sinks=[{"type": "console", "path": "/tmp/fixed.jsonl"}])
    steps = world.settle()
    assert "Reconfiguring" in [n.reason for n in steps[0].notes]
    assert world.launches()[-1].job.launch_id == 2
    assert world.status.key_ranges[0].restarts == 0


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "CrashLoopBackOff"])
def test_a_driver_that_cannot_start_by_waiting_is_degraded(reason: str) -> None:
    world = World()
    world.settle()
    world.jobs = [replace(j, reason=reason, message=f"{reason}: back-off") for j in world.jobs]
    decision = world.step()
    assert decision.actions == ()
    assert condition(decision.status, "Degraded") == ("True", "JobCannotStart")
    assert [n.reason for n in decision.notes] == ["JobCannotStart"]
    assert world.step().notes == ()  # posted once


def test_a_changed_spec_relaunches_without_the_old_configurations_error() -> None:
    world = World()
    world.settle()
    world.run()
    entry = world.status.key_range("-")
    assert entry is not None
    world.progress["-"] = JobProgress(launch_id=entry.launch_id, error="memcached mc:1 is down")
    assert condition(world.step().status, "Degraded") == ("True", "JobError")
    world.spec = stream_spec(sinks=[{"type": "console", "path": "/tmp/other.jsonl"}])
    steps = world.settle()
    assert [condition(d.status, "Degraded")[0] for d in steps] == ["False"] * len(steps)


def test_an_idle_stream_is_ready_once_its_query_found_nothing_new() -> None:
    """A keyspace without changes gives no batch; a trigger that read the shards and found
    nothing new says as much about the job as a batch."""
    world = World()
    world.settle()
    world.run()
    entry = world.status.key_range("-")
    assert entry is not None
    world.progress["-"] = JobProgress(launch_id=entry.launch_id, idle_triggers=0)
    assert condition(world.step().status, "Ready") == ("False", "Starting")
    world.progress["-"] = JobProgress(launch_id=entry.launch_id, idle_triggers=1)
    assert condition(world.step().status, "Ready") == ("True", "Streaming")


def test_an_unschedulable_driver_says_so_in_ready() -> None:
    world = World()
    world.settle()
    message = "0/1 nodes are available: 1 Insufficient cpu."
    world.jobs = [replace(j, reason="Unschedulable", message=message) for j in world.jobs]
    decision = world.step()
    assert condition(decision.status, "Ready") == ("False", "Unschedulable")
    ready = decision.status.condition("Ready")
    assert ready is not None and ready.message.endswith(f"cannot be scheduled: {message}")
    assert condition(decision.status, "Degraded") == ("False", "AsExpected")


def test_a_job_reporting_an_error_degrades_the_stream() -> None:
    world = World()
    world.settle()
    entry = world.status.key_ranges[0]
    world.progress["-"] = JobProgress(launch_id=entry.launch_id, error="binlog purged on -80")
    decision = world.step()
    assert condition(decision.status, "Degraded") == ("True", "JobError")


def test_removed_key_ranges_lose_their_job_and_then_their_entry() -> None:
    world = World(spec=stream_spec(keyRanges=["-80", "80-"]))
    world.settle()
    world.spec = stream_spec(keyRanges=["-80"])
    decision = world.step()
    assert [str(a.job.key_range) for a in decision.actions if isinstance(a, rec.Stop)] == ["80-"]
    world.step()
    assert [str(e.key_range) for e in world.status.key_ranges] == ["-80"]


def test_progress_of_another_launch_or_older_tokens_never_moves_positions_back() -> None:
    world = World()
    world.settle()
    world.report("-", a=token("-80", T0 + 10, 7))
    world.step()
    world.progress["-"] = JobProgress(
        launch_id=1, shards={"-80": ShardProgress(token=token("-80", T0 + 5, 3))}
    )
    world.step()
    entry = world.status.key_range("-")
    assert entry is not None and entry.shard("-80") is not None
    assert entry.shard("-80").token["pos"] == "0-1-7"  # type: ignore[union-attr]
    world.progress["-"] = JobProgress(
        launch_id=99, shards={"-80": ShardProgress(token=token("-80", T0 + 50, 30))}
    )
    world.step()
    assert world.status.key_range("-").shard("-80").token["pos"] == "0-1-7"  # type: ignore[union-attr]


def test_a_job_whose_status_was_lost_is_adopted_not_duplicated() -> None:
    world = World()
    world.settle()
    world.status = StreamStatus()
    decision = world.step()
    assert decision.actions == ()
    assert decision.status.key_ranges[0].launch_id == 1


def test_status_round_trips_through_the_api_shape() -> None:
    world = World()
    world.settle()
    world.report("-", a=token("-80", T0 + 10, 7))
    world.step()
    dumped = world.status.dump()
    assert dumped["keyRanges"][0]["shards"][0]["token"]["pos"] == "0-1-7"
    assert dumped["maxLagSeconds"] == 1.5
    assert StreamStatus.parse(dumped) == world.status


def test_a_job_of_an_earlier_launch_that_won_a_race_is_adopted() -> None:
    world = World()
    world.settle()
    (job,) = world.jobs
    world.status.key_ranges[0].launch_id = 2  # the intent of a launch that found the job there
    decision = world.step()
    assert decision.actions == ()
    assert decision.status.key_ranges[0].launch_id == job.launch_id == 1
    world.report("-", a=token("-80", T0 + 10, 7))
    world.step()
    assert world.status.key_ranges[0].shard("-80").token["pos"] == "0-1-7"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("positions", "expected"),
    [
        (
            [{"name": "-80", "token": {"ts": 1}}, {"name": "80-", "token": {"ts": 2}}],
            {"mode": "tokens", "tokens": {"-80": {"ts": 1}, "80-": {"ts": 2}}},
        ),
        (
            [{"name": "-80", "gtid": "0-1-5"}, {"name": "80-", "gtid": "0-2-6"}],
            {"mode": "gtid", "gtid": {"-80": "0-1-5", "80-": "0-2-6"}},
        ),
        (
            [{"name": "-80", "startTimestamp": 7}, {"name": "80-", "startTimestamp": 7}],
            {"mode": "timestamp", "timestamp": 7},
        ),
        (
            [{"name": "-80", "startTimestamp": 7}, {"name": "80-", "startTimestamp": 9}],
            {"mode": "resume", "timestamps": {"-80": 7, "80-": 9}},
        ),
        (
            [{"name": "-40", "startTimestamp": 7}, {"name": "80-", "token": {"ts": 2}}],
            {"mode": "resume", "tokens": {"80-": {"ts": 2}}, "timestamps": {"-40": 7}},
        ),
    ],
    ids=["tokens", "gtid", "one-timestamp", "timestamps", "mixed"],
)
def test_a_relaunch_starts_in_the_simplest_form_that_says_where(
    positions: list[dict[str, Any]], expected: dict[str, Any]
) -> None:
    entry = KeyRangeStatus.model_validate({"keyRange": "-", "shards": positions})
    start = rec.resume_start(entry)
    assert start.model_dump(exclude_none=True) == expected


def test_a_snapshotting_job_shows_its_progress_in_a_condition_until_it_finishes() -> None:
    world = World()
    world.settle()
    assert world.step().status.condition("Snapshotting") is None  # no snapshot, no condition
    entry = world.status.key_ranges[0]
    reading = SnapshotReport(
        chunksDone=3, chunksTotal=10, rows=60000, rowsPerSecond=12000.0, etaSeconds=14.0
    )
    world.progress["-"] = JobProgress(launch_id=entry.launch_id, snapshot=reading)
    assert condition(world.step().status, "Snapshotting") == ("True", "ReadingChunks")
    message = next(c.message for c in world.status.conditions if c.type == "Snapshotting")
    assert message == "key range -: 3/10 chunks, 60,000 rows, 12,000 rows/s, ETA 14s"
    done = reading.model_copy(update={"chunks_done": 10, "rows": 200000, "finished": True})
    world.progress["-"] = JobProgress(launch_id=entry.launch_id, snapshot=done)
    assert condition(world.step().status, "Snapshotting") == ("False", "SnapshotFinished")
