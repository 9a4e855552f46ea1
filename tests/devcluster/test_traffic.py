"""Traffic with a ledger against a real two-shard cluster, of MariaDB and of MySQL 8 shards."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import (
    final_state,
    pk_json,
    read_ledger,
    row_digest,
)
from updatestream_cli.devcluster.local_server import FLAVORS
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.devcluster.verify import check_ledger

from tests.devcluster.binlog_reader import read_transactions
from tests.devcluster.checks import assert_rows_on_their_shard, shard_state
from updatestream.core.gtid import MySQLGTIDSet

pytestmark = pytest.mark.parametrize("flavor", FLAVORS, indirect=True, scope="module")


@pytest.fixture(scope="module")
def traffic_run(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ledger = tmp_path_factory.mktemp("ledger") / "ledger.jsonl"
    options = TrafficOptions(rate=400, duration=3.0, seed=7, large_tx_rows=1500, large_tx_every=1.0)
    gen = TrafficGenerator(cluster.manifest_path, cluster.secrets_dir, ledger, options)
    gen.preload(300, batch=100)
    stats = gen.run()
    gen.close()
    assert stats.transactions > 20 and stats.by_op["update"] > 0 and stats.by_op["delete"] > 0
    return ledger


def test_ledger_matches_final_database_state(cluster: DevCluster, traffic_run: Path) -> None:
    entries = list(read_ledger(traffic_run))
    expected = final_state(entries)
    actual = {**shard_state(cluster, "-80"), **shard_state(cluster, "80-")}
    assert len(actual) == len(expected) > 300
    assert actual == expected
    assert_rows_on_their_shard(cluster, ["-80", "80-"])
    orders = [e.order for e in entries]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert max(Counter(e.tx for e in entries).values()) >= 500  # a large transaction
    report = check_ledger(cluster, traffic_run)
    assert report.ok and report.database_rows == len(expected)


def test_ledger_digests_and_gtids_match_the_binlog(cluster: DevCluster, traffic_run: Path) -> None:
    """Every ledger entry is a row change of the binlog transaction it names, with the after
    image's digest (on MySQL, JSON values written back as the text MySQL gives for them)."""
    entries = list(read_ledger(traffic_run))
    reader = cluster.credentials("reader")
    for shard in ("-80", "80-"):
        server = cluster.server(shard)
        from_binlog: Counter[tuple[str, str, str, str, str | None]] = Counter()
        transactions = read_transactions(server.host, server.port or 0, reader, "", cluster.flavor)
        for tx in transactions:
            for row in tx.rows:
                if row.schema != "commerce":
                    continue
                image = row.after if row.after is not None else row.before
                assert image is not None
                digest = row_digest(row.after) if row.after is not None else None
                from_binlog[(tx.gtid, row.table, pk_json(row.table, image), row.op, digest)] += 1
        from_ledger = Counter(
            (e.gtid, e.table, e.pk, e.op, e.digest) for e in entries if e.shard == shard
        )
        assert from_ledger == from_binlog
        if cluster.flavor == "mysql":  # each shard's own server UUID, one GTID per transaction
            gtids = [MySQLGTIDSet.parse(e.gtid) for e in entries if e.shard == shard]
            assert {str(g).partition(":")[0] for g in gtids} == {server.variable("server_uuid")}
            assert MySQLGTIDSet.parse(server.gtid_position()).contains(gtids[-1])
