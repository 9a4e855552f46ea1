"""The mirror through a live split: a running job (Spark local mode) hops from -80 to
-40,40-80 under traffic, and the mirror ends equal to the serving shards, row by row (MariaDB
shards into a MySQL 8 mirror, and MySQL 8 shards into a MariaDB mirror)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from updatestream_cli import manifests
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import FLAVORS
from updatestream_cli.devcluster.reshard import ReshardOptions
from updatestream_cli.devcluster.traffic import TrafficOptions
from updatestream_jobs.job import Job

from harness.cluster_job import cluster_job
from harness.stream_job import completed_hops, read_status, reshard, sink_secret, traffic_generator
from tests.conftest import ServerFactory
from tests.jobs.test_mirror_job import SECRET, mirror_report
from updatestream import spec


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory, flavor: str) -> Iterator[DevCluster]:
    directory = tmp_path_factory.mktemp(f"mirror-hop-{flavor}")
    with DevCluster(directory, flavor=flavor).running("-80,80-") as dev:  # type: ignore[arg-type]
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


@pytest.mark.parametrize("flavor", FLAVORS)
def test_the_mirror_follows_a_live_split(
    spark: Any,
    cluster: DevCluster,
    request: pytest.FixtureRequest,
    flavor: str,
    tmp_path: Path,
) -> None:
    """MariaDB shards into a mirror on MySQL 8, and MySQL 8 shards into a mirror on MariaDB:
    the mirror's server is chosen apart from the shards'."""
    mirror_flavor = "mariadb" if flavor == "mysql" else "mysql"
    factory: ServerFactory = request.getfixturevalue(f"{mirror_flavor}_server_factory")
    mirror = factory.start(f"mirror-hop-{mirror_flavor}")
    sink_secret(cluster, SECRET, mirror.admin.username, mirror.admin.password)
    sink = manifests.database_sink("mirror", mirror.host, mirror.port, "mirror_hop", SECRET)
    stream = spec.parse_update_stream(
        manifests.update_stream("mirror-hop", "commerce", {"mode": "earliest"}, [sink])
    )
    status = tmp_path / "status.json"
    job = cluster_job(cluster, stream, tmp_path, keyspace_watch=str(cluster.manifest_path))
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
    report = mirror_report(cluster, mirror, "mirror_hop")
    assert report.ok, report.examples
    assert report.source_rows == report.mirror_rows > 500
    labels = {"stream": "mirror-hop", "sink": f"mirror({mirror.host}:{mirror.port}/mirror_hop)"}
    applied = registry.get_sample_value("updatestream_mirror_rows_applied_total", labels)
    assert applied is not None and applied >= report.mirror_rows
