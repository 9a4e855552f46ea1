"""`bench.vitess_ledger`: a Vitess reader's deliveries matched with the traffic ledger."""

from __future__ import annotations

import json
from typing import Any

from updatestream_cli.devcluster.ledger import LedgerEntry, LedgerOp

from bench.vitess_ledger import (
    Delivery,
    debezium_deliveries,
    first_named,
    match,
    shard_position,
    tally,
    vstream_deliveries,
)

OLD = "3e11fa47-71ca-11e1-9e33-c80aa9429562"  # the mysqld of -80
NEW = "8b6f4a12-1c3d-11ef-a6b1-0242ac120002"  # the mysqld of -40, after a split


def entry(order: int, pk: int, op: LedgerOp, shard: str, gtid: str) -> LedgerEntry:
    return LedgerEntry(order=order, tx=order, table="users", pk=json.dumps({"id": pk}), op=op,
                       digest=None if op == "delete" else "d", shard=shard, keyspace_id="00",
                       gtid=gtid, commit_time=100.0 + order)  # fmt: skip


LEDGER = [
    entry(1, 7, "insert", "-80", f"{OLD}:10"),
    entry(2, 7, "update", "-80", f"{OLD}:11"),
    entry(3, 7, "update", "-80", f"{OLD}:12"),
    entry(4, 7, "update", "-40", f"{NEW}:5"),  # the row's shard was split meanwhile
    entry(5, 8, "insert", "-40", f"{NEW}:6"),
]


def delivered(pk: int, op: LedgerOp, shard: str, position: str, at: float = 200.0) -> Delivery:
    return Delivery("users", (str(pk),), op, shard, position, at)


def test_each_delivery_is_the_newest_change_of_its_row_its_shard_position_holds() -> None:
    deliveries = [
        delivered(7, "insert", "-80", f"{OLD}:1-10"),
        delivered(7, "update", "-80", f"{OLD}:1-11"),
        delivered(7, "update", "-80", f"{OLD}:1-12,{NEW}:1-2"),
        delivered(7, "update", "-40", f"{NEW}:1-5"),
        delivered(8, "insert", "-40", f"{NEW}:1-6"),
    ]
    matched = match(LEDGER, deliveries)
    assert sorted(matched.times) == [1, 2, 3, 4, 5]
    assert not matched.unmatched
    assert tally(LEDGER, matched).as_dict() == {
        "committed": 5, "delivered": 5, "lost": 0, "duplicates": 0, "unmatched": 0,
    }  # fmt: skip


def test_a_change_delivered_again_is_a_duplicate_and_one_never_delivered_is_lost() -> None:
    deliveries = [
        delivered(7, "insert", "-80", f"{OLD}:1-10", at=200),
        delivered(7, "update", "-80", f"{OLD}:1-12", at=201),
        delivered(7, "update", "-80", f"{OLD}:1-12", at=205),  # re-read after a restart
    ]
    matched = match(LEDGER, deliveries)
    assert matched.times == {1: [200], 3: [201, 205]}
    counts = tally(LEDGER, matched)
    assert (counts.lost, counts.duplicates) == (3, 1)  # orders 2, 4 and 5
    assert matched.first_delivered() == {1: 200, 3: 201}


def test_a_copy_or_a_row_without_position_matches_no_ledger_change() -> None:
    deliveries = [
        # VReplication's copy of order 3 on the new shard: the target's own GTID
        delivered(7, "update", "-40", f"{NEW}:1-3", at=300),
        delivered(8, "insert", "-40", "", at=400),  # printed without its transaction's VGTID
    ]
    matched = match(LEDGER, deliveries)
    assert not matched.times
    assert len(matched.unmatched) == 2
    assert tally(LEDGER, matched, (250, 350)).unmatched == 1
    assert tally(LEDGER[:1], matched).as_dict()["lost"] == 1


def test_shard_position_drops_vitess_flavor_prefix() -> None:
    vgtid = [{"keyspace": "commerce", "shard": "-80", "gtid": f"MySQL56/{OLD}:1-9"},
             {"keyspace": "commerce", "shard": "80-", "gtid": f"MySQL56/{NEW}:1-3"}]  # fmt: skip
    assert shard_position(vgtid, "80-") == f"{NEW}:1-3"
    assert shard_position(vgtid, "-40") == ""


def test_vstream_client_lines_give_each_row_its_transaction_vgtid() -> None:
    vgtid = {
        "shardGtids": [{"keyspace": "commerce", "shard": "-80", "gtid": f"MySQL56/{OLD}:1-11"}]
    }
    lines: list[dict[str, Any]] = [
        {"type": "BEGIN"},
        {"type": "ROW", "shard": "-80", "table": "commerce.users", "received": 2_000_000_000,
         "changes": [{"before": None, "after": {"id": "9", "name": "x"}},
                     {"before": {"id": "7"}, "after": {"id": "7", "name": "y"}}]},
        {"type": "VGTID", "vgtid": vgtid},
        {"type": "COMMIT"},
        {"type": "ROW", "shard": "-80", "table": "commerce.users", "received": 3_000_000_000,
         "changes": [{"before": {"id": "9"}, "after": None}]},
    ]  # fmt: skip
    got = vstream_deliveries(lines)
    assert [(d.key, d.op, d.position, d.at) for d in got] == [
        (("9",), "insert", f"{OLD}:1-11", 2.0),
        (("7",), "update", f"{OLD}:1-11", 2.0),
        (("9",), "delete", "", 3.0),
    ]
    assert match(LEDGER, got).times == {2: [2.0]}


def test_debezium_change_lines_give_key_op_shard_and_position() -> None:
    vgtid = json.dumps([{"keyspace": "commerce", "shard": "-40", "gtid": f"MySQL56/{NEW}:1-6",
                         "table_p_ks": []}])  # fmt: skip
    changes = [
        {"type": "change", "t": 12.5, "op": "c", "table": "users", "shard": "-40",
         "vgtid": vgtid, "key": {"id": 8}},
        {"type": "change", "t": 13.0, "op": "r", "table": "users", "shard": "-40",
         "vgtid": vgtid, "key": {"id": 8}},  # a snapshot read: not a change
    ]  # fmt: skip
    got = debezium_deliveries(changes)
    assert got == [Delivery("users", ("8",), "insert", "-40", f"{NEW}:1-6", 12.5)]
    assert match(LEDGER, got).times == {5: [12.5]}


def test_our_deliveries_are_placed_at_the_first_batch_that_names_each_transaction() -> None:
    # (when, shard, GTID) per delivered transaction, as the lag rig's sink names them from the
    # shard's position after it: one candidate per server UUID (the tablet template's own
    # transactions beside), one of them the transaction's
    template = "11111111-2222-3333-4444-555555555555:40"
    delivered = [
        (10.0, "-80", template), (10.0, "-80", f"{OLD}:10"),
        (11.0, "-80", template), (11.0, "-80", f"{OLD}:11"),
        (11.0, "-80", f"{OLD}:12"),
        (12.0, "-40", f"{NEW}:5"),
        (13.0, "-80", f"{OLD}:10"),  # delivered again later: the first delivery counts
        (14.0, "80-", f"{NEW}:5"),  # the same GTID on another shard is not the -40's change
    ]  # fmt: skip
    assert first_named(delivered, LEDGER) == {1: 10.0, 2: 11.0, 3: 11.0, 4: 12.0}
    assert first_named(delivered[:2], LEDGER) == {1: 10.0}
