"""Snapshot, then stream (Spark local, real shards): every existing row once as a `snapshot`
event, then every change, under live traffic that hits rows in chunks being read; the state the
events build equals the shards' rows, with no duplicate and no change older than its key's
snapshot row. The same stream invalidates a real memcached with the fast lane on (it holds back
what the snapshot holds back): no entry is stale and no duplicate is delivered there."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import FLAVORS
from updatestream_cli.devcluster.memcached_server import MemcachedServer
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


def stop_quietly(generator: TrafficGenerator) -> None:
    """Stop a traffic thread that may still run (its error, if any, is the test's to report)."""
    with contextlib.suppress(Exception):
        generator.stop()


def test_snapshot_then_stream_under_traffic(
    spark: Any, cluster: DevCluster, memcached: MemcachedServer, tmp_path: Path
) -> None:
    loader = traffic(cluster, tmp_path, 1, rate=0)
    loader.preload(PRELOAD, batch=2000)
    live = traffic(cluster, tmp_path, 2, rate=300, duration=None, max_tx_rows=4)
    live.adopt_existing_rows()
    console = tmp_path / "events.jsonl"
    memcached.flush()
    cache = {"type": "memcached", "servers": [memcached.address]}
    job = snapshot_job(
        cluster, tmp_path, console, options={"snapshotChunkRows": "10000"}, sinks=(cache,)
    )
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
        stop_quietly(live)  # a failed test leaves no writer behind for the module's next ones
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
    # the status report says where a batch's time went: the job's split and Spark's own
    last = report["lastBatch"]
    assert last["batchId"] is not None and last["totalSeconds"] > 0
    assert {"addBatch", "walCommit", "commitOffsets", "latestOffset"} <= set(last["sparkSeconds"])
    invalidated = next(v for k, v in report["sinks"].items() if k.startswith("memcached("))
    assert invalidated["duplicatesDelivered"] == 0, invalidated
    checked = verify_cache(cluster, memcached, tmp_path / "ledger-2.jsonl")
    assert checked["stale_keys"] == 0 and checked["delivered"] > 100, checked


def verify_cache(cluster: DevCluster, memcached: MemcachedServer, ledger: Path) -> dict[str, Any]:
    """`updatestream verify --sink memcached` of the live traffic's ledger."""
    command = [
        str(Path(sys.executable).with_name("updatestream")), "verify", "--sink", "memcached",
        "--ledger", str(ledger), "--servers", memcached.address,
        "--keyspace-manifest", str(cluster.manifest_path),
        "--secrets-dir", str(cluster.secrets_dir), "--json",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("flavor", FLAVORS, indirect=True, scope="module")
def test_an_added_column_during_the_snapshot_fails_nothing_and_appears_after_it(
    spark: Any, cluster: DevCluster, tmp_path: Path
) -> None:
    """On both flavors (MySQL logs the ALTER without BEGIN, and its rows before and after it
    with the table's columns of the moment)."""
    if sum(len(v) for v in _users(cluster).values()) < 20_000:  # a cluster of this test only
        loader = traffic(cluster, tmp_path, 5, rate=0)
        loader.preload(40_000, batch=2000)
        loader.close()
    console = tmp_path / "events.jsonl"
    job = snapshot_job(
        cluster, tmp_path, console, name="alter", tables=("users",),
        options={"snapshotChunkRows": "4000", "snapshotChunksPerBatch": "2"},
    )  # fmt: skip
    status = tmp_path / "status-alter.json"
    job.start(spark)
    try:
        wait_for_snapshot(job, status, lambda s: s["chunksDone"] >= 2)
        for shard in cluster.serving_map().names:
            with cluster.connect(shard, "admin", "commerce") as conn, conn.cursor() as cur:
                cur.execute("ALTER TABLE users ADD COLUMN nickname VARCHAR(40) NULL")
                cur.execute("UPDATE users SET nickname = CONCAT('n', id) ORDER BY id DESC LIMIT 50")
                conn.commit()
        snapshot = wait_for_snapshot(job, status, lambda s: s.get("finished"))
        wait_until_caught_up(job, cluster, status)
    finally:
        job.stop()
    delivered = read_console(console)
    expected = {k: v for k, v in shard_rows(cluster).items() if k[0] == "users"}
    assert differences(expected, delivered.state, added_later=frozenset({"nickname"})) == []
    renamed = [json.loads(v) for v in delivered.state.values() if "nickname" in json.loads(v)]
    assert sum(1 for row in renamed if row["nickname"]) == 100  # 50 rows on each shard
    assert delivered.duplicates == 0 and max(delivered.snapshot_keys.values()) == 1
    assert snapshot["chunksDone"] > 2


def _users(cluster: DevCluster) -> dict[str, list[Any]]:
    found = {}
    for shard in cluster.serving_map().names:
        with cluster.connect(shard, "admin", "commerce") as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM users")
            found[shard] = list(cur.fetchall())
    return found


def test_an_unaligned_key_range_snapshots_only_its_rows(
    spark: Any, cluster: DevCluster, tmp_path: Path
) -> None:
    if sum(1 for key in shard_rows(cluster) if key[0] == "events") < 5000:
        # the module's cluster of this flavor is fresh (the parametrized cases come first)
        loader = traffic(cluster, tmp_path, 5, rate=0)
        loader.preload(20_000, batch=2000)
        loader.close()
    console = tmp_path / "events.jsonl"
    job = snapshot_job(
        cluster, tmp_path, console, name="unaligned", key_range="60-a0", tables=("events",)
    )  # the VARCHAR key: chunks in binary order
    status = tmp_path / "status-unaligned.json"
    job.start(spark)
    try:
        wait_for_snapshot(job, status, lambda s: s.get("finished"))
        wait_until_caught_up(job, cluster, status)
    finally:
        job.stop()
    delivered = read_console(console)
    expected = {k: v for k, v in shard_rows(cluster, "60-a0").items() if k[0] == "events"}
    everything = {k: v for k, v in shard_rows(cluster).items() if k[0] == "events"}
    assert 0.15 * len(everything) < len(expected) < 0.35 * len(everything)
    assert differences(expected, delivered.state, added_later=frozenset({"nickname"})) == []
    assert set(delivered.snapshot_keys) == set(expected)


def test_a_snapshot_on_demand_rereads_one_table_while_the_stream_runs(
    spark: Any, cluster: DevCluster, tmp_path: Path
) -> None:
    requests = tmp_path / "requests.jsonl"
    console = tmp_path / "events.jsonl"
    job = snapshot_job(
        cluster, tmp_path, console, name="ondemand", start="now",
        options={"snapshotRequests": str(requests), "snapshotChunkRows": "5000"},
    )  # fmt: skip
    status = tmp_path / "status-ondemand.json"
    live = traffic(cluster, tmp_path, 3, rate=200, duration=None)
    live.adopt_existing_rows()
    job.start(spark)
    lags: list[float] = []
    try:
        live.start()
        time.sleep(3)
        requests.write_text(json.dumps({"id": "orders-1", "table": "orders"}) + "\n")

        def watch(snapshot: dict[str, Any]) -> bool:
            report = json.loads(status.read_text())
            lags.extend(s["lagSeconds"] for s in report["shards"].values())
            return bool(snapshot.get("finished"))

        wait_for_snapshot(job, status, watch)
        live.stop()
        live.close()
        wait_until_caught_up(job, cluster, status)
    finally:
        job.stop()
        stop_quietly(live)
    delivered = read_console(console)
    orders = {k: v for k, v in shard_rows(cluster).items() if k[0] == "orders"}
    assert set(k[0] for k in delivered.snapshot_keys) == {"orders"}
    delivered_orders = {k: v for k, v in delivered.state.items() if k[0] == "orders"}
    assert differences(orders, delivered_orders) == []
    assert delivered.backwards == [] and delivered.duplicates == 0
    assert lags and max(lags) < 30, max(lags)
