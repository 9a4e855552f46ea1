"""Split and merge under live traffic on real servers, checked row by row and binlog by binlog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import LedgerWriter, final_state, read_ledger
from updatestream_cli.devcluster.local_server import FLAVORS
from updatestream_cli.devcluster.reshard import ReshardOptions, ReshardWorkflow, plan_reshard
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

from tests.devcluster.binlog_secrets import binlog_files, secrets_in_binlogs
from tests.devcluster.checks import (
    assert_filtered_replication_exact,
    assert_rows_on_their_shard,
    replicated_transactions,
    seq_of,
    shard_state,
    source_transactions_for,
    upto,
    vreplication_rows,
)

pytestmark = pytest.mark.parametrize("flavor", FLAVORS, indirect=True, scope="module")


@pytest.fixture(scope="module")
def ledger_path(cluster: DevCluster) -> Path:
    return cluster.dir / "ledger.jsonl"


def _traffic(cluster: DevCluster, ledger: Path, seed: int) -> TrafficGenerator:
    options = TrafficOptions(rate=300, seed=seed, large_tx_rows=200, large_tx_every=2.0)
    gen = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, LedgerWriter(ledger), options
    )
    return gen


def _union(cluster: DevCluster, shards: list[str]) -> dict[tuple[str, str], str]:
    merged: dict[tuple[str, str], str] = {}
    for shard in shards:
        state = shard_state(cluster, shard)
        assert not set(state) & set(merged), f"rows on two shards ({shard})"
        merged.update(state)
    return merged


def _assert_starts_at_snapshot(cluster: DevCluster, state: dict[str, Any], target: str) -> None:
    """Without a replay window, start_pos is the copy's snapshot, and the destination's first
    replicated transaction from a source is that source's first one after it with rows here."""
    rows = vreplication_rows(cluster, target, state["name"])
    for source, snapshot in state["copy_positions"][target].items():
        assert rows[source]["start_pos"] == snapshot == state["start_positions"][target][source]
        first = next(
            stx.gtid
            for stx, owned in source_transactions_for(cluster, source, target, snapshot)
            if owned
        )
        lane: int | str = (
            first.rpartition(":")[0] if ":" in first else int(first.split("-")[0])
        )  # the MySQL server UUID or the MariaDB domain
        before, after = next(
            (vrep["before_pos"], vrep["pos"])
            for tx, vrep in replicated_transactions(cluster, target, state["name"])
            if len(tx.rows) > 1 and vrep["source_shard"] == source
        )
        # the first copy with rows here covers that transaction (in a group, maybe not alone)
        assert upto(before, lane) < seq_of(first) <= upto(after, lane)


def _reshard_under_traffic(
    cluster: DevCluster, ledger: Path, sources: str, targets: str, seed: int
) -> dict[str, Any]:
    gen = _traffic(cluster, ledger, seed)
    gen.preload(600, batch=200)
    gen.start()
    try:
        plan = plan_reshard(cluster, sources, targets)
        options = ReshardOptions(min_replicate_seconds=2.0)
        state = ReshardWorkflow(cluster, plan, options).run()
        gen_after = gen.stats.rows
        # Keep writing after the cut-over: these must land on the destinations.
        deadline = gen_after + 150
        while gen.stats.rows < deadline and gen.error is None:
            gen._stop.wait(0.05)
    finally:
        stats = gen.stop()
    assert stats.rows > 600
    return state


def test_split_under_traffic(cluster: DevCluster, ledger_path: Path) -> None:
    state = _reshard_under_traffic(cluster, ledger_path, "-80", "-40,40-80", seed=11)
    keyspace = cluster.keyspace()
    assert keyspace.spec.serving_shards == ["-40", "40-80", "80-"]
    assert [e.shards for e in keyspace.spec.shard_map_history] == [
        ["-80", "80-"],
        ["-40", "40-80", "80-"],
    ]
    # Traffic after the switch went to the destinations: the frozen source has only the rows it
    # had at the cut-over, and the destinations have exactly those plus the later writes.
    ledger = list(read_ledger(ledger_path))
    assert {e.shard for e in ledger} >= {"-80", "-40", "40-80"}
    assert _union(cluster, ["-40", "40-80", "80-"]) == final_state(ledger)
    switched = float(state["switched_at"])
    before = [e for e in ledger if e.commit_time < switched or e.shard == "-80"]
    source_rows = shard_state(cluster, "-80")
    expected_source = {k: v for k, v in final_state(before).items() if k in source_rows}
    assert source_rows == expected_source
    assert_rows_on_their_shard(cluster, ["-40", "40-80", "80-"])
    for target in ("-40", "40-80"):
        assert assert_filtered_replication_exact(cluster, state, target) > 5
        _assert_starts_at_snapshot(cluster, state, target)
    assert cluster.server("-80").variable("read_only") in ("1", "ON")


def test_source_rows_equal_destination_union_at_cutover(cluster: DevCluster) -> None:
    """The frozen source's rows are exactly the destinations' rows minus later traffic."""
    workflow = json.loads(next(cluster.workflows_dir.glob("x-80.to.*.json")).read_text())
    source = shard_state(cluster, "-80")
    dest = _union(cluster, ["-40", "40-80"])
    ledger = list(read_ledger(cluster.dir / "ledger.jsonl"))
    later = {e.key for e in ledger if e.shard in ("-40", "40-80")}
    unchanged = {k: v for k, v in dest.items() if k not in later}
    assert unchanged == {k: v for k, v in source.items() if k not in later}
    assert workflow["phase"] == "done"


def test_retire_and_merge_back(cluster: DevCluster, ledger_path: Path) -> None:
    cluster.retire(["-80"])
    assert "-80" not in [s.name for s in cluster.keyspace().spec.shards]
    state = _reshard_under_traffic(cluster, ledger_path, "-40,40-80", "-80", seed=12)
    keyspace = cluster.keyspace()
    assert keyspace.spec.serving_shards == ["-80", "80-"]
    assert len(keyspace.spec.shard_map_history) == 3
    assert _union(cluster, ["-80", "80-"]) == final_state(read_ledger(ledger_path))
    assert_rows_on_their_shard(cluster, ["-80", "80-"])
    assert assert_filtered_replication_exact(cluster, state, "-80") > 5
    _assert_starts_at_snapshot(cluster, state, "-80")


def test_no_password_in_any_binlog(cluster: DevCluster) -> None:
    """After `up`, traffic, a split, a retirement and a merge: no shard's binlog, serving or
    retired, holds any of the cluster's passwords, neither decoded nor in its raw bytes."""
    secrets = {p.parent.name: p.read_text() for p in cluster.secrets_dir.glob("*/password")}
    assert len(secrets) >= 3
    datadirs = sorted(cluster.dir.glob("*/*/data"))
    assert len(datadirs) >= 5, "expected -80 (retired), 80-, -40, 40-80 and the merged -80"
    assert any(d.parent.parent.name == "retired" for d in datadirs)
    binlogs = [path for datadir in datadirs for path in binlog_files(datadir)]
    assert len(binlogs) >= len(datadirs)
    assert secrets_in_binlogs(binlogs, secrets) == []
