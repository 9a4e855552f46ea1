"""Assertions over a development cluster's data shared by the tests (test helper).

`shard_state` is re-exported from `updatestream_cli.devcluster.verify` for the test modules.
"""

from __future__ import annotations

from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.copy import vreplication_rows as copy_rows
from updatestream_cli.devcluster.ledger import pk_json
from updatestream_cli.devcluster.verify import misplaced_rows, shard_state

from tests.devcluster.binlog_reader import BinlogTransaction, read_transactions
from updatestream.binlog.vreplication import decode_position, source_fields
from updatestream.core.gtid import (
    Flavor,
    MariaDBGTID,
    MariaDBPosition,
    MySQLGTIDSet,
    parse_position,
    position_contains,
)
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
    """Destination transactions written by filtered replication, each with its copy marker:
    the after image of the `_vt.vreplication` update that ends it, decoded (`pos` as plain
    GTID text, `source_shard` from the workflow's `source`), and `before_pos`."""
    server = cluster.server(target)
    found = []
    reader = cluster.credentials("reader")
    for tx in read_transactions(server.host, server.port or 0, reader, "", cluster.flavor):
        vrep = [r for r in tx.rows if r.schema == "_vt" and r.table == "vreplication"]
        if not vrep or vrep[-1].op != "update":
            continue
        marker = vrep[-1]
        assert marker.after is not None and marker.before is not None
        decoded = {k: v.decode() if isinstance(v, bytes) else v for k, v in marker.after.items()}
        if decoded["workflow"] == workflow:
            decoded["source_shard"] = source_fields(decoded["source"])[1]
            decoded["pos"] = str(decode_position(decoded["pos"]))
            decoded["before_pos"] = str(decode_position(marker.before["pos"]))
            found.append((tx, decoded))
    return found


def vreplication_rows(cluster: DevCluster, target: str, workflow: str) -> dict[str, dict[str, Any]]:
    """The destination's `_vt.vreplication` rows of a workflow, by source shard, decoded."""
    with cluster.connect(target, "admin", autocommit=True) as conn:
        return copy_rows(conn, workflow, Flavor(cluster.flavor))


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
        server.host, server.port or 0, cluster.credentials("reader"), start, cluster.flavor
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
    """Filtered replication marked and applied every source transaction exactly as Vitess's
    vplayer does: each source transaction with rows for `target` after the destination's
    `start_pos`, up to the final source position, is in exactly one destination transaction,
    whose marker (its LAST row, the `_vt.vreplication` update) covers it (in `pos`, not in the
    before image's `pos`) and whose rows are the covered source transactions' rows for `target`,
    in source order; `transaction_timestamp` is the source commit second of the last covered
    transaction, and the events carry the destination's own time (no `SET TIMESTAMP`). Returns
    how many source transactions were checked. With `same_images`, the destination's row events
    also equal the source's: operation, before and after images."""
    checked = 0
    vrep_rows = vreplication_rows(cluster, target, workflow["name"])
    assert set(vrep_rows) == set(workflow["copy_positions"][target])
    copies = replicated_transactions(cluster, target, workflow["name"])
    for source, copy_pos in workflow["copy_positions"][target].items():
        start = vrep_rows[source]["start_pos"]
        assert vrep_rows[source]["copy_done"] == 1
        # start_pos is at or before the copy's snapshot.
        flavor = Flavor(cluster.flavor)
        assert position_contains(parse_position(copy_pos, flavor), parse_position(start, flavor))
        # The source is frozen: its binlog ends at the workflow's final position.
        assert cluster.server(source).gtid_position() == workflow["final_positions"][source]
        lane = _lane(cluster, source)
        expected = [
            (stx, rows) for stx, rows in source_transactions_for(cluster, source, target, start)
        ]
        mine = [(tx, m) for tx, m in copies if m["source_shard"] == source]
        checked += _check_groups(lane, expected, mine, same_images)
    return checked


def _check_groups(
    lane: int | str,
    expected: list[tuple[BinlogTransaction, list[Any]]],
    copies: list[tuple[BinlogTransaction, dict[str, Any]]],
    same_images: bool,
) -> int:
    """The destination transactions copy the source transactions with rows, once, in order."""
    by_seq = {seq_of(stx.gtid): (stx, rows) for stx, rows in expected}
    seen: list[int] = []
    for tx, marker in copies:
        assert tx.rows[-1].schema == "_vt" and tx.rows[-1].table == "vreplication", tx.gtid
        low = upto(marker["before_pos"], lane)
        high = upto(marker["pos"], lane)
        covered = [by_seq[seq] for seq in range(low + 1, high + 1) if seq in by_seq]
        with_rows = [(stx, rows) for stx, rows in covered if rows]
        if len(tx.rows) == 1:  # a position-only marker
            assert not with_rows, f"{tx.gtid}: rows of {[s.gtid for s, _ in with_rows]} missing"
            continue
        assert covered, f"{tx.gtid} copies no source transaction after start_pos"
        assert int(marker["transaction_timestamp"]) == covered[-1][0].timestamp
        assert tx.timestamp >= covered[-1][0].timestamp  # the destination's own time
        want = [r for _, rows in with_rows for r in rows]
        assert _keys(tx.rows[:-1]) == _keys(want), tx.gtid
        if same_images:  # in any order: a multi-row DELETE runs in key order
            assert _images(tx.rows[:-1]) == _images(want), tx.gtid
        seen += [seq_of(stx.gtid) for stx, _ in with_rows]
    wanted = sorted(seq_of(stx.gtid) for stx, rows in expected if rows)
    assert seen == wanted, "copied out of source order, twice, or not at all"
    return len(seen)


def _keys(rows: list[Any]) -> list[tuple[str, str, bool]]:
    return sorted(
        (r.table, pk_json(r.table, r.after or r.before or {}), r.op == "delete") for r in rows
    )


def _images(rows: list[Any]) -> list[tuple[str, str, str, str]]:
    return sorted(
        (r.table, pk_json(r.table, r.after or r.before or {}), r.op, repr((r.before, r.after)))
        for r in rows
    )


def _lane(cluster: DevCluster, shard: str) -> int | str:
    """Where a shard's own GTIDs count up: its MariaDB domain, or its MySQL server UUID."""
    server = cluster.server(shard)
    if cluster.flavor == "mysql":
        return str(server.variable("server_uuid"))
    return int(server.domain_id or 0)


def seq_of(gtid: str) -> int:
    """A single GTID's number in its lane (`1-1-42` and `uuid:42` give 42)."""
    if ":" in gtid:
        return int(gtid.rpartition(":")[2])
    return MariaDBGTID.parse(gtid).seq


def upto(position: str, lane: int | str) -> int:
    """The highest number of `lane` a position holds (its transactions there are 1..N)."""
    if isinstance(lane, str):
        spans = MySQLGTIDSet.parse(position).entries.get(lane, ())
        return max((end for _, end in spans), default=0)
    return MariaDBPosition.parse(position).domain_seq(lane) or 0
