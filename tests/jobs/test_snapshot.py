"""Snapshot, then stream (Spark local, real shards): every existing row once as a `snapshot`
event, then every change, under live traffic that hits rows in chunks being read; the state the
events build equals the shards' rows, with no duplicate and no change older than its key's
snapshot row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

from tests.jobs.snapshot_support import (
    differences,
    read_console,
    shard_rows,
    snapshot_job,
    wait_for_snapshot,
    wait_until_caught_up,
)

PRELOAD = 200_000


def traffic(cluster: DevCluster, tmp_path: Path, seed: int, **options: Any) -> TrafficGenerator:
    gen = TrafficGenerator(
        cluster.manifest_path,
        cluster.secrets_dir,
        tmp_path / f"ledger-{seed}.jsonl",
        TrafficOptions(seed=seed, **options),
    )
    return gen


def test_snapshot_then_stream_under_traffic(
    spark: Any, cluster: DevCluster, tmp_path: Path
) -> None:
    loader = traffic(cluster, tmp_path, 1, rate=0)
    loader.preload(PRELOAD, batch=2000)
    live = traffic(cluster, tmp_path, 2, rate=300, duration=None, max_tx_rows=4)
    live.adopt_existing_rows()
    console = tmp_path / "events.jsonl"
    job = snapshot_job(cluster, tmp_path, console, options={"snapshotChunkRows": "10000"})
    live.start()
    job.start(spark)
    try:
        status = tmp_path / "status-snap.json"
        wait_for_snapshot(job, status, lambda s: s.get("finished"))
        stats = live.stop()
        live.close()
        loader.close()
        report = wait_until_caught_up(job, cluster, status)
    finally:
        job.stop()
    delivered = read_console(console)
    expected = shard_rows(cluster)
    assert len(expected) > PRELOAD * 0.9
    assert differences(expected, delivered.state) == []
    assert delivered.duplicates == 0
    assert max(delivered.snapshot_keys.values()) == 1
    assert delivered.backwards == []
    assert stats.transactions > 100 and stats.by_op["delete"] > 0
    snapshot = report["snapshot"]
    assert snapshot["finished"] and snapshot["chunksDone"] >= 20
    assert snapshot["rows"] == delivered.ops["snapshot"]
