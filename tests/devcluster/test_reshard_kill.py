"""kill -9 of the reshard process in each phase, then a rerun: no row lost, none applied twice."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql.cursors
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import final_state, read_ledger
from updatestream_cli.devcluster.reshard import ReshardOptions, ReshardWorkflow, plan_reshard
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

from tests.devcluster.checks import (
    assert_filtered_replication_exact,
    assert_rows_on_their_shard,
    shard_state,
)
from tests.devcluster.processes import run_reshard_and_kill

WORKFLOW = "80-x.to.80-c0+c0-x"


def _vreplication(cluster: DevCluster, target: str) -> list[dict[str, Any]]:
    if target not in cluster.shard_names():
        return []
    try:
        with (
            cluster.connect(target, "admin") as conn,
            conn.cursor(pymysql.cursors.DictCursor) as cur,
        ):
            cur.execute("SELECT * FROM _vt.vreplication")
            return list(cur.fetchall())
    except pymysql.err.MySQLError:
        return []


def _phase(cluster: DevCluster) -> str | None:
    path = cluster.workflows_dir / f"{WORKFLOW}.json"
    return json.loads(path.read_text())["phase"] if path.exists() else None


def _run_and_kill(
    cluster: DevCluster, extra: list[str], ready: Callable[[], bool], log: Path
) -> None:
    run_reshard_and_kill(cluster, ["--from=80-", "--to=80-c0,c0-", *extra], ready, log)


def test_kill_in_every_phase_then_rerun(cluster: DevCluster) -> None:
    ledger = cluster.dir / "ledger.jsonl"
    options = TrafficOptions(rate=250, seed=21, large_tx_rows=150, large_tx_every=2.0)
    gen = TrafficGenerator(cluster.manifest_path, cluster.secrets_dir, ledger, options)
    gen.preload(3000, batch=500)
    gen.start()
    log = cluster.dir / "reshard.log"
    try:
        # 1. mid-copy: some batches committed, the copy not done.
        def copying() -> bool:
            rows = _vreplication(cluster, "80-c0") + _vreplication(cluster, "c0-")
            return any(r["rows_copied"] > 0 and not r["copy_done"] for r in rows)

        slow_copy = ["--copy-batch-size=40", "--copy-throttle=0.05", "--min-replicate-seconds=60"]
        _run_and_kill(cluster, slow_copy, copying, log)
        assert _phase(cluster) == "copy"

        # 2. mid-replication: both destinations applied source transactions.
        def replicating() -> bool:
            rows = _vreplication(cluster, "80-c0") + _vreplication(cluster, "c0-")
            return (
                _phase(cluster) == "replicate"
                and len(rows) == 2
                and all(r["transaction_timestamp"] > 0 for r in rows)
            )

        _run_and_kill(cluster, ["--min-replicate-seconds=60"], replicating, log)
        time.sleep(1.0)  # the source keeps taking writes while no workflow runs

        # 3. during the write cut-over: sources frozen, manifest not switched yet. Killed
        # only once a write has met the frozen source, so the cut-over is known to have held
        # traffic back (the freeze lasts 60 s; a write reaches 80- every few milliseconds).
        _run_and_kill(
            cluster,
            ["--hold-after-freeze=60"],
            lambda: _phase(cluster) == "switch_writes" and gen.stats.frozen_waits >= 1,
            log,
        )
        assert cluster.keyspace().spec.serving_shards == ["-80", "80-"]

        # 4. the rerun finishes; traffic carries on onto the new shards.
        plan = plan_reshard(cluster, "80-", "80-c0,c0-")
        state = ReshardWorkflow(cluster, plan, ReshardOptions()).run()
        target = gen.stats.rows + 100
        while gen.stats.rows < target and gen.error is None:
            time.sleep(0.05)
    finally:
        stats = gen.stop()
    assert stats.frozen_waits >= 1
    assert cluster.keyspace().spec.serving_shards == ["-80", "80-c0", "c0-"]
    serving = ["-80", "80-c0", "c0-"]
    merged: dict[tuple[str, str], str] = {}
    for shard in serving:
        merged.update(shard_state(cluster, shard))
    assert merged == final_state(read_ledger(ledger))
    assert_rows_on_their_shard(cluster, serving)
    for target_shard in ("80-c0", "c0-"):
        assert assert_filtered_replication_exact(cluster, state, target_shard) > 3
