"""The mirror sink in a running job (Spark local mode, real shards, a real mirror MariaDB):
live traffic mirrored and verified equal to the shards; the mirror stopped under traffic fails
the batch with a typed error, and the job restarted from its checkpoint catches up."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from updatestream_cli import manifests
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.verify.cli import verify
from updatestream_cli.verify.mirror_check import MirrorReport, MirrorTarget, verify_mirror
from updatestream_jobs.job import Job, typed_error
from updatestream_jobs.sink_retry import SinkRetry, SinkRetryPolicy
from updatestream_jobs.sinks.mirror_sink import MirrorSink
from updatestream_jobs.sinks.sink import SinkUnavailable

from harness.cluster_job import cluster_job, wait_caught_up
from tests.conftest import MariaDBFixture, MariaDBServerFactory
from tests.jobs.snapshot_support import wait_until_caught_up
from updatestream import spec

SECRET = "mirror-writer"


@pytest.fixture(scope="module")
def mirror_db(mariadb_server_factory: MariaDBServerFactory, cluster: DevCluster) -> MariaDBFixture:
    server = mariadb_server_factory.start("mirror-job")
    server.admin_secret(cluster.secrets_dir, SECRET)
    return server


def make_job(
    cluster: DevCluster,
    mirror: MariaDBFixture,
    database: str,
    work: Path,
    start: str = "earliest",
    write_from: str = "driver",
) -> Job:
    sink = manifests.database_sink(
        "mirror", mirror.host, mirror.port, database, SECRET, purgeEveryBatches=3,
        writeFrom=write_from,
    )  # fmt: skip
    stream = spec.parse_update_stream(
        manifests.update_stream("mirrored", "commerce", {"mode": start}, [sink])
    )
    return cluster_job(cluster, stream, work)


def traffic(cluster: DevCluster, work: Path, seconds: float, seed: int) -> None:
    generator = TrafficGenerator(
        cluster.manifest_path,
        cluster.secrets_dir,
        work / f"ledger-{seed}.jsonl",
        TrafficOptions(rate=150, duration=seconds, seed=seed),
    )
    generator.run()
    generator.close()


def target(mirror: MariaDBFixture, database: str) -> MirrorTarget:
    endpoint = spec.MySQLEndpoint(host=mirror.host, port=mirror.port)
    return MirrorTarget(endpoint=endpoint, secret=SECRET, database=database)


def mirror_report(cluster: DevCluster, mirror: MariaDBFixture, database: str) -> MirrorReport:
    """What `verify` finds comparing the mirror `database` on `mirror` with the shards."""
    return verify_mirror(cluster.keyspace(), target(mirror, database), cluster.secrets_dir, "-")


def run_with_traffic(
    spark: Any,
    job: Job,
    cluster: DevCluster,
    work: Path,
    seconds: float,
    seed: int,
    caught_up: Callable[[Job, DevCluster, Path], object] = wait_caught_up,
) -> None:
    """Run the job through `seconds` of traffic until `caught_up` says it is, then stop it."""
    job.start(spark)
    try:
        traffic(cluster, work, seconds, seed=seed)
        caught_up(job, cluster, work / "status.json")
    finally:
        job.stop()


def test_job_mirrors_live_traffic_and_verify_finds_it_equal(
    spark: Any, cluster: DevCluster, mirror_db: MariaDBFixture, tmp_path: Path
) -> None:
    job = make_job(cluster, mirror_db, "mirror_live", tmp_path)
    run_with_traffic(spark, job, cluster, tmp_path, 4.0, seed=5)
    report = mirror_report(cluster, mirror_db, "mirror_live")
    assert report.ok, report.examples
    assert report.source_rows > 100 and report.mirror_rows == report.source_rows
    state = json.loads((tmp_path / "status.json").read_text())
    assert state["sinks"][f"mirror({mirror_db.host}:{mirror_db.port}/mirror_live)"]["written"] > 0

    # the command line says the same; a half key range compares only its rows
    args = [
        "--sink", "mirror", "--keyspace-manifest", str(cluster.manifest_path),
        "--mysql", f"{mirror_db.host}:{mirror_db.port}", "--secret", SECRET,
        "--secrets-dir", str(cluster.secrets_dir), "--database", "mirror_live", "--json",
    ]  # fmt: skip
    result = CliRunner().invoke(verify, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["missing"] == 0
    half = CliRunner().invoke(verify, [*args, "--key-range", "-80"])
    assert half.exit_code == 1  # the mirror holds 80- rows too: extra for a -80 stream
    assert 0 < json.loads(half.output)["extra"] < report.mirror_rows

    # a row changed behind the stream's back is found, with its column
    with mirror_db.connect("mirror_live") as conn, conn.cursor() as cur:
        cur.execute("UPDATE users SET name = 'tampered' WHERE _us_deleted = 0 LIMIT 1")
        conn.commit()
    changed = CliRunner().invoke(verify, args)
    assert changed.exit_code == 1 and json.loads(changed.output)["different"] == 1


PIECES = {"inlineMaxBytes": "65536", "maxPartitionBytes": "65536"}


def test_spark_tasks_apply_a_backlog_cut_in_pieces_and_the_mirror_equals_the_shards(
    spark: Any, cluster: DevCluster, mirror_db: MariaDBFixture, tmp_path: Path
) -> None:
    """`writeFrom: executors`: the job reads the whole binlog from its start, cut in 64 KiB
    pieces (`maxPartitionBytes`; with `inlineMaxBytes` a range the tail holds too), so a batch
    has several tasks per shard and a key's changes can be in two of them; each task applies its
    own piece, and the mirror still equals the shards. The sink's counters (added up in the
    driver) agree with the status report."""
    sink = manifests.database_sink(
        "mirror", mirror_db.host, mirror_db.port, "mirror_tasks", SECRET, writeFrom="executors"
    )
    stream = spec.parse_update_stream(
        manifests.update_stream("mirrored", "commerce", {"mode": "earliest"}, [sink])
    )
    job = cluster_job(cluster, stream, tmp_path, source_options=PIECES)
    traffic(cluster, tmp_path, 2.0, seed=12)  # a backlog before the job starts
    run_with_traffic(spark, job, cluster, tmp_path, 3.0, seed=13)
    report = mirror_report(cluster, mirror_db, "mirror_tasks")
    assert report.ok, report.examples
    assert report.source_rows == report.mirror_rows > 100
    mirror = job.sinks[0]
    assert isinstance(mirror, MirrorSink) and mirror.most_tasks > len(
        cluster.keyspace().spec.shards
    )
    state = json.loads((tmp_path / "status.json").read_text())
    written = state["sinks"][mirror.name]["written"]
    labels = {"stream": "mirrored", "sink": mirror.name}
    applied = job.metrics.registry.get_sample_value(
        "updatestream_mirror_rows_applied_total", labels
    )
    assert written > 0 and applied == written


@pytest.mark.parametrize("write_from", ["driver", "executors"])
def test_a_mirror_down_past_the_retry_limit_fails_the_job_and_a_restart_catches_up(
    spark: Any, cluster: DevCluster, mirror_db: MariaDBFixture, tmp_path: Path, write_from: str
) -> None:
    """The job waits out a short outage (test_sink_outage.py); one longer than its limit (5 s
    here instead of 15 minutes) ends it with the typed error, and a restart catches up. With
    `writeFrom: executors` the error raised in a Spark task reaches the driver typed the same."""
    database = f"mirror_restart_{write_from}"
    job = make_job(cluster, mirror_db, database, tmp_path, write_from=write_from)
    job.delivery.retry = SinkRetry(SinkRetryPolicy(0.5, 1.0, 5.0), job.stopping)
    job.start(spark)
    try:
        traffic(cluster, tmp_path, 2.0, seed=6)
        wait_caught_up(job, cluster, tmp_path / "status.json")
        mirror_db.server.stop()
        traffic(cluster, tmp_path, 2.0, seed=7)
        deadline = time.monotonic() + 120
        while job.query.isActive:
            assert time.monotonic() < deadline, "the query kept running without its mirror"
            time.sleep(1)
        error = typed_error(job.query.exception())
    finally:
        job.stop(failed=True)
        if not mirror_db.server.is_running():
            mirror_db.server.start()
    assert isinstance(error, SinkUnavailable), error
    assert str(error).startswith(
        f"spec.sinks[0]: mirror {mirror_db.host}:{mirror_db.port} did not answer for"
    )
    assert mirror_db.admin.password not in str(error)
    assert json.loads((tmp_path / "status.json").read_text())["phase"] == "failed"

    again = make_job(cluster, mirror_db, database, tmp_path, write_from=write_from)
    again.start(spark)
    try:
        wait_caught_up(again, cluster, tmp_path / "status.json")
    finally:
        again.stop()
    report = mirror_report(cluster, mirror_db, database)
    assert report.ok, report.examples
    assert report.source_rows == report.mirror_rows > 0


def test_a_stream_started_from_a_snapshot_fills_the_mirror_then_follows_traffic(
    spark: Any, cluster: DevCluster, mirror_db: MariaDBFixture, tmp_path: Path
) -> None:
    """Rows that exist before the stream starts arrive as `snapshot` events (upserts); the
    changes committed while the snapshot is read are never overwritten by its older rows."""
    loader = TrafficGenerator(
        cluster.manifest_path,
        cluster.secrets_dir,
        tmp_path / "preload.jsonl",
        TrafficOptions(rate=0, seed=8),
    )
    loader.preload(3000)
    loader.close()
    job = make_job(cluster, mirror_db, "mirror_snapshot", tmp_path, start="snapshot")
    run_with_traffic(spark, job, cluster, tmp_path, 3.0, seed=9, caught_up=wait_until_caught_up)
    report = mirror_report(cluster, mirror_db, "mirror_snapshot")
    assert report.ok, report.examples
    assert report.source_rows == report.mirror_rows >= 3000
