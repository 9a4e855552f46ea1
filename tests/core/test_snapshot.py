"""Snapshot progress as plain data: which events an unfinished range holds back, how chunks are
planned and recorded, and the offsets' JSON."""

from __future__ import annotations

import json

import pytest

from updatestream.core.snapshot_plan import (
    SnapshotFilter,
    SnapshotRange,
    SnapshotState,
    SnapshotStateError,
    key_of,
    next_chunks,
    progress_of,
)


def ranges() -> tuple[SnapshotRange, ...]:
    return (
        SnapshotRange("-80", "users", (100,), estimate=4),
        SnapshotRange("80-", "users", (90,), estimate=3),
        SnapshotRange("-80", "events", ("m",), frontier=("c",)),
        SnapshotRange("80-", "events", None, done=True),
    )


def test_an_unfinished_range_holds_back_keys_above_its_frontier_up_to_its_last_key() -> None:
    users = SnapshotRange("-80", "users", (100,), frontier=(40,))
    assert not users.holds_back((40,)) and not users.holds_back((7,))  # delivered already
    assert users.holds_back((41,)) and users.holds_back((100,))  # the snapshot reads them
    assert not users.holds_back((101,))  # inserted after planning: the binlog brings it
    assert not SnapshotRange("-80", "users", None).holds_back((1,))  # empty table
    assert not SnapshotRange("-80", "users", (9,), done=True).holds_back((5,))


def test_the_filter_finds_the_range_by_keyspace_id_and_table() -> None:
    held = SnapshotFilter(ranges())
    assert held.active and held.tables() == {"users", "events"}
    assert held.holds_back("users", "10" * 8, json.dumps({"id": 50}))  # -80
    assert not held.holds_back("users", "90" * 8, json.dumps({"id": 95}))  # 80- ends at 90
    assert held.holds_back("users", "90" * 8, json.dumps({"id": 90}))
    assert not held.holds_back("events", "90" * 8, json.dumps({"event_key": "d"}))  # done
    assert held.holds_back("events", "10" * 8, json.dumps({"event_key": "d"}))
    assert not held.holds_back("events", "10" * 8, json.dumps({"event_key": "b"}))
    assert not held.holds_back("orders", "10" * 8, json.dumps({"order_id": 1}))
    assert not held.holds_back(None, None, None)  # heartbeats pass


def test_a_range_of_a_snapshot_on_demand_holds_nothing_back() -> None:
    """Its sinks hold its keys already: a change it dropped (a delete above the frontier) would
    be lost, since the chunk that reads the key later finds no row and says nothing."""
    orders = SnapshotRange("-80", "orders", (100,), frontier=(40,), request="r1", on_demand=True)
    assert not any(orders.holds_back((key,)) for key in (7, 41, 100, 101))
    start = SnapshotRange("-80", "orders", (100,), frontier=(40,))
    held = SnapshotFilter([orders, start])
    assert held.tables() == {"orders"}  # only the starting snapshot's range holds back
    assert held.holds_back("orders", "10" * 8, json.dumps({"order_id": 41}))
    assert not SnapshotFilter([orders]).active
    assert not SnapshotFilter([orders]).holds_back("orders", "10" * 8, '{"order_id": 41}')


def test_a_new_request_finishes_what_it_re_reads_of_an_unfinished_earlier_one() -> None:
    """Two requests of one table: the second re-reads every key the first has left, so the
    first's covered ranges are finished rather than read twice; other ranges go on."""

    def on_demand(key_range: str, table: str, request: str) -> SnapshotRange:
        return SnapshotRange(key_range, table, (100,), request=request, on_demand=True)

    first = SnapshotState(ranges()).with_request(
        "r1", [on_demand("-80", "orders", "r1"), on_demand("80-", "orders", "r1")]
    )
    first = first.advance([(first.ranges[4], (30,))])
    second = first.with_request(
        "r2", [on_demand("-40", "orders", "r2"), on_demand("-80", "users", "r2")]
    )
    assert [r.done for r in second.ranges[4:6]] == [False, False]  # -80 is not within -40
    third = second.with_request("r3", [on_demand("-", "orders", "r3")])
    by_ident = {r.ident: r for r in third.ranges}
    assert by_ident["r1:orders:-80"].done and by_ident["r1:orders:80-"].done
    assert by_ident["r1:orders:-80"].chunks == 1  # what it read stays counted
    assert by_ident["r2:orders:-40"].done and not by_ident["r2:users:-80"].done
    assert not by_ident["r3:orders:-"].done
    assert [r.done for r in third.ranges[:4]] == [r.done for r in ranges()]  # the start's stay


def test_a_key_that_cannot_be_ordered_against_the_bounds_is_a_typed_error() -> None:
    held = SnapshotFilter([SnapshotRange("-", "users", (100,))])
    with pytest.raises(SnapshotStateError, match="cannot be ordered"):
        held.holds_back("users", "10" * 8, json.dumps({"id": "text"}))


def test_chunks_go_round_robin_over_ranges_and_chain_within_a_range() -> None:
    state = SnapshotState(ranges())
    chosen = next_chunks(state, 5)
    assert [(r.key_range, r.table) for r in chosen] == [
        ("-80", "users"), ("80-", "users"), ("-80", "events"), ("-80", "users"), ("80-", "users"),
    ]  # fmt: skip
    assert next_chunks(SnapshotState(()), 4) == []


def test_advancing_records_the_batch_chunks_and_moves_frontiers() -> None:
    state = SnapshotState(ranges())
    users = state.ranges[0]
    after = state.advance([(users, (30,)), (users, (60,)), (state.ranges[2], ("m",))])
    assert after.batch == 1 and len(after.chunks) == 3
    assert [c.after for c in after.chunks] == [None, (30,), ("c",)]
    assert after.ranges[0].frontier == (60,) and after.ranges[0].chunks == 2
    assert after.ranges[2].done  # its last key reached
    assert after.chunks_of_batch(state) == after.chunks
    idle = after.advance([])
    assert idle.chunks == () and idle.batch == 1 and idle.chunks_of_batch(after) == ()


def test_the_state_round_trips_through_offset_json() -> None:
    state = SnapshotState(ranges(), started_at=5.0).advance([(ranges()[0], (30,))])
    again = SnapshotRange("-", "orders", (7,), request="again", on_demand=True)
    state = state.with_request("again", [again])
    text = json.dumps(state.to_json())
    assert SnapshotState.from_json(json.loads(text)) == state
    assert state.with_request("again", []) is state  # a request id is taken once
    # offsets written before ranges said whether they are on demand: all but the start's are
    older = json.loads(text)
    for item in older["ranges"]:
        item.pop("onDemand")
    assert [r.on_demand for r in SnapshotState.from_json(older).ranges] == [False] * 4 + [True]
    with pytest.raises(SnapshotStateError, match="malformed"):
        SnapshotState.from_json({"ranges": [{"table": "t"}]})


def test_progress_counts_estimates_until_a_range_is_done() -> None:
    state = SnapshotState(ranges(), started_at=100.0)
    state = state.advance([(state.ranges[0], (30,))])
    progress = progress_of(state, now=110.0)
    assert (progress.chunks_done, progress.chunks_total) == (1, 4 + 3 + 1 + 0)
    assert progress.eta_seconds == pytest.approx(70.0)
    assert not progress.finished and progress.ranges_done == 1


def test_key_of_reads_the_key_columns_in_order() -> None:
    assert key_of('{"a":1,"b":"x"}') == (1, "x")
