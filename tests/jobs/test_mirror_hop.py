"""The mirror through a live split: a running job (Spark local mode) hops from -80 to
-40,40-80 under traffic, and the mirror ends equal to the serving shards, row by row."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.reshard import ReshardOptions
from updatestream_cli.devcluster.traffic import TrafficOptions
from updatestream_cli.verify.mirror_check import verify_mirror
from updatestream_jobs.job import Job

from harness.stream_job import completed_hops, read_status, reshard, sink_secret, traffic_generator
from tests.conftest import MariaDBServerFactory
from tests.jobs.test_mirror_job import SECRET, target
from updatestream import spec
from updatestream.contract.job_config import JobConfig


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("mirror-hop")).running("-80,80-") as dev:
        yield dev


def wait_for(job: Job, status: Path, what: str, done: Any, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        state = read_status(status)
        if state and done(state):
            return state
        assert job.query.isActive, job.query.exception()
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {state}"
        time.sleep(0.5)


def test_the_mirror_follows_a_live_split(
    spark: Any,
    cluster: DevCluster,
    mariadb_server_factory: MariaDBServerFactory,
    tmp_path: Path,
) -> None:
    mirror = mariadb_server_factory.start("mirror-hop")
    sink_secret(cluster, SECRET, mirror.admin.username, mirror.admin.password)
    stream = spec.parse_update_stream(
        {
            "apiVersion": "updatestream.io/v1alpha1",
            "kind": "UpdateStream",
            "metadata": {"name": "mirror-hop"},
            "spec": {
                "keyspace": "commerce",
                "start": {"mode": "earliest"},
                "sinks": [
                    {
                        "type": "mirror",
                        "mysql": {"host": mirror.host, "port": mirror.port},
                        "database": "mirror_hop",
                        "credentialsSecret": {"name": SECRET},
                    }
                ],
            },
        }
    )
    status = tmp_path / "status.json"
    job = Job(
        JobConfig(
            stream=stream,
            keyspace=cluster.keyspace(),
            secrets_dir=cluster.secrets_dir,
            checkpoint=tmp_path / "checkpoint",
            trigger_seconds=1.0,
            status_file=status,
            keyspace_watch=str(cluster.manifest_path),
        )
    )
    registry: CollectorRegistry = job.metrics.registry
    traffic = traffic_generator(
        cluster, tmp_path / "ledger.jsonl", TrafficOptions(rate=300, seed=3)
    )
    job.start(spark)
    try:
        wait_for(job, status, "the first batch", lambda s: (s.get("batchId") or 0) >= 1)
        traffic.start()
        try:
            time.sleep(3)
            reshard(cluster, "-80", "-40,40-80", ReshardOptions(min_replicate_seconds=5))
            wait_for(job, status, "the hop", lambda s: len(completed_hops(s)) == 1)
            time.sleep(3)
        finally:
            traffic.stop()
        serving = ("-40", "40-80", "80-")
        final = {s: cluster.server(s).gtid_position() for s in serving}
        state = wait_for(
            job,
            status,
            "the destinations' last positions",
            lambda s: all(s["shards"].get(x, {}).get("position") == final[x] for x in serving),
        )
    finally:
        job.stop()
        traffic.close()

    (hop,) = completed_hops(state)
    assert hop["duplicatesDropped"] > 0  # the overlap's copies never reached the mirror
    report = verify_mirror(
        cluster.keyspace(), target(mirror, "mirror_hop"), cluster.secrets_dir, "-"
    )
    assert report.ok, report.examples
    assert report.source_rows == report.mirror_rows > 500
    labels = {"stream": "mirror-hop", "sink": f"mirror({mirror.host}:{mirror.port}/mirror_hop)"}
    applied = registry.get_sample_value("updatestream_mirror_rows_applied_total", labels)
    assert applied is not None and applied >= report.mirror_rows
