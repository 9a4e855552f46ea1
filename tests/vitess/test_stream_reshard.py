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

import itertools
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.gateway import VtgateGateway
from updatestream_cli.vitess.reshard import VitessReshard, plan_reshard

from harness.stream_job import SinkServer, StreamJob, completed_hops, sink_secret
from tests.conftest import MariaDBFixture
from tests.vitess.conftest import reachable_dir

RATE = 120  # row changes per second through vtgate
_workflows = itertools.count(1)


def _empty_keyspace(cluster: VitessCluster) -> None:
    """Delete the rows other modules left, on each serving shard's primary, before the stream
    starts: it takes no snapshot, so the mirror would lack them."""
    for shard in cluster.serving_shards_recorded():
        tablet = cluster.tablet(shard)
        with tablet.dba_connect(cluster.env(), cluster.keyspace) as conn, conn.cursor() as cur:
            for table in ("orders", "events", "users"):
                cur.execute(f"DELETE FROM `{table}`")


def _ledger_keys(ledger: Path) -> set[tuple[str, str]]:
    if not ledger.exists():
        return set()
    with ledger.open(encoding="utf-8") as lines:
        return {(entry["table"], entry["pk"]) for entry in map(json.loads, lines)}


@dataclass
class Run:
    cluster: VitessCluster
    job: StreamJob
    ledger: Path
    workdir: Path
    traffic: TrafficGenerator | None = None
    hopped_at: float = 0.0  # servingChangedAt of the last hop seen
    pending: VitessReshard | None = None  # the case's last Reshard

    def start_traffic(self, seed: int) -> None:
        gateway = VtgateGateway(
            "127.0.0.1", self.cluster.vtgate.mysql_port, self.cluster.manifest_path,
            self.cluster.secrets_dir,
        )  # fmt: skip
        options = TrafficOptions(rate=RATE, seed=seed)
        self.traffic = TrafficGenerator(
            self.cluster.manifest_path, self.cluster.secrets_dir, self.ledger, options,
            gateway=gateway,
        )  # fmt: skip
        # only the rows of this module's ledger: the stream started with no snapshot, so a row
        # another module left is not in its sinks (a CDCv2 retraction of it would count -1)
        known = _ledger_keys(self.ledger)
        self.traffic.adopt_existing_rows(lambda table, pk: (table, pk) in known)
        self.traffic.start()

    def stop_traffic(self) -> int:
        assert self.traffic is not None
        rows = self.traffic.stop().rows
        self.traffic = None
        return rows

    def reshard(self, sources: str, targets: str) -> VitessReshard:
        """A Reshard created and caught up; switching and completing are the case's."""
        plan = plan_reshard(
            self.cluster.serving_shards_recorded(), sources, targets, f"us_case_{next(_workflows)}"
        )
        runner = VitessReshard(self.cluster, plan, max_lag_seconds=5.0)
        self.pending = runner
        runner.create()
        runner.wait_caught_up()
        time.sleep(2)  # VReplication keeps copying under traffic for a while, as it would
        return runner

    def wait_hop(self, timeout: float = 600) -> dict[str, Any]:
        """The job's status once it completed a hop at a serving map change after the last
        one seen (a restarted job's status also lists the hop of its checkpoint)."""
        after = self.hopped_at

        def hopped(status: dict[str, Any]) -> bool:
            return any(h["servingChangedAt"] > after for h in completed_hops(status))

        status = self.job.wait_for(f"a hop after {after}", hopped, timeout=timeout)
        self.hopped_at = max(h["servingChangedAt"] for h in completed_hops(status))
        return status

    def restore(self) -> None:
        """Leave the session cluster serving `-80,80-` even after a case failed midway: its
        last Reshard completed or cancelled, and a split `-80` merged back."""
        pending, self.pending = self.pending, None
        if pending is not None and pending.exists():
            if pending.writes_switched():
                pending.complete()
            else:
                pending.cancel()
        left = [s for s in self.cluster.serving_shards_recorded() if s != "80-"]
        if left != ["-80"]:
            self.reshard(",".join(left), "-80").run()
            self.pending = None

    def check(self, rows_at_least: int) -> dict[str, dict[str, Any]]:
        """Traffic stopped: the job catches up, then every sink is verified."""
        self.job.wait_caught_up(self.cluster.serving_shards_recorded(), timeout=600)
        reports = self.job.verify(self.ledger)
        for sink, report in reports.items():
            assert report["lost"] == 0, (sink, report)
            assert report["duplicates_delivered"] == 0, (sink, report)
            assert report.get("progress_violations", 0) == 0, (sink, report)
            assert report.get("stale_keys", 0) == 0, (sink, report)
            assert report["committed"] >= rows_at_least, (sink, report)
        mirror = self.job.verify_mirror()
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
    secret = sink_secret(cluster, "vitess-stream-sink", *account)
    job = StreamJob(
        cluster,
        workdir,
        SinkServer(mariadb_server.host, mariadb_server.port, secret, "us_vitess_versions"),
        name="vitess-feed",
        memcached=memcached.address,
        mirror_database="us_vitess_mirror",
        position=cluster.gtid_executed,
    )
    _empty_keyspace(cluster)
    job.write_stream_from_now()
    run = Run(cluster, job, workdir / "ledger.jsonl", workdir)
    job.start()
    try:
        job.wait_first_batch()
        yield run
    finally:
        if run.traffic is not None:
            run.stop_traffic()
        job.stop()
        run.restore()
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
