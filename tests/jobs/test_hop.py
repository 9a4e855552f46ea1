"""Surviving resharding: a running stream hops from source to destination shards inside its
query, drops the overlap's duplicates exactly, and loses nothing — checked with the verifier
against the traffic ledger, for a live split followed by a live merge under ~500 writes/s and
for a job killed right after the sinks wrote the hop batch.

Everything is real: MariaDB or MySQL 8 shards of a development cluster, the Vitess-style reshard
workflow, `updatestream run` (Spark local mode) into a Version Stream on its own MariaDB or MySQL
and CDCv2 files. The live split and merge, the kill during the hop and the stream stopped across
a split whose source is then retired run on both flavors of shards (the Version Stream on the
shards' flavor for the first, on the other for the second); the other cases depend on the hop
planning only, which is the same for both, and run on MariaDB. The live split and merge and the
killed job also invalidate a real memcached with the fast lane on, and no cache entry may be
stale and no duplicate delivered there either.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.plan import plan_reshard
from updatestream_cli.devcluster.reporting import QuietReporter
from updatestream_cli.devcluster.reshard import ReshardOptions, ReshardWorkflow
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_jobs.job import FAULT_EXIT_AFTER_HOP_WRITE

from harness.stream_job import StreamJob, completed_hops, job_from_now, reshard, traffic_generator
from tests.conftest import MariaDBFixture


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory, flavor: str) -> Iterator[DevCluster]:
    """A cluster of each test's own (of the test's `flavor`): every test reshards it."""
    directory = tmp_path_factory.mktemp(f"hop-cluster-{flavor}")
    with DevCluster(directory, flavor=flavor).running("-80,80-") as dev:  # type: ignore[arg-type]
        yield dev


def sink_server(request: pytest.FixtureRequest, flavor: str) -> MariaDBFixture:
    """The session's server of `flavor`, for the Version Stream."""
    server: MariaDBFixture = request.getfixturevalue(f"{flavor}_server")
    return server


def other(flavor: str) -> str:
    return "mariadb" if flavor == "mysql" else "mysql"


def stream_job(
    cluster: DevCluster, server: MariaDBFixture, workdir: Path, database: str, **kw: object
) -> StreamJob:
    account = (server.admin.username, server.admin.password)
    sink = (server.host, server.port)
    return job_from_now(cluster, workdir, sink, account, database, secret="hop-versionstream", **kw)


# Filtered replication runs a few seconds before the cut-over, as it would in production: the
# destinations then hold copies of transactions the stream already delivered from the sources.
OVERLAP = ReshardOptions(min_replicate_seconds=5)


def assert_clean(
    reports: dict[str, dict[str, object]], committed_at_least: int, progress: bool = True
) -> None:
    """Nothing lost, no duplicate delivered, hop duplicates dropped; with `progress`, every
    CDCv2 progress statement true (see `updatestream verify`)."""
    for sink, report in reports.items():
        assert report["lost"] == 0, (sink, report)
        assert report["duplicates_delivered"] == 0, (sink, report)
        if progress:
            assert report.get("progress_violations", 0) == 0, (sink, report)
        assert not report.get("stale_keys"), (sink, report)  # memcached
        assert report["committed"] >= committed_at_least, (sink, report)  # type: ignore[operator]
        dropped = report["duplicates_dropped_by_cause"]
        assert isinstance(dropped, dict) and dropped.get("hop", 0) > 0, (sink, report)


