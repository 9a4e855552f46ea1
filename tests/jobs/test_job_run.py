"""The streaming job end to end (Spark local mode, real shards): console sink output against the
traffic ledger, hop dedup, the status file, Prometheus metrics, and the CLI entry point."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import read_ledger
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_jobs import main as job_main

from harness.cluster_job import cluster_job, wait_caught_up
from updatestream import spec
from updatestream.binlog.vreplication import binlog_source
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import parse_position

SHARDS = ("-80", "80-")


def positions(cluster: DevCluster) -> dict[str, str]:
    return {shard: cluster.server(shard).gtid_position() for shard in SHARDS}


def stream_spec(start: dict[str, Any], console: Path) -> dict[str, Any]:
    return {
        "apiVersion": "updatestream.io/v1alpha1",
        "kind": "UpdateStream",
        "metadata": {"name": "orders-feed"},
        "spec": {
            "keyspace": "commerce",
            "keyRanges": ["-"],
            "start": start,
            "sinks": [{"type": "console", "path": str(console)}],
        },
    }


def copied_transaction(cluster: DevCluster, user_id: int, source_pos: str) -> None:
    """A transaction as filtered replication writes it: the rows, then its `_vt.vreplication`
    position moves (the workflow's row exists already)."""
    source = binlog_source("commerce", "-", "-80")
    with cluster.connect("-80", "admin", "commerce") as conn, conn.cursor() as cur:
        cur.execute(
            "INSERT IGNORE INTO _vt.vreplication (id, workflow, source, pos, state) "
            "VALUES (1, 'split', %s, 'MariaDB/', 'Running')",
            (source,),
        )
        cur.execute("BEGIN")
        cur.execute(
            "INSERT INTO users (id, name, created_at) VALUES (%s, 'copied', NOW(6))", (user_id,)
        )
        cur.execute(
            "UPDATE _vt.vreplication SET pos = %s, transaction_timestamp = UNIX_TIMESTAMP(), "
            "time_updated = UNIX_TIMESTAMP() WHERE id = 1",
            (f"MariaDB/{source_pos}",),
        )
        cur.execute("COMMIT")


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("updatestream_"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_job_delivers_the_ledger_with_progress_metrics_and_dedup(
    spark: Any, cluster: DevCluster, tmp_path: Path
) -> None:
    start = positions(cluster)
    copied_transaction(cluster, 1, "9-9-41")  # already delivered from the source: dropped
    copied_transaction(cluster, 2, "9-9-60")  # after the source's watermark: delivered
    console = tmp_path / "events.jsonl"
    status = tmp_path / "status.json"
    stream = spec.parse_update_stream(stream_spec({"mode": "gtid", "gtid": start}, console))
    job = cluster_job(
        cluster,
        stream,
        tmp_path,
        metrics_port=0,
        metrics_host="0.0.0.0",  # the cluster setting; scraped on loopback below
        dedup=DedupFilter({"-": parse_position("9-9-50")}),
        hop_started_at=time.time() - 30,
    )
    ledger_path = tmp_path / "ledger.jsonl"
    traffic = TrafficGenerator(
        cluster.manifest_path,
        cluster.secrets_dir,
        ledger_path,
        TrafficOptions(rate=100, duration=3.0, seed=21, large_tx_rows=150, large_tx_every=1.5),
    )
    listeners = len(spark.streams._jsqm.listListeners())
    job.start(spark)
    try:
        assert len(spark.streams._jsqm.listListeners()) == listeners + 1
        assert job.metrics_port is not None
        early = scrape(job.metrics_port)  # every series exists before the first batch
        traffic.run()
        traffic.close()
        final = positions(cluster)
        wait_caught_up(job, cluster, status)
        assert job.metrics_port is not None
        metrics = scrape(job.metrics_port)
    finally:
        job.stop()
    assert len(spark.streams._jsqm.listListeners()) == listeners  # its listener went with it

    lines = [json.loads(line) for line in console.read_text().splitlines()]
    changes = [line for line in lines if line["op"] != "heartbeat"]
    ledger = list(read_ledger(ledger_path))
    expected = Counter((e.table, e.pk, e.op, e.gtid, e.digest) for e in ledger)
    got = Counter(
        (c["table"], c["pk"], c["op"], c["gtid"],
         hashlib.sha256(c["after"].encode()).hexdigest() if c["after"] else None)
        for c in changes
        if c["source_shard"] is None
    )  # fmt: skip
    assert got == expected
    copied = [c for c in changes if c["source_shard"] is not None]
    assert [(c["pk"], c["source_gtid"]) for c in copied] == [('{"id":2}', "9-9-60")]
    assert all(line["stream"] == "orders-feed" for line in lines)

    labels = '{stream="orders-feed"}'
    assert early[f"updatestream_hop_duration_seconds_count{labels}"] == 0
    assert early['updatestream_duplicates_total{cause="hop",stream="orders-feed"}'] == 0
    phase = 'updatestream_job_phase{key_range="-",phase="%s",stream="orders-feed"}'
    assert early[phase % "hopping"] == 1 and early[phase % "running"] == 0
    assert metrics[phase % "running"] == 1 and metrics[phase % "hopping"] == 0
    sink = f"console({console})"
    delivered = f'updatestream_duplicates_delivered_total{{sink="{sink}",stream="orders-feed"}}'
    assert early[delivered] == 0 and metrics[delivered] == 0

    state = json.loads(status.read_text())
    assert state["stream"] == "orders-feed" and state["keyRange"] == "-"
    # the second copy covers 9-9-42..60 of its source (its pos before and after), across the
    # watermark 9-9-50: delivered, and counted as a straddle
    assert state["duplicates"] == {"hop": 1, "reverse": 0, "straddle": 1, "unknown": 0}
    assert state["phase"] == "stopped"
    # stop() may land between a sink write and the batch's status update: the counts cover
    # exactly the batches up to the last finished one.
    # Every change was delivered before stop(), so only heartbeats may follow that batch.
    finished = [line for line in lines if line["batch"] <= state["batchId"]]
    assert all(line["op"] == "heartbeat" for line in lines if line not in finished)
    assert state["sinks"][sink]["written"] == len(finished)
    for shard in SHARDS:
        assert state["shards"][shard]["lagSeconds"] == 0
        assert state["shards"][shard]["events"] == sum(1 for c in changes if c["shard"] == shard)
        assert state["shards"][shard]["token"]["pos"] == final[shard]
    assert metrics['updatestream_duplicates_total{cause="hop",stream="orders-feed"}'] == 1
    assert metrics['updatestream_duplicates_total{cause="unknown",stream="orders-feed"}'] == 0
    assert metrics['updatestream_duplicates_total{cause="straddle",stream="orders-feed"}'] == 1
    assert metrics[f"updatestream_hops_total{labels}"] == 1
    assert metrics[f"updatestream_hop_duration_seconds_count{labels}"] == 1
    assert metrics[f"updatestream_hop_duration_seconds_sum{labels}"] >= 30
    inserts = sum(
        value
        for name, value in metrics.items()
        if name.startswith("updatestream_events_total") and 'op="insert"' in name
    )
    assert inserts == sum(1 for c in changes if c["op"] == "insert")
    for shard in SHARDS:
        assert metrics[f'updatestream_lag_seconds{{shard="{shard}",stream="orders-feed"}}'] == 0


def test_cli_starts_without_spark() -> None:
    """`updatestream` loads `run` without importing pyspark (it is imported when run runs)."""
    code = (
        "import sys, updatestream_cli.main as cli; "
        "assert 'run' in cli.cli.commands; assert 'pyspark' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_entry_available_now_and_a_typed_error(
    spark: Any, cluster: DevCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    console = tmp_path / "events.jsonl"
    stream_file = tmp_path / "stream.yaml"
    stream_file.write_text(yaml.safe_dump(stream_spec({"mode": "earliest"}, console)))
    status = tmp_path / "status.json"
    args = [
        "--stream", str(stream_file),
        "--keyspace", str(cluster.manifest_path),
        "--secrets-dir", str(cluster.secrets_dir),
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--available-now",
        "--status-file", str(status),
    ]  # fmt: skip
    assert job_main.main(args) == 0
    now = positions(cluster)
    shards = json.loads(status.read_text())["shards"]
    assert {s: shards[s]["position"] for s in SHARDS} == now
    assert console.read_text().count('"op":"insert"') > 100
    assert "password" not in console.read_text()
    out = capsys.readouterr().out
    assert "-80:" in out and "80-:" in out

    ahead = {s: f"{n}-{n}-999999" for n, s in enumerate(SHARDS, start=1)}
    stream_file.write_text(yaml.safe_dump(stream_spec({"mode": "gtid", "gtid": ahead}, console)))
    args[args.index("--checkpoint") + 1] = str(tmp_path / "checkpoint-2")
    assert job_main.main(args) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: cannot start shard -80 (127.0.0.1:")
    assert "999999" in error and "another server history" in error
    assert cluster.credentials("reader").password not in error
