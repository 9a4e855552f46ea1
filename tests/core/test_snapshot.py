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
    state = state.with_request("again", [SnapshotRange("-", "orders", (7,), request="again")])
    text = json.dumps(state.to_json())
    assert SnapshotState.from_json(json.loads(text)) == state
    assert state.with_request("again", []) is state  # a request id is taken once
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
