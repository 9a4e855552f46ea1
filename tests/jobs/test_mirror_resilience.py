"""The mirror only ever moves forward, whatever the job meets: a snapshot, then the stream under
traffic; kill -9 mid-stream; a split whose hop batch the job dies after writing; a merge; and a
stop across a reshard. A sampler reads the mirror's order tokens all along: per key they never
go back. At the end the mirror equals the shards (`updatestream_cli.verify.mirror_check`)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import yaml
from updatestream_cli import manifests
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.reshard import ReshardOptions
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.verify.mirror_check import verify_mirror
from updatestream_jobs.job import FAULT_EXIT_AFTER_HOP_WRITE

from harness.stream_job import CLI, SinkServer, StreamJob, completed_hops, reshard, sink_secret
from tests.conftest import MariaDBFixture
from tests.jobs.test_mirror_job import SECRET, mirror_report, target
from updatestream.mirror.order import Order, Verdict, classify

DATABASE = "mirror_resilience"
REPAIR_DATABASE = "mirror_repair"  # the server is the session's: each test its own database
KEYS = {"users": "id", "orders": "order_id", "events": "event_key"}
OVERLAP = ReshardOptions(min_replicate_seconds=5)


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("mirror-resilience")).running("-80,80-") as dev:
        yield dev


class TokenSampler(threading.Thread):
    """Reads every mirror row's order token again and again; records any key whose token went
    back since the previous read."""

    def __init__(self, server: MariaDBFixture, database: str = DATABASE) -> None:
        super().__init__(name="token-sampler", daemon=True)
        self.server = server
        self.database = database
        self.last: dict[tuple[str, Any], Order] = {}
        self.backwards: list[str] = []
        self.samples = 0
        self.halt = threading.Event()

    def run(self) -> None:
        conn = pymysql.connect(
            host=self.server.host, port=self.server.port, user=self.server.admin.username,
            password=self.server.admin.password, autocommit=True,
        )  # fmt: skip
        try:
            while not self.halt.wait(0.5):
                self.sample(conn)
        finally:
            conn.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=30)

    def sample(self, conn: Any) -> None:
        for table, key in KEYS.items():
            with conn.cursor() as cur:
                try:
                    cur.execute(
                        f"SELECT `{key}`, _us_ts, _us_shard, _us_seq, _us_idx "
                        f"FROM `{self.database}`.`{table}`"
                    )
                except pymysql.err.ProgrammingError:
                    continue  # not created yet
                for value, ts, shard, seq, idx in cur.fetchall():
                    now = Order(int(ts), str(shard), int(seq), int(idx))
                    before = self.last.get((table, value))
                    if before is not None and classify(now, before) is Verdict.OLDER:
                        self.backwards.append(f"{table} {value}: {before} -> {now}")
                    self.last[(table, value)] = now
        self.samples += 1


def mirror_job(
    cluster: DevCluster, server: MariaDBFixture, workdir: Path, database: str = DATABASE
) -> StreamJob:
    """A job into a mirror database of its own on the (session-wide) server."""
    sink_secret(cluster, SECRET, server.admin.username, server.admin.password)
    job = StreamJob(cluster, workdir, SinkServer(server.host, server.port, SECRET, database))
    sink = manifests.database_sink("mirror", server.host, server.port, database, SECRET)
    stream = manifests.update_stream("mirror-resilience", "commerce", {"mode": "snapshot"}, [sink])
    (workdir / "stream.yaml").write_text(yaml.safe_dump(stream))
    job.extra = ["--source-option", "snapshotChunkRows=1500"]
    return job


def traffic_after_preload(
    cluster: DevCluster, workdir: Path, rows: int, seed: int, options: TrafficOptions
) -> TrafficGenerator:
    """Preload `rows` rows of the sample tables (with `seed`), then return traffic with
    `options` over them, not started, its ledger in `workdir`."""
    loader = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, workdir / "preload.jsonl",
        TrafficOptions(rate=0, seed=seed),
    )  # fmt: skip
    loader.preload(rows, batch=1000)
    loader.close()
    traffic = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, workdir / "ledger.jsonl", options
    )
    traffic.adopt_existing_rows()
    return traffic


def test_the_mirror_never_moves_backwards_through_kills_and_reshards(
    cluster: DevCluster, mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    traffic = traffic_after_preload(
        cluster, tmp_path, 8000, 41, TrafficOptions(rate=150, seed=42, max_tx_rows=3)
    )
    job = mirror_job(cluster, mariadb_server, tmp_path)
    sampler = TokenSampler(mariadb_server)
    job.start()
    try:
        job.wait_for("the first chunks", lambda s: (s.get("snapshot") or {}).get("chunksDone"))
        sampler.start()
        traffic.start()
        # kill -9 while the snapshot and the stream run
        time.sleep(2)
        assert job.process is not None
        job.process.kill()
        job.process.wait()
        job.start(env={FAULT_EXIT_AFTER_HOP_WRITE: "1"})
        job.wait_for("the snapshot", lambda s: (s.get("snapshot") or {}).get("finished"))
        # a split; the job dies right after the sinks wrote the hop batch, then replays it
        reshard(cluster, "-80", "-40,40-80", OVERLAP)
        assert job.wait_exit() == 137, job.log_tail()
        job.start()
        job.wait_for("the split's hop", lambda s: len(completed_hops(s)) >= 1)
        # a merge, hopped in the running query
        cluster.retire(["-80"])
        time.sleep(2)
        reshard(cluster, "-40,40-80", "-80", OVERLAP)
        job.wait_for("the merge's hop", lambda s: len(completed_hops(s)) >= 2)
        # stopped, then a split while it is down: it resumes across the reshard
        time.sleep(2)
        job.stop()
        time.sleep(2)
        reshard(cluster, "80-", "80-c0,c0-", OVERLAP)
        job.start()
        job.wait_for("the stopped job's hop", lambda s: len(completed_hops(s)) >= 1)
        time.sleep(2)
        traffic.stop()
        traffic.close()
        job.wait_caught_up(["-80", "80-c0", "c0-"])
    finally:
        job.stop()
        sampler.stop()
    assert sampler.samples > 20 and len(sampler.last) > 8000
    assert sampler.backwards == []
    report = mirror_report(cluster, mariadb_server, DATABASE)
    assert report.ok, report.examples
    assert report.source_rows == report.mirror_rows > 8000


def test_a_snapshot_on_demand_repairs_a_mirror_without_moving_rows_back(
    cluster: DevCluster, mariadb_server: MariaDBFixture, tmp_path: Path
) -> None:
    """Rows of the mirror damaged behind the stream's back (changed, deleted) come back equal to
    the shards after `updatestream snapshot-request`, while traffic runs."""
    traffic = traffic_after_preload(
        cluster, tmp_path, 4000, 51, TrafficOptions(rate=100, seed=52, max_tx_rows=2)
    )
    job = mirror_job(cluster, mariadb_server, tmp_path, REPAIR_DATABASE)
    requests = tmp_path / "requests.jsonl"
    job.extra = [*job.extra, "--snapshot-requests", str(requests)]
    sampler = TokenSampler(mariadb_server, REPAIR_DATABASE)
    job.start()
    try:
        job.wait_for("the snapshot", lambda s: (s.get("snapshot") or {}).get("finished"))
        sampler.start()
        traffic.start()
        time.sleep(2)
        conn = pymysql.connect(
            host=mariadb_server.host, port=mariadb_server.port,
            user=mariadb_server.admin.username, password=mariadb_server.admin.password,
            database=REPAIR_DATABASE, autocommit=True,
        )  # fmt: skip
        with conn.cursor() as cur:  # damage that no change event explains
            damaged = cur.execute("UPDATE users SET name = 'damaged' ORDER BY id LIMIT 40")
            damaged += cur.execute("DELETE FROM orders ORDER BY order_id LIMIT 30")
        conn.close()
        done = subprocess.run(
            [CLI, "snapshot-request", str(requests), "--table", "users", "--id", "fix-users"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert "fix-users" in done.stdout
        subprocess.run(
            [CLI, "snapshot-request", str(requests), "--table", "orders"], check=True, timeout=60
        )
        job.wait_for(
            "the repair",
            lambda s: (
                (s.get("snapshot") or {}).get("finished")
                and (s.get("snapshot") or {}).get("rangesTotal", 0) >= 3 * 2 + 2 * 2
            ),
        )
        time.sleep(2)
        traffic.stop()
        traffic.close()
        job.wait_caught_up(["-80", "80-"])
    finally:
        job.stop()
        sampler.stop()
    assert damaged == 70
    assert sampler.backwards == []
    mirror = target(mariadb_server, REPAIR_DATABASE)
    report = verify_mirror(cluster.keyspace(), mirror, cluster.secrets_dir, "-")
    assert report.ok, report.examples
