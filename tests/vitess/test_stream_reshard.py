"""A stream through real Vitess Reshards: a split of `-80` into `-40,40-80` and a merge back,
under traffic through vtgate, into every sink (memcached, Version Stream, CDCv2, a mirror), with
the job (a) running through SwitchTraffic, (b) stopped before SwitchTraffic and started after
it, (c) stopped, SwitchTraffic, then `Reshard complete` (the old shards' tablets and mysqld
gone), then started. After each case `updatestream verify` checks every sink against the
traffic's ledger (nothing lost, no duplicate delivered, every CDCv2 progress statement true)
and the mirror against the shards, column by column.

The job follows the cluster's Keyspace manifest, which the cluster tool rewrites from what vtctld
says (serving shards, primaries, VSchema); nothing about the reshard is told to the job. The
module leaves the session cluster serving `-80,80-`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.vitess.cluster import VitessCluster

from harness.stream_job import completed_hops
from harness.vitess_stream import ReshardRun, empty_keyspace, reachable_dir, vitess_stream_job
from tests.conftest import MariaDBFixture

RATE = 120  # row changes per second through vtgate


class Run(ReshardRun):
    def check(self, rows_at_least: int) -> dict[str, dict[str, Any]]:
        """Traffic stopped: the job catches up, then every sink is verified."""
        reports, mirror = self.verify()
        for sink, report in reports.items():
            assert report["lost"] == 0, (sink, report)
            assert report["duplicates_delivered"] == 0, (sink, report)
            assert report.get("progress_violations", 0) == 0, (sink, report)
            assert report.get("stale_keys", 0) == 0, (sink, report)
            assert report["committed"] >= rows_at_least, (sink, report)
        assert mirror["source_rows"] > 0, mirror
        assert (mirror["missing"], mirror["extra"], mirror["different"]) == (0, 0, 0), mirror
        return reports


@pytest.fixture(scope="module")
def run(
    vitess_cluster: VitessCluster, mariadb_server: MariaDBFixture, memcached: MemcachedServer
) -> Iterator[Run]:
    cluster = vitess_cluster
    workdir = reachable_dir("updatestream-vitess-stream-")
    account = (mariadb_server.admin.username, mariadb_server.admin.password)
    empty_keyspace(cluster)
    job = vitess_stream_job(
        cluster, workdir, (mariadb_server.host, mariadb_server.port), account, memcached.address
    )
    run = Run(cluster, job, workdir / "ledger.jsonl", RATE)
    job.start()
    try:
        job.wait_first_batch()
        yield run
    finally:
        try:
            if run.traffic is not None:
                run.stop_traffic()
            job.stop()
            run.restore()
        finally:  # a failed restore leaves the cluster to the next module's check, not files
            shutil.rmtree(workdir, ignore_errors=True)


def test_a_the_job_runs_through_switch_traffic(run: Run) -> None:
    run.start_traffic(seed=31)
    time.sleep(3)
    split = run.reshard("-80", "-40,40-80")
    split.switch_traffic()
    (hop,) = completed_hops(run.wait_hop())  # a new job: its first hop
    assert (hop["from"], hop["to"]) == (["-80", "80-"], ["-40", "40-80", "80-"])
    split.complete()
    merge = run.reshard("-40,40-80", "-80")
    merge.switch_traffic()
    run.wait_hop()
    merge.complete()
    time.sleep(3)
    rows = run.stop_traffic()
    reports = run.check(rows)
    # the sources still held Vitess's journal: the hops started at the switch, reading no copy
    assert reports["versionstream"]["duplicates_dropped_by_cause"].get("hop", 0) == 0


def test_b_the_job_stopped_before_switch_traffic_resumes_after_it(run: Run) -> None:
    run.start_traffic(seed=32)
    for sources, targets in (("-80", "-40,40-80"), ("-40,40-80", "-80")):
        runner = run.reshard(sources, targets)
        run.job.stop()
        runner.switch_traffic()
        time.sleep(2)
        run.job.start()  # from its checkpoint: the shards it stopped on still run
        run.wait_hop()
        runner.complete()
    time.sleep(3)
    run.check(run.stop_traffic())


def test_c_the_job_resumes_after_the_old_shards_are_gone(run: Run) -> None:
    run.start_traffic(seed=33)
    straddled = 0
    for sources, targets in (("-80", "-40,40-80"), ("-40,40-80", "-80")):
        runner = run.reshard(sources, targets)
        run.job.stop()
        runner.switch_traffic()
        runner.complete()  # the old shards' tablets and mysqld are gone
        assert not any(t.shard in sources.split(",") for t in run.cluster.tablets())
        run.job.start()
        status = run.wait_hop()
        straddled += status["duplicates"].get("straddle", 0)
    time.sleep(3)
    reports = run.check(run.stop_traffic())
    # copies were read again and dropped by the sources' watermarks, exactly
    assert reports["versionstream"]["duplicates_dropped_by_cause"].get("hop", 0) > 0
    assert straddled == 0