@pytest.mark.parametrize("flavor", ["mariadb"])  # MySQL: the demo, docs/testing.md
def test_live_split_then_merge_hops_in_the_query_without_loss_or_duplicates(
    cluster: DevCluster,
    request: pytest.FixtureRequest,
    flavor: str,
    memcached: MemcachedServer,
    tmp_path: Path,
) -> None:
    memcached.flush()
    job = stream_job(
        cluster, sink_server(request, flavor), tmp_path, "us_hop_live", memcached=memcached.address
    )
    ledger = tmp_path / "ledger.jsonl"
    traffic = traffic_generator(cluster, ledger, TrafficOptions(rate=500, seed=11))
    job.start()
    try:
        job.wait_first_batch()
        traffic.start()
        try:
            time.sleep(5)
            split_at = reshard(cluster, "-80", "-40,40-80", OVERLAP)
            first = job.wait_for("the split's hop", lambda s: len(completed_hops(s)) == 1)
            cluster.retire(["-80"])
            time.sleep(3)
            merge_at = reshard(cluster, "-40,40-80", "-80", OVERLAP)
            second = job.wait_for("the merge's hop", lambda s: len(completed_hops(s)) == 2)
            time.sleep(3)
        finally:
            stats = traffic.stop()
        final = job.wait_caught_up(["-80", "80-"])
    finally:
        job.stop()

    split, merge = completed_hops(second)
    assert (split["from"], split["to"]) == (["-80", "80-"], ["-40", "40-80", "80-"])
    assert split["servingChangedAt"] == pytest.approx(split_at, abs=0.01)
    assert (merge["from"], merge["to"]) == (["-40", "40-80", "80-"], ["-80", "80-"])
    assert merge["servingChangedAt"] == pytest.approx(merge_at, abs=0.01)
    assert split["duplicatesDropped"] > 0 and merge["duplicatesDropped"] > 0, (split, merge)
    assert first["shardMap"] == "-40,40-80,80-" and final["shardMap"] == "-80,80-"
    assert set(final["shards"]) >= {"-40", "40-80", "-80", "80-"}
    assert final["duplicates"]["hop"] == split["duplicatesDropped"] + merge["duplicatesDropped"]
    assert_clean(job.verify(ledger), committed_at_least=stats.rows // 2)
    assert job.sink_status("memcached")["duplicatesDelivered"] == 0


@pytest.mark.parametrize("flavor", ["mysql"])  # one engine: docs/testing.md
def test_a_job_killed_after_writing_the_hop_batch_replays_the_hop_from_its_checkpoint(
    cluster: DevCluster,
    request: pytest.FixtureRequest,
    flavor: str,
    memcached: MemcachedServer,
    tmp_path: Path,
) -> None:
    """Also a key range that is not shard-aligned: 40-c0 reads -80 and 80-, then -80, 80-c0."""
    memcached.flush()
    server = sink_server(request, other(flavor))
    job = stream_job(
        cluster, server, tmp_path, "us_hop_kill", key_range="40-c0",
        memcached=memcached.address,
    )  # fmt: skip
    ledger = tmp_path / "ledger.jsonl"
    traffic = traffic_generator(cluster, ledger, TrafficOptions(rate=300, seed=12))
    job.start(env={FAULT_EXIT_AFTER_HOP_WRITE: "1"})
    try:
        job.wait_first_batch()
        traffic.start()
        try:
            time.sleep(3)
            reshard(cluster, "80-", "80-c0,c0-", OVERLAP)
            assert job.wait_exit() == 137, job.log_tail()
            assert "exiting after the sinks wrote hop batch" in job.logs[-1].read_text()
            crashed = json.loads(job.status.read_text())
            job.start()  # same checkpoint, no fault: the hop batch is replayed
            job.wait_for("the replayed hop", lambda s: len(completed_hops(s)) == 1)
            time.sleep(3)
        finally:
            stats = traffic.stop()
        final = job.wait_caught_up(["-80", "80-c0"])
    finally:
        job.stop()

    assert crashed["hops"] == []  # the hop batch was written, but its batch never finished
    (hop,) = completed_hops(final)
    assert (hop["from"], hop["to"]) == (["-80", "80-"], ["-80", "80-c0"])
    assert "c0-" not in final["shards"]  # outside the key range: never read
    assert hop["duplicatesDropped"] > 0
    versionstream = next(v for k, v in final["sinks"].items() if k.startswith("versionstream("))
    assert versionstream["skipped"] > 0  # the replayed hop batch reached the sink again
    # 40-c0 holds about half of the keyspace ids: the ledger rows the stream must deliver.
    assert_clean(job.verify(ledger), committed_at_least=stats.rows // 4)
    assert job.sink_status("memcached")["duplicatesDelivered"] == 0


def stopped_then_resharded(
    cluster: DevCluster,
    job: StreamJob,
    ledger: Path,
    options: ReshardOptions,
    retire: bool,
    sources: str = "-80",
    targets: str = "-40,40-80",
) -> TrafficGenerator:
    """Run the job, stop it under traffic, reshard `sources` to `targets` (a split of -80 by
    default) while it is down, and retire the sources if asked."""
    traffic = traffic_generator(cluster, ledger, TrafficOptions(rate=300, seed=13))
    job.start()
    try:
        job.wait_first_batch()
        traffic.start()
        time.sleep(3)
    finally:
        job.stop()
    time.sleep(3)  # changes the stopped stream has not read
    reshard(cluster, sources, targets, options)
    if retire:
        cluster.retire(sources.split(","))
    return traffic


class _Replicating(QuietReporter):
    """Says when the reshard's filtered replication began (the copy is done)."""

    def __init__(self) -> None:
        self.began = threading.Event()

    def phase(self, name: str, detail: str = "") -> None:
        if name == "replicate":
            self.began.set()


def stopped_while_replicating(
    cluster: DevCluster,
    job: StreamJob,
    ledger: Path,
    sources: str = "-80",
    targets: str = "-40,40-80",
) -> TrafficGenerator:
    """Run the job under traffic, reshard `sources` into `targets`, stop the job while
    filtered replication copies changes it already delivered, then switch and retire the
    sources while it is down: the destinations' binlogs hold copies from before the stopped
    stream's position, as a Vitess Reshard's do when a stream stops after its copy phase."""
    traffic = traffic_generator(cluster, ledger, TrafficOptions(rate=300, seed=13))
    reporter, failed = _Replicating(), []
    # the cut-over waits long enough for the job to stop first
    options = ReshardOptions(min_replicate_seconds=25)
    workflow = ReshardWorkflow(cluster, plan_reshard(cluster, sources, targets), options, reporter)

    def run() -> None:
        try:
            workflow.run()
        except Exception as exc:  # raised again in the test's thread
            failed.append(exc)

    job.start()
    resharding = threading.Thread(target=run, name="reshard", daemon=True)
    try:
        job.wait_first_batch()
        traffic.start()
        time.sleep(2)
        resharding.start()
        assert reporter.began.wait(300), "the reshard's copy did not finish"
        # copies of changes the job reads from the sources too: the job must get past the
        # copy's start before it stops, however loaded the machine
        job.wait_delivered(sources.split(","))
        time.sleep(3)
    finally:
        job.stop()
    assert workflow.state.get("phase") == "replicate", workflow.state.get("phase")
    resharding.join(600)
    assert not resharding.is_alive() and not failed, failed
    cluster.retire(sources.split(","))
    return traffic


def resume_and_verify(
    job: StreamJob,
    traffic: TrafficGenerator,
    ledger: Path,
    before: list[str] | None = None,
    after: list[str] | None = None,
    progress: bool = True,
    ledger_times: bool = True,
) -> None:
    """Restart the job from its checkpoint (its offsets still name the sources), let it hop,
    and check the sinks: nothing lost, no duplicate and, with `progress`, CDCv2 progress
    statements that hold (no change written after its time was declared complete: `late` 0;
    with `ledger_times` also not after its commit second in the ledger was)."""
    before, after = before or ["-80", "80-"], after or ["-40", "40-80", "80-"]
    job.start()
    try:
        job.wait_for("the hop", lambda s: len(completed_hops(s)) == 1)
        time.sleep(2)
        stats = traffic.stop()
        final = job.wait_caught_up(after)
    finally:
        traffic.stop()
        job.stop()
    (hop,) = completed_hops(final)
    assert (hop["from"], hop["to"]) == (before, after)
    assert hop["duplicatesDropped"] > 0
    if progress:
        cdcv2 = next(v for k, v in final["sinks"].items() if k.startswith("cdcv2("))
        assert cdcv2["late"] == 0, cdcv2
    reports = job.verify(ledger)
    assert_clean(reports, committed_at_least=stats.rows // 2, progress=progress and ledger_times)


def test_a_stream_stopped_before_a_split_resumes_through_the_old_shard_still_running(
    cluster: DevCluster, mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    job = stream_job(cluster, mariadb_server, tmp_path, "us_hop_stopped")
    ledger = tmp_path / "ledger.jsonl"
    traffic = stopped_then_resharded(cluster, job, ledger, OVERLAP, retire=False)
    # The destinations' binlogs start at the copy snapshot, after the stream's position on -80:
    # the stream reads -80 up to its final position before it hops, then reads the
    # destinations from just before the cut-over: their copies from there on are dropped.
    # While the hop waits, -80's heartbeats say no later than the cut-over, so CDCv2 declares
    # no second complete whose writes are on the destinations, not read yet.
    resume_and_verify(job, traffic, ledger)
    # the source's planner runs in a Python process of Spark's: its warnings are in the trace
    assert "hop deferred" in job.trace.read_text()


@pytest.mark.parametrize("flavor", ["mysql"])  # one engine: docs/testing.md
def test_a_stream_stopped_before_a_split_resumes_after_the_old_shard_was_retired(
    cluster: DevCluster, request: pytest.FixtureRequest, flavor: str, tmp_path: Path
) -> None:
    job = stream_job(cluster, sink_server(request, flavor), tmp_path, "us_hop_retired")
    ledger = tmp_path / "ledger.jsonl"
    traffic = stopped_while_replicating(cluster, job, ledger)
    # A batch in flight at the stop is replayed from the retired source's copies, each at its
    # group's source time (docs/sinks.md): CDCv2 holds it true, the ledger's seconds may not.
    resume_and_verify(job, traffic, ledger, ledger_times=False)


def test_a_gap_only_a_retired_shard_held_stops_the_stream_with_a_typed_error(
    cluster: DevCluster, mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    job = stream_job(cluster, mariadb_server, tmp_path, "us_hop_gap")
    ledger = tmp_path / "ledger.jsonl"
    traffic = stopped_then_resharded(cluster, job, ledger, OVERLAP, retire=True)
    traffic.stop()
    job.start()
    assert job.wait_exit() == 1, job.log_tail()
    error = job.logs[-1].read_text()
    assert "error: cannot hop Keyspace commerce: shard -80's changes after" in error
    assert "only in the binlog of retired shard -80" in error
    assert "Nothing was skipped" in error
    # The one line and where the trace is; Spark's and Python's stacks are in the trace file.
    lines = error.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: cannot hop"), error
    assert lines[1] == f"the job's full trace (Spark, Python) is in {job.trace}"
    assert "HopGapError" in job.trace.read_text()
    assert completed_hops(json.loads(job.status.read_text())) == []


def test_a_stream_stopped_before_a_merge_of_three_shards_resumes_after_they_were_retired(
    mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    """-40 is kept: in the hop batch it stays at the token it had when the stream stopped,
    while the merged destination is read from its replay window up to now. CDCv2 must not
    declare -40's downtime complete before the stream read it."""
    cluster = DevCluster(tmp_path / "cluster")
    try:
        cluster.up("-40,40-80,80-c0,c0-")
        job = stream_job(cluster, mariadb_server, tmp_path, "us_hop_merged")
        ledger = tmp_path / "ledger.jsonl"
        traffic = stopped_while_replicating(
            cluster, job, ledger, sources="40-80,80-c0,c0-", targets="40-"
        )
        resume_and_verify(
            job, traffic, ledger, before=["-40", "40-80", "80-c0", "c0-"], after=["-40", "40-"],
            ledger_times=False,
        )  # fmt: skip
    finally:
        cluster.down()
