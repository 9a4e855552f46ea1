"""The pure reconcile service and hops made inside the running job (no API server).

A job launched watching its Keyspace hops in place when the serving shards change; the
operator records the hop, waits for the job's report (`shardMap`, `hops`), completes the
record from the job's numbers, and falls back to stop-and-relaunch after a timeout.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest
from updatestream_operator.reconciler import reconcile as rec
from updatestream_operator.reconciler.models import JobPhase, ReportedHop, StreamStatus

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
from updatestream.core.dedup import DedupFilter

SPLIT = ["-40", "40-80", "80-"]
OLD, NEW = "-80,80-", "-40,40-80,80-"


def split_hop(
    detected: float = T0 + 100,
    completed: float | None = T0 + 103,
    dropped: int = 4,
    duration: float | None = 3.5,
    from_map: str = OLD,
    to_map: str = NEW,
) -> ReportedHop:
    return ReportedHop(
        from_map=from_map,
        to_map=to_map,
        from_shards=("-80", "80-"),
        to_shards=tuple(to_map.split(",")),
        serving_changed_at=T0 + 99.5,
        detected_at=detected,
        completed_at=completed,
        duration_seconds=duration if completed is not None else None,
        duplicates_dropped=dropped,
    )


def streaming() -> World:
    """One running job over `-` that hops in place, with delivered positions on both shards."""
    world = World()
    world.settle()
    world.run()
    world.report("-", token("-80", T0 + 10, 7), token("80-", T0 + 12, 9), shard_map=OLD)
    world.step()
    return world


def report_split_done(world: World, *, retired_token: bool = True) -> None:
    """The job reports its split done: it reads the new shards (and delivered on `-80`)."""
    retired = (token("-80", T0 + 20, 8),) if retired_token else ()
    new = (token("80-", T0 + 30, 12), token("-40", T0 + 31, 3), token("40-80", T0 + 32, 4))
    world.report("-", *retired, *new, shard_map=NEW, hops=(split_hop(),))


def notes(world: World) -> list[str]:
    return [n.reason for d in world.decisions for n in d.notes]


def test_launches_ask_for_in_job_hops_and_the_job_is_shown_the_keyspace() -> None:
    world = World()
    world.settle()
    assert world.launches()[0].job.in_job_hops is True
    assert world.decisions[-1].keyspace_watchers == tuple(world.jobs)
    off = World(settings=rec.Settings(in_job_hops=False))
    off.settle()
    assert off.launches()[0].job.in_job_hops is False
    assert off.decisions[-1].keyspace_watchers == ()
    legacy = World(legacy_jobs=True)
    legacy.settle()
    assert legacy.decisions[-1].keyspace_watchers == ()


def test_a_split_hops_inside_the_job_without_stopping_it() -> None:
    world = streaming()
    (job,) = world.jobs
    world.keyspace = keyspace(SPLIT)

    started = world.step()
    assert started.actions == ()
    assert [n.reason for n in started.notes] == ["HopStarted"]
    assert "hops in place" in started.notes[0].message
    assert started.keyspace_watchers == (job,)  # the new Keyspace is shown to the job
    assert condition(started.status, "Hopping") == ("True", "ServingShardsChanged")
    assert condition(started.status, "Ready") == ("False", "Hopping")
    entry = started.status.key_range("-")
    assert entry is not None and entry.hop is not None
    assert (entry.phase, entry.hop.phase, entry.hop.method) == ("Hopping", "InJob", "InJob")
    assert (names(entry.hop.from_shards), names(entry.hop.to_shards)) == (["-80", "80-"], SPLIT)
    assert str(entry.shard_map) == OLD  # the job still reads the old shards

    # the job noticed, and is hopping
    world.report(
        "-",
        token("-80", T0 + 20, 8),
        token("80-", T0 + 21, 10),
        shard_map=NEW,
        hops=(split_hop(completed=None),),
    )
    for _ in range(3):
        waiting = world.step()
        assert waiting.actions == () and waiting.notes == ()
        assert condition(waiting.status, "Hopping")[0] == "True"

    # done: the new shards' tokens are the positions from now on
    report_split_done(world)
    completed = world.step()
    assert completed.actions == ()
    assert [n.reason for n in completed.notes] == ["HopCompleted"]
    assert "hopped in place in 3.5s, 4 duplicates dropped" in completed.notes[0].message
    assert condition(completed.status, "Hopping") == ("False", "HopCompleted")
    assert condition(completed.status, "Ready") == ("True", "Streaming")
    status = completed.status
    assert (status.hop_count, status.hop_seconds_total, status.shards) == (1, 3.5, NEW)
    (hop,) = status.hops
    assert (hop.method, hop.phase, hop.launch_id) == ("InJob", "Completed", 1)
    assert (hop.duration_seconds, hop.duplicates_dropped) == (3.5, 4)
    assert hop.completed_at == "2024-05-01T10:41:43Z"  # the job's completedAt, T0 + 103
    assert hop.serving_changed_at == "2024-05-01T10:41:39Z"
    assert hop.watermarks == {"-80": "0-1-8"}  # for a later relaunch's dedup filter
    entry = status.key_range("-")
    assert entry is not None and entry.hop is None and str(entry.shard_map) == NEW
    assert {p.name.name: p.token["pos"] for p in entry.shards if p.token} == {
        "-40": "0-1-3",
        "40-80": "0-1-4",
        "80-": "0-1-12",
    }

    # still exactly one hop, one job, one launch; a serving-map change is no reconfiguration
    for _ in range(3):
        assert world.step().actions == ()
    assert world.status.hop_count == 1 and len(world.status.hops) == 1
    assert world.stops() == [] and len(world.launches()) == 1
    assert notes(world).count("HopStarted") == 1 and notes(world).count("HopCompleted") == 1


def test_a_relaunch_after_an_in_job_hop_resumes_from_the_new_shards() -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    report_split_done(world)
    world.step()
    world.spec = stream_spec(tables=["orders"])
    steps = world.settle()
    assert "Reconfiguring" in [n.reason for n in steps[0].notes]
    relaunch = world.launches()[-1].job
    assert relaunch.launch_id == 2 and str(relaunch.shard_map) == NEW
    assert relaunch.spec.start.mode == "tokens"
    assert relaunch.spec.start.tokens is not None
    assert {n: t["pos"] for n, t in relaunch.spec.start.tokens.items()} == {
        "-40": "0-1-3",
        "40-80": "0-1-4",
        "80-": "0-1-12",
    }
    # the overlap of the in-job hop is still recognised if the new tokens lie inside it
    assert relaunch.dedup is not None and relaunch.dedup.to_json() == {
        "watermarks": {"-80": {"pos": "0-1-8", "flavor": "mariadb"}},
        "overlap_until": {"-40": T0 + 20, "40-80": T0 + 20},
    }


def test_a_relaunch_after_in_job_hops_starts_with_the_dedup_rule_the_job_reported() -> None:
    """The job reports the dedup rule its stream applies (the source's own, merged at each
    hop); a relaunch starts with that rule, not one the operator plans again from its hop
    records, and a relaunch of that launch keeps it."""
    applied = DedupFilter.from_json(
        {
            "watermarks": {"-80": {"pos": "0-1-8", "flavor": "mariadb"}},
            "overlap_until": {"-40": T0 + 19, "40-80": T0 + 19},  # the job's own, not planned
        }
    )
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    retired = token("-80", T0 + 20, 8)
    new = (token("80-", T0 + 30, 12), token("-40", T0 + 31, 3), token("40-80", T0 + 32, 4))
    world.report("-", retired, *new, shard_map=NEW, hops=(split_hop(),), dedup=applied)
    world.step()
    entry = world.status.key_range("-")
    assert entry is not None and entry.dedup is not None
    assert entry.dedup.to_json() == applied.to_json()  # kept in status with the positions
    world.jobs = [replace(j, phase=JobPhase.FAILED) for j in world.jobs]
    world.step()
    world.now += dt.timedelta(seconds=10)  # the first relaunch's backoff
    world.settle()
    relaunch = world.launches()[-1].job
    assert relaunch.launch_id == 2
    assert relaunch.dedup is not None and relaunch.dedup.to_json() == applied.to_json()
    # the relaunched job has reported nothing yet, and fails too: its rule is still known
    world.jobs = [replace(j, phase=JobPhase.FAILED) for j in world.jobs]
    world.step()
    world.now += dt.timedelta(seconds=20)  # the second's
    world.settle()
    again = world.launches()[-1].job
    assert again.launch_id == 3
    assert again.dedup is not None and again.dedup.to_json() == applied.to_json()


def test_a_job_that_never_reports_the_hop_is_relaunched_after_the_timeout() -> None:
    world = streaming()
    world.settings = rec.Settings(in_job_hop_timeout=30)
    world.keyspace = keyspace(SPLIT)
    world.step()
    # it reads one new shard already when the operator gives up on it
    world.report(
        "-",
        token("-80", T0 + 20, 8),
        token("80-", T0 + 21, 10),
        token("-40", T0 + 25, 2),
        shard_map=NEW,
        hops=(split_hop(completed=None),),
    )
    world.now += dt.timedelta(seconds=20)
    assert world.step().actions == ()  # 22 s: still waiting
    world.now += dt.timedelta(seconds=10)
    fallback = world.step()
    (stop,) = fallback.actions
    assert isinstance(stop, rec.Stop)
    (note,) = fallback.notes
    assert (note.type, note.reason) == ("Warning", "HopFallback")
    assert "did not report its hop to -40,40-80,80- within 30s" in note.message
    entry = fallback.status.key_range("-")
    assert entry is not None and entry.hop is not None
    assert (entry.hop.phase, entry.hop.method) == ("Stopping", "Relaunch")
    assert fallback.keyspace_watchers == ()

    relaunching = world.step()
    (launch,) = relaunching.actions
    assert isinstance(launch, rec.Launch)
    start = launch.job.spec.start
    assert start.mode == "resume"
    assert start.tokens is not None
    assert {n: t["pos"] for n, t in start.tokens.items()} == {"-40": "0-1-2", "80-": "0-1-10"}
    assert start.timestamps == {"40-80": T0 + 20}  # planned from -80's last delivered token
    assert launch.job.dedup is not None and launch.job.dedup.to_json() == {
        "watermarks": {"-80": {"pos": "0-1-8", "flavor": "mariadb"}},
        "overlap_until": {"-40": T0 + 20, "40-80": T0 + 20},
    }
    world.step()
    assert world.status.hop_count == 1
    (hop,) = world.status.hops
    assert (hop.method, hop.phase, hop.launch_id) == ("Relaunch", "Completed", 2)
    assert notes(world).count("HopStarted") == 1 and notes(world).count("HopCompleted") == 1


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("pending", "is Pending, not running"),
        ("turned-off", "in-job hops are turned off"),
    ],
)
def test_an_in_job_hop_that_can_no_longer_happen_falls_back_at_once(change: str, why: str) -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    if change == "pending":
        world.jobs = [replace(j, phase=JobPhase.PENDING) for j in world.jobs]
    else:
        world.settings = rec.Settings(in_job_hops=False)
    decision = world.step()
    assert [type(a) for a in decision.actions] == [rec.Stop]
    (note,) = decision.notes
    assert note.reason == "HopFallback" and why in note.message
    world.settle()
    assert world.status.hop_count == 1 and len(world.launches()) == 2


def test_a_hop_the_job_made_while_the_operator_was_away_is_recorded_once() -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    report_split_done(world, retired_token=False)
    decision = world.step()
    assert decision.actions == ()
    assert [n.reason for n in decision.notes] == ["HopStarted", "HopCompleted"]
    for _ in range(3):
        assert world.step().notes == ()
    assert world.status.hop_count == 1


def test_a_job_whose_status_was_lost_after_an_in_job_hop_is_adopted_as_it_reads() -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    world.report(
        "-", token("80-", T0 + 30, 12), token("-40", T0 + 31, 3), shard_map=NEW, hops=(split_hop(),)
    )
    world.step()
    world.status = StreamStatus()
    for _ in range(3):
        decision = world.step()
        assert decision.actions == ()
    entry = world.status.key_range("-")
    assert entry is not None and str(entry.shard_map) == NEW
    assert names(p.name for p in entry.shards) == SPLIT
    assert entry.shard("-40").token["pos"] == "0-1-3"  # type: ignore[union-attr]


def test_two_quick_changes_give_two_records() -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    first = split_hop()
    second_map = "-40,40-80,80-c0,c0-"
    world.report(
        "-",
        token("-40", T0 + 31, 3),
        token("40-80", T0 + 32, 4),
        token("80-", T0 + 33, 13),
        shard_map=NEW,
        hops=(first,),
    )
    # the serving map moves on before the operator looks again
    world.keyspace = keyspace([*SPLIT[:2], "80-c0", "c0-"])
    decision = world.step()
    assert [n.reason for n in decision.notes] == ["HopCompleted", "HopStarted"]
    entry = decision.status.key_range("-")
    assert entry is not None and entry.hop is not None
    assert (str(entry.shard_map), names(entry.hop.from_shards)) == (NEW, SPLIT)
    second = ReportedHop(
        from_map=NEW,
        to_map=second_map,
        from_shards=tuple(SPLIT),
        to_shards=("-40", "40-80", "80-c0", "c0-"),
        detected_at=T0 + 200,
        completed_at=T0 + 201,
        duration_seconds=1.0,
    )
    world.report("-", token("80-c0", T0 + 210, 1), shard_map=second_map, hops=(first, second))
    world.step()
    assert [names(h.to_shards) for h in world.status.hops] == [
        SPLIT,
        ["-40", "40-80", "80-c0", "c0-"],
    ]
    assert world.status.hop_count == 2 and world.stops() == []


def test_a_merge_back_and_a_second_split_are_not_taken_for_the_first() -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    there = split_hop()
    world.report("-", token("-40", T0 + 31, 3), shard_map=NEW, hops=(there,))
    world.step()
    world.keyspace = keyspace(["-80", "80-"])
    world.step()
    back = split_hop(detected=T0 + 300, completed=T0 + 301, from_map=NEW, to_map=OLD)
    back = replace(back, from_shards=tuple(SPLIT))
    world.report("-", token("-80", T0 + 310, 20), shard_map=OLD, hops=(there, back))
    world.step()
    assert world.status.hop_count == 2
    world.keyspace = keyspace(SPLIT)
    again = world.step()
    # the job's first hop to these shards is recorded already: this one is still to come
    assert [n.reason for n in again.notes] == ["HopStarted"]
    assert world.status.hop_count == 2
    entry = world.status.key_range("-")
    assert entry is not None and entry.hop is not None and entry.hop.phase == "InJob"


def test_the_jobs_count_of_dropped_duplicates_keeps_the_hop_record_current() -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    world.report("-", token("-40", T0 + 31, 3), shard_map=NEW, hops=(split_hop(dropped=1),))
    world.step()
    world.report("-", token("-40", T0 + 41, 9), shard_map=NEW, hops=(split_hop(dropped=6),))
    world.step()
    assert [h.duplicates_dropped for h in world.status.hops] == [6]


def test_only_history_or_elsewhere_changes_do_nothing_endpoint_and_vschema_changes_relaunch() -> (
    None
):
    world = World(spec=stream_spec(keyRanges=["-80"]))
    world.settle()
    world.run()
    history = [{"at": T0, "shards": ["-80", "80-"]}]
    world.keyspace = keyspace(history=history)
    assert world.step().actions == ()
    world.keyspace = keyspace(["-80", "80-c0", "c0-"], history=history)  # not -80's shards
    assert world.step().actions == () and world.status.hop_count == 0
    world.keyspace = keyspace(["-80", "80-c0", "c0-"], ports={"80-": 4000})  # not read
    assert world.step().actions == ()
    world.keyspace = keyspace(["-80", "80-c0", "c0-"], ports={"-80": 4000})
    decision = world.step()
    assert [type(a) for a in decision.actions] == [rec.Stop]
    assert [n.reason for n in decision.notes] == ["Reconfiguring"]
    world.settle()
    world.run()
    world.keyspace = keyspace(["-80", "80-c0", "c0-"], ports={"-80": 4000}, extra=True)
    assert [n.reason for n in world.step().notes] == ["Reconfiguring"]


def test_after_an_in_job_hop_the_new_shards_endpoints_count_not_the_retired_ones() -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    world.report("-", token("-40", T0 + 31, 3), shard_map=NEW, hops=(split_hop(),))
    world.step()
    world.keyspace = keyspace(SPLIT, ports={"-80": 4000})  # retired: the job does not read it
    assert world.step().actions == ()
    world.keyspace = keyspace(SPLIT, ports={"-80": 4000, "40-80": 4001})
    decision = world.step()
    assert [n.reason for n in decision.notes] == ["Reconfiguring"]


def test_a_suspended_stream_or_an_invalid_keyspace_is_shown_to_no_job() -> None:
    world = streaming()
    world.keyspace = keyspace(["-80", "80-", "zz"])
    decision = world.step()
    assert decision.keyspace_watchers == () and decision.actions == ()
    world.keyspace = keyspace()
    world.spec = stream_spec(suspend=True)
    decision = world.step()
    assert decision.keyspace_watchers == () and [type(a) for a in decision.actions] == [rec.Stop]


def test_hop_times_when_the_job_gives_no_duration() -> None:
    world = streaming()
    world.keyspace = keyspace(SPLIT)
    world.step()
    hop = replace(split_hop(duration=None), serving_changed_at=None)
    world.report("-", token("-40", T0 + 31, 3), shard_map=NEW, hops=(hop,))
    world.step()
    (record,) = world.status.hops
    assert record.duration_seconds == 3.0  # completedAt - detectedAt
    assert record.serving_changed_at is None
    assert dt.datetime.fromisoformat(record.started_at.replace("Z", "+00:00")) > NOW
