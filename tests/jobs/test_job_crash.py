"""A crash between the sink write and the checkpoint commit delivers nothing twice.

`updatestream run` runs as a subprocess against its own two-shard cluster (MariaDB, then MySQL 8)
with traffic, writing to the Version Stream sink (MariaDB), the CDCv2 sink and the memcached sink
(its fast lane on, as by default). The fault-injection variable makes it exit
with status 137 right after the sinks wrote batch 1, before Spark commits that batch. Restarted
from the same checkpoint (without the variable, `--available-now`), Spark replays batch 1 and
then reads the rest; `updatestream verify` must find nothing lost and no duplicate delivered in
any sink, and no stale cache entry. The first launch also starts in the operator's `resume`
mode with a dedup filter and a hop start, as a relaunch after a hop does.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli import manifests
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_jobs.job import FAULT_EXIT_AFTER_SINK_WRITE

from harness.stream_job import CLI, read_status
from harness.verify_command import verify_sink
from tests.conftest import MariaDBFixture
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import parse_position
from updatestream.core.token import EventToken

SHARDS = ("-80", "80-")
DATABASE = "us_crash"
# MySQL shards: the kill after a hop batch in test_hop.py (docs/testing.md)
pytestmark = pytest.mark.parametrize("flavor", ["mariadb"], indirect=True, scope="module")


def verify(sink: str, ledger: Path, *options: str) -> dict[str, Any]:
    return verify_sink(ledger, sink, *options, timeout=120)


def test_a_crash_after_the_sink_write_replays_the_batch_without_duplicates(
    cluster: DevCluster, mariadb_server: MariaDBFixture, memcached: MemcachedServer, tmp_path: Path
) -> None:
    memcached.flush()
    secret = mariadb_server.admin_secret(cluster.secrets_dir, "crash-versionstream")
    first = {s: cluster.server(s).gtid_position() for s in SHARDS}
    token = EventToken(int(time.time()), "-80", parse_position(first["-80"])).to_json()
    cdc = tmp_path / "cdc"
    stream = manifests.update_stream(
        "crash-feed",
        "commerce",
        start={"mode": "resume", "tokens": {"-80": token}, "gtid": {"80-": first["80-"]}},
        sinks=[
            manifests.database_sink(
                "versionStream", mariadb_server.host, mariadb_server.port, DATABASE, secret
            ),
            {"type": "cdcv2", "path": str(cdc), "allowedLatenessSeconds": 1},
            {"type": "memcached", "servers": [memcached.address]},
        ],
    )
    stream_file = tmp_path / "stream.yaml"
    stream_file.write_text(yaml.safe_dump(stream))
    status = tmp_path / "status.json"
    dedup = DedupFilter({"-": parse_position("9-9-50")}).to_json()  # no copied rows: drops none
    args = [
        CLI, "run",
        "--stream", str(stream_file),
        "--keyspace", str(cluster.manifest_path),
        "--secrets-dir", str(cluster.secrets_dir),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--master", "local[2]",
        "--trigger-seconds", "1",
        "--status-file", str(status),
        "--dedup", json.dumps(dedup),
        "--hop-started-at", str(time.time() - 5),
        # No idle heartbeat batches: every batch holds changes, so batch 1 is not empty.
        "--source-option", "heartbeatIntervalSeconds=3600",
    ]  # fmt: skip
    env = {**os.environ, FAULT_EXIT_AFTER_SINK_WRITE: "1"}
    log = tmp_path / "first.log"
    ledger = tmp_path / "ledger.jsonl"
    with log.open("w") as out:
        job = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    traffic = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, ledger, TrafficOptions(rate=100, seed=7)
    )
    try:
        traffic.start()
        try:
            # Traffic runs on for 2 s after batch 0, so batch 1 holds changes.
            deadline = time.monotonic() + 240
            while read_status(status).get("batchId") != 0:
                assert job.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the job never finished batch 0"
                time.sleep(0.5)
            time.sleep(2)
        finally:
            traffic.stop()
        assert job.wait(timeout=240) == 137, log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    crashed = read_status(status)
    assert crashed["batchId"] == 0  # batch 1 was written, but neither finished nor committed

    restarted = subprocess.run(
        [*args, "--available-now"], capture_output=True, text=True, timeout=300
    )
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    final = read_status(status)
    last = {s: cluster.server(s).gtid_position() for s in SHARDS}
    assert {s: final["shards"][s]["position"] for s in SHARDS} == last
    assert final["duplicates"] == {"hop": 0, "reverse": 0, "straddle": 0, "unknown": 0}
    # The replayed batch 1 really reached the sinks again: the Version Stream held its rows.
    sinks = final["sinks"]
    versionstream = next(v for k, v in sinks.items() if k.startswith("versionstream("))
    assert versionstream["skipped"] > 0, json.dumps([final, crashed])
    assert versionstream["duplicatesDelivered"] == 0
    cache = next(v for k, v in sinks.items() if k.startswith("memcached("))
    assert cache["duplicatesDelivered"] == 0 and cache["skipped"] > 0, cache

    reports = {
        "versionstream": verify(
            "versionstream", ledger,
            "--mysql", f"{mariadb_server.host}:{mariadb_server.port}",
            "--secrets-dir", str(cluster.secrets_dir),
            "--secret", "crash-versionstream",
            "--database", DATABASE,
            "--status-file", str(status),
        ),
        "cdcv2": verify("cdcv2", ledger, "--path", str(cdc), "--status-file", str(status)),
        "memcached": verify(
            "memcached", ledger,
            "--servers", memcached.address,
            "--keyspace-manifest", str(cluster.manifest_path),
            "--secrets-dir", str(cluster.secrets_dir),
        ),
    }  # fmt: skip
    for sink, report in reports.items():
        assert report["lost"] == 0, (sink, report)
        assert report["duplicates_delivered"] == 0, (sink, report)
        assert not report.get("stale_keys"), (sink, report)
    assert reports["memcached"]["delivered"] > 50  # entries exist: they were invalidated
    assert sum(1 for _ in ledger.open()) > 100
