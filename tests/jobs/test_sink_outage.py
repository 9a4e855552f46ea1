"""A sink server that goes down under traffic and comes back: the job waits, nothing is lost.

Real components: a development cluster of two mariadbd shards under traffic with a ledger,
`updatestream run` (Spark local mode) into a Version Stream (spec.sinks[0]) and a mirror
(spec.sinks[1]) on a MariaDB server of their own, and CDCv2 files (spec.sinks[2]). That server
is stopped by its pid for OUTAGE_SECONDS and started again on the same port and data directory.
During the outage the job keeps running, its status report says phase `waiting` with the typed
error naming the Version Stream sink, and no Secret value; once the server is back the job
delivers again by itself, and `updatestream verify` finds nothing lost and no duplicate
delivered in the Version Stream and CDCv2 (against the ledger) and the mirror equal to the
shards.

The outage lasts 25 s, not the minute of a real incident: the job behaves the same at any length
below its 900 s limit, and its pause between attempts reaches its 15 s cap after 15 s, so 25 s
already covers the capped wait (a minute would add two more identical attempts).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.traffic import TrafficOptions
from updatestream_cli.manifests import update_stream
from updatestream_cli.verify.mirror_check import MirrorTarget, verify_mirror

from harness.stream_job import SinkServer, StreamJob, sink_secret, traffic_generator
from tests.conftest import MariaDBFixture, MariaDBServerFactory
from updatestream import spec

SECRET = "outage-sinks"
VS_DATABASE = "us_outage_vs"
MIRROR_DATABASE = "us_outage_mirror"
OUTAGE_SECONDS = 25.0


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A cluster of the test's own: the mirror must equal its shards, so no other test's rows."""
    with DevCluster(tmp_path_factory.mktemp("outage-cluster")).running("-80,80-") as dev:
        yield dev


@pytest.fixture
def sinks(mariadb_server_factory: MariaDBServerFactory) -> Iterator[MariaDBFixture]:
    """The Version Stream's and the mirror's server, the test's own: it is stopped in the test."""
    server = mariadb_server_factory.start("outage-sinks")
    try:
        yield server
    finally:
        server.server.stop()


def write_stream(job: StreamJob, mirror_database: str) -> None:
    """Version Stream, mirror (same server) and CDCv2, from the shards' current positions."""
    server = {"host": job.sink.host, "port": job.sink.port}
    secret = {"name": job.sink.secret}
    sinks: list[dict[str, Any]] = [
        {"type": "versionStream", "mysql": server, "database": job.sink.database,
         "credentialsSecret": secret},
        {"type": "mirror", "mysql": server, "database": mirror_database,
         "credentialsSecret": secret},
        {"type": "cdcv2", "path": str(job.cdc), "allowedLatenessSeconds": 1},
    ]  # fmt: skip
    serving = job.cluster.keyspace().spec.serving_shards
    start = {"mode": "gtid", "gtid": {s: job.cluster.server(s).gtid_position() for s in serving}}
    stream = update_stream(job.name, "commerce", start, sinks, [job.key_range])
    (job.workdir / "stream.yaml").write_text(yaml.safe_dump(stream))


def named_sink(message: str, address: str) -> bool:
    """Whether `message` starts with the typed error of sink 0 or 1 on `address`."""
    return any(
        message.startswith(f"spec.sinks[{index}]: {kind} {address} does not answer (")
        for index, kind in enumerate(("versionStream", "mirror"))
    )


def test_a_sink_server_down_under_traffic_is_waited_out_without_loss(
    cluster: DevCluster, sinks: MariaDBFixture, tmp_path: Path
) -> None:
    address = f"{sinks.host}:{sinks.port}"
    sink_secret(cluster, SECRET, sinks.admin.username, sinks.admin.password)
    job = StreamJob(cluster, tmp_path, SinkServer(sinks.host, sinks.port, SECRET, VS_DATABASE))
    job.name = "outage-feed"
    write_stream(job, MIRROR_DATABASE)
    ledger = tmp_path / "ledger.jsonl"
    traffic = traffic_generator(cluster, ledger, TrafficOptions(rate=200, seed=61))
    job.start()
    try:
        job.wait_first_batch()
        traffic.start()
        try:
            job.wait_for("batches under traffic", lambda s: s.get("batches", 0) >= 3)
            sinks.server.stop()  # SIGTERM to its pid, waits until it is gone
            down_at = time.monotonic()
            waiting = job.wait_for("the wait", lambda s: s.get("phase") == "waiting", 120)
            error = waiting["error"]
            # the Version Stream (spec.sinks[0]) meets the outage first, unless the server went
            # away between its write and the mirror's
            assert named_sink(error, address), error
            assert "nothing is lost" in error and "check that the server runs" in error
            assert sinks.admin.password not in error and waiting["retryable"] is True
            stuck_at = waiting["batchId"]
            time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
            during = job.wait_for("still waiting", lambda s: s.get("phase") == "waiting")
            assert during["batchId"] == stuck_at  # nothing acknowledged while the sink is down
            sinks.server.start()  # same port, same data directory
            job.wait_for(
                "delivery again",
                lambda s: (
                    s.get("phase") == "running"
                    and s.get("error") is None
                    and (s.get("batchId") or 0) > stuck_at
                ),
                180,
            )
            time.sleep(3)
        finally:
            stats = traffic.stop()
        job.wait_caught_up(["-80", "80-"])
    finally:
        job.stop()
    assert job.launches == 1  # the job itself rode the outage out: never relaunched
    for sink, report in job.verify(ledger).items():
        assert report["lost"] == 0, (sink, report)
        assert report["duplicates_delivered"] == 0, (sink, report)
        assert report["committed"] >= stats.rows // 2, (sink, report)
    target = MirrorTarget(
        endpoint=spec.MySQLEndpoint(host=sinks.host, port=sinks.port),
        secret=SECRET,
        database=MIRROR_DATABASE,
    )
    mirror = verify_mirror(cluster.keyspace(), target, cluster.secrets_dir, "-")
    assert mirror.ok, mirror.examples
    assert mirror.source_rows == mirror.mirror_rows > 0
