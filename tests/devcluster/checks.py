"""Assertions over a development cluster's data shared by the tests (test helper).

`shard_state` is re-exported from `updatestream_cli.devcluster.verify` for the test modules.
"""

from __future__ import annotations

from typing import Any

import pymysql.cursors
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import pk_json
from updatestream_cli.devcluster.verify import misplaced_rows, shard_state

from tests.devcluster.binlog_reader import BinlogTransaction, read_transactions
from updatestream.core.gtid import MariaDBPosition
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema

__all__ = [
    "assert_filtered_replication_exact",
    "assert_rows_on_their_shard",
    "replicated_transactions",
    "shard_state",
    "source_transactions_for",
    "vreplication_rows",
]


def assert_rows_on_their_shard(cluster: DevCluster, shards: list[str]) -> None:
    """Every row sits on the shard its primary vindex maps it to."""
    assert misplaced_rows(cluster, shards) == []


def replicated_transactions(
    cluster: DevCluster, target: str, workflow: str
) -> list[tuple[BinlogTransaction, dict[str, Any]]]:
    """Destination transactions written by filtered replication, with their vreplication row."""
    server = cluster.server(target)
    found = []
    for tx in read_transactions(server.host, server.port or 0, cluster.credentials("reader")):
        vrep = [r for r in tx.rows if r.schema == "_vt" and r.table == "vreplication"]
        if not vrep:
            continue
        after = vrep[0].after
        assert after is not None
        decoded = {k: v.decode() if isinstance(v, bytes) else v for k, v in after.items()}
        if decoded["workflow"] == workflow:
            found.append((tx, decoded))
    return found


def vreplication_rows(cluster: DevCluster, target: str, workflow: str) -> dict[str, dict[str, Any]]:
    """The destination's `_vt.vreplication` rows of a workflow, by source shard, decoded."""
    with (
        cluster.connect(target, "admin") as conn,
        conn.cursor(pymysql.cursors.DictCursor) as cur,
    ):
        cur.execute("SELECT * FROM `_vt`.`vreplication` WHERE workflow = %s", (workflow,))
        rows = [
            {k: v.decode() if isinstance(v, bytes) else v for k, v in row.items()}
            for row in cur.fetchall()
        ]
    return {row["source_shard"]: row for row in rows}


def source_transactions_for(
    cluster: DevCluster, source: str, target: str, start: str
) -> list[tuple[BinlogTransaction, list[Any]]]:
    """Source transactions after `start` up to now, each with its rows that `target` owns
    (an empty list when it owns none)."""
    target_range = KeyRange.parse(target)
    vschema = VSchema.from_dict(cluster.keyspace().spec.vschema)
    server = cluster.server(source)
    found = []
    for stx in read_transactions(
        server.host, server.port or 0, cluster.credentials("reader"), start=start
    ):
        rows = [
            r
            for r in stx.rows
            if r.schema == "commerce"
            and target_range.contains(
                vschema.keyspace_id_for(r.table, r.after or r.before or {}) or b""
            )
        ]
        found.append((stx, rows))
    return found


def assert_filtered_replication_exact(
    cluster: DevCluster, workflow: dict[str, Any], target: str, *, same_images: bool = False
) -> int:
    """Every source transaction with rows for `target` after the destination's `start_pos` (the
    copy's snapshot, or earlier with a replay window), up to the final source position, was
    applied exactly once and in source order, first row the vreplication row, with the source
    timestamp on every event; returns how many were checked. With `same_images`, the
    destination's row events also equal the source's: operation, before and after images."""
    applied: dict[str, list[BinlogTransaction]] = {}
    order: dict[str, list[str]] = {}
    for tx, vrep in replicated_transactions(cluster, target, workflow["name"]):
        assert tx.rows[0].schema == "_vt" and tx.rows[0].table == "vreplication", tx.gtid
        source_gtid = MariaDBPosition.parse(vrep["pos"])
        ts = int(vrep["transaction_timestamp"])
        assert tx.timestamp == ts and tx.xid_timestamp == ts
        assert all(row.timestamp == ts for row in tx.rows)
        if len(tx.rows) > 1:
            (gtid,) = [g for g in source_gtid if g.domain == _domain(cluster, vrep["source_shard"])]
            applied.setdefault(f"{vrep['source_shard']}/{gtid}", []).append(tx)
            order.setdefault(vrep["source_shard"], []).append(str(gtid))
    checked = 0
    vrep_rows = vreplication_rows(cluster, target, workflow["name"])
    assert set(vrep_rows) == set(workflow["copy_positions"][target])
    for source, copy_pos in workflow["copy_positions"][target].items():
        start = vrep_rows[source]["start_pos"]
        assert vrep_rows[source]["copy_done"] == 1
        # start_pos is at or before the copy's snapshot.
        assert MariaDBPosition.parse(copy_pos).contains(MariaDBPosition.parse(start))
        # The source is frozen: its binlog ends at the workflow's final position.
        assert cluster.server(source).gtid_position() == workflow["final_positions"][source]
        expected_order = []
        for stx, rows in source_transactions_for(cluster, source, target, start):
            copies = applied.pop(f"{source}/{stx.gtid}", [])
            if not rows:
                assert not copies, stx.gtid
                continue
            assert len(copies) == 1, f"{source} {stx.gtid} applied {len(copies)} times"
            assert copies[0].timestamp == stx.timestamp
            expected = sorted(
                (r.table, pk_json(r.table, r.after or r.before or {}), r.op == "delete")
                for r in rows
            )
            got = sorted(
                (r.table, pk_json(r.table, r.after or r.before or {}), r.op == "delete")
                for r in copies[0].rows[1:]
            )
            assert got == expected, stx.gtid
            if same_images:  # in any order: a multi-row DELETE runs in key order
                assert _images(copies[0].rows[1:]) == _images(rows), stx.gtid
            expected_order.append(stx.gtid)
            checked += 1
        assert order.get(source, []) == expected_order, f"{source}: applied out of source order"
    assert not applied, f"applied transactions with no source: {sorted(applied)[:5]}"
    return checked


def _images(rows: list[Any]) -> list[tuple[str, str, str, str]]:
    return sorted(
        (r.table, pk_json(r.table, r.after or r.before or {}), r.op, repr((r.before, r.after)))
        for r in rows
    )


def _domain(cluster: DevCluster, shard: str) -> int:
    return int(cluster.server(shard).domain_id or 0)
