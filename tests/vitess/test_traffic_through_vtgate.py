"""The development cluster's traffic generator writing through vtgate, ledger unchanged.

vtgate routes every row; the ledger still names, for each transaction, the shard that committed
it and that shard's GTID, so each ledger transaction must be exactly one binlog transaction of
that shard's primary, row for row and digest for digest; also while a real Reshard switches
traffic from `-80` to `-40,40-80` (the module merges back into `-80` at its end).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pymysql.cursors
import pytest
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.ledger import (
    LedgerEntry,
    final_state,
    pk_json,
    read_ledger,
    row_digest,
    table_state,
)
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.gateway import VtgateGateway
from updatestream_cli.vitess.reshard import VitessReshard, plan_reshard

from tests.vitess.binlog_transactions import read_transactions
from tests.vitess.conftest import credentials
from updatestream.core.keyrange import KeyRange


@pytest.fixture(scope="module")
def ledger(
    vitess_cluster: VitessCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[LedgerEntry]]:
    cluster = vitess_cluster
    path = tmp_path_factory.mktemp("ledger") / "ledger.jsonl"
    gateway = VtgateGateway(
        "127.0.0.1", cluster.vtgate.mysql_port, cluster.manifest_path, cluster.secrets_dir
    )
    options = TrafficOptions(rate=300, duration=4.0, seed=11, large_tx_rows=600, large_tx_every=2)
    generator = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, path, options, gateway=gateway
    )
    try:
        generator.preload(300, batch=100)
        stats = generator.run()
    finally:
        generator.close()
        gateway.close()
    assert stats.transactions > 20 and stats.by_op["update"] and stats.by_op["delete"]
    yield list(read_ledger(path))


def _through_vtgate(cluster: VitessCluster) -> dict[tuple[str, str], str]:
    app = credentials(cluster, "app")
    conn = pymysql.connect(
        host="127.0.0.1", port=cluster.vtgate.mysql_port, user=app.username,
        password=app.password, database=cluster.keyspace,
    )  # fmt: skip
    rows = []
    try:
        for table in sample_schema.COLUMNS:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute(f"SELECT * FROM `{table}`")
                rows += [(table, row) for row in cur.fetchall()]
    finally:
        conn.close()
    return table_state(rows)


def test_each_ledger_transaction_is_one_binlog_transaction_of_its_shard(
    vitess_cluster: VitessCluster, ledger: list[LedgerEntry]
) -> None:
    reader = credentials(vitess_cluster, "reader")
    for shard in ("-80", "80-"):
        port = vitess_cluster.tablet(shard).mysql_port
        from_binlog: Counter[tuple[str, str, str, str, str | None]] = Counter()
        for tx in read_transactions("127.0.0.1", port, reader):
            for row in tx.rows:
                if row.schema == "commerce":
                    image = row.after if row.after is not None else row.before
                    assert image is not None
                    digest = row_digest(row.after) if row.after is not None else None
                    key = (tx.gtid, row.table, pk_json(row.table, image), row.op, digest)
                    from_binlog[key] += 1
        mine = [e for e in ledger if e.shard == shard]
        assert mine and all(
            KeyRange.parse(shard).contains(bytes.fromhex(e.keyspace_id)) for e in mine
        )
        gtids = {e.gtid for e in mine}
        assert len(gtids) == len({e.tx for e in mine})  # one GTID per ledger transaction
        assert Counter((e.gtid, e.table, e.pk, e.op, e.digest) for e in mine) == Counter(
            {k: n for k, n in from_binlog.items() if k[0] in gtids}
        )


def test_ledger_replays_to_what_vtgate_serves(
    vitess_cluster: VitessCluster, ledger: list[LedgerEntry]
) -> None:
    expected = final_state(ledger)
    assert len(expected) > 300
    touched = {e.key for e in ledger}  # other tests' rows may sit in the same tables
    served = {k: v for k, v in _through_vtgate(vitess_cluster).items() if k in touched}
    assert served == expected
    # a large transaction of 600 rows, committed as one transaction per shard
    assert max(Counter(e.tx for e in ledger).values()) >= 250


@pytest.fixture(scope="module")
def ledger_across_split(
    vitess_cluster: VitessCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[LedgerEntry]]:
    """Traffic through vtgate while `-80` splits into `-40,40-80` (up to SwitchTraffic)."""
    cluster = vitess_cluster
    path = tmp_path_factory.mktemp("ledger-split") / "ledger.jsonl"
    gateway = VtgateGateway(
        "127.0.0.1", cluster.vtgate.mysql_port, cluster.manifest_path, cluster.secrets_dir
    )
    options = TrafficOptions(rate=200, seed=12)
    generator = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, path, options, gateway=gateway
    )
    generator.adopt_existing_rows()
    plan = plan_reshard(cluster.serving_shards_recorded(), "-80", "-40,40-80", "traffic_split")
    runner = VitessReshard(cluster, plan)
    generator.start()
    try:
        runner.create()
        runner.wait_caught_up()
        runner.switch_traffic()
        time.sleep(2.0)  # writes on the new shards
    finally:
        generator.stop()
        gateway.close()
    yield list(read_ledger(path))
    runner.complete()
    VitessReshard(
        cluster, plan_reshard(cluster.serving_shards_recorded(), "-40,40-80", "-80")
    ).run()


def test_ledger_names_the_shard_and_gtid_of_each_commit_across_a_switch(
    vitess_cluster: VitessCluster, ledger_across_split: list[LedgerEntry]
) -> None:
    ledger = ledger_across_split
    assert {"-80", "-40", "40-80", "80-"} <= {e.shard for e in ledger}
    reader = credentials(vitess_cluster, "reader")
    for shard in ("-80", "-40", "40-80", "80-"):
        mine = [e for e in ledger if e.shard == shard]
        transactions = read_transactions(
            "127.0.0.1", vitess_cluster.tablet(shard).mysql_port, reader
        )
        by_gtid = {tx.gtid: tx for tx in transactions}
        for tx_number in sorted({e.tx for e in mine}):
            entries = [e for e in mine if e.tx == tx_number]
            (gtid,) = {e.gtid for e in entries}
            rows = [r for r in by_gtid[gtid].rows if r.schema == "commerce"]
            # (the generator sends a transaction's inserts table by table: compare as sets)
            assert Counter(
                (r.table, pk_json(r.table, r.after or r.before or {}), r.op) for r in rows
            ) == Counter((e.table, e.pk, e.op) for e in entries)
            assert not any(r.schema == "_vt" for r in by_gtid[gtid].rows)  # not a copy
