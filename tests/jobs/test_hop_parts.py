"""The pieces of the in-query hop that need no server: offsets, the Keyspace file watch, the
choice of the next shard map, and the per-row dedup verdict and retired-shard filter."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from updatestream_cli import manifests
from updatestream_jobs.source.arrow_rows import FIELDS
from updatestream_jobs.source.copy_groups import RowClassifier, Via, with_origins
from updatestream_jobs.source.hopper import map_for_shards, next_map, stopped_serving_at
from updatestream_jobs.source.keyspace_watch import (
    FileKeyspaceWatch,
    FixedKeyspace,
    KubernetesKeyspaceWatch,
    open_watch,
)
from updatestream_jobs.source.offsets import HopInfo, StreamOffset, tokens_of

from updatestream.binlog.errors import SourceOptionsError
from updatestream.binlog.events import ChangeEvent
from updatestream.binlog.row_converter import heartbeat
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import parse_position
from updatestream.core.keyrange import KeyRange
from updatestream.core.recent_rows import RecentTransactions
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken, SourceProvenance
from updatestream.spec import Keyspace, parse_keyspace


def keyspace(serving: list[str], declared: list[str], history: list[tuple[float, str]]) -> Keyspace:
    entries = [
        manifests.shard(name, "127.0.0.1", 3306 + i, "reader") for i, name in enumerate(declared)
    ]
    return parse_keyspace(
        manifests.keyspace(
            entries,
            {"sharded": True, "vindexes": {}, "tables": {}},
            serving=serving,
            shardMapHistory=[{"at": at, "shards": shards.split(",")} for at, shards in history],
        )
    )


def token(
    shard: str, pos: str, ts: int = 100, source: SourceProvenance | None = None
) -> EventToken:
    return EventToken(ts, shard, parse_position(pos), source)


# -- offsets --------------------------------------------------------------------------------


def test_an_offset_round_trips_and_an_offset_without_hop_state_still_reads() -> None:
    hop = HopInfo(
        number=2,
        from_map="-80,80-",
        to_map="-40,40-80,80-",
        from_shards=("-80", "80-"),
        to_shards=("-40", "40-80", "80-"),
        detected_at=12.5,
        serving_changed_at=11.0,
        starts={"-40": token("-40", "3-3-1", 95)},
        watermarks={"-80": "1-1-9"},
    )
    offset = StreamOffset(
        {"-40": token("-40", "3-3-5"), "80-": token("80-", "2-2-7")},
        "-40,40-80,80-",
        DedupFilter({"-80": parse_position("1-1-9")}, {"-40": 100}),
        hop,
    )
    data = json.loads(json.dumps(offset.to_json()))
    assert StreamOffset.from_json(data) == offset
    assert tokens_of(data) == {"-40": data["-40"], "80-": data["80-"]}
    legacy = {"-80": token("-80", "1-1-3").to_json()}
    assert StreamOffset.from_json(legacy) == StreamOffset({"-80": token("-80", "1-1-3")})


def test_the_batch_ending_at_a_new_hop_number_is_the_hop_batch() -> None:
    def with_hop(number: int | None) -> StreamOffset:
        hop = None
        if number is not None:
            hop = HopInfo(number, "-", "-80,80-", ("-",), ("-80", "80-"), 1.0)
        return StreamOffset({}, None, None, hop)

    assert with_hop(1).new_hop(with_hop(None)) == with_hop(1).hop
    assert with_hop(2).new_hop(with_hop(1)) == with_hop(2).hop
    assert with_hop(1).new_hop(with_hop(1)) is None
    assert with_hop(None).new_hop(with_hop(1)) is None


def test_a_malformed_hop_in_an_offset_is_a_typed_error_naming_the_field() -> None:
    with pytest.raises(SourceOptionsError, match="offset field '_hop' is malformed"):
        StreamOffset.from_json({"_hop": {"number": 1}})
    with pytest.raises(SourceOptionsError, match="offset of shard -80 is malformed"):
        StreamOffset.from_json({"-80": {"ts": "x"}})


# -- the Keyspace watch -----------------------------------------------------------------------


def write(path: Path, doc: Keyspace) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc.model_dump(mode="json", by_alias=True, exclude_none=True)))
    tmp.replace(path)


def test_a_file_watch_follows_rewrites_and_keeps_the_last_good_keyspace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keyspace.yaml"
    before = keyspace(["-80", "80-"], ["-80", "80-"], [(1.0, "-80,80-")])
    write(path, before)
    watch = open_watch(None, before, str(path))
    assert isinstance(watch, FileKeyspaceWatch) and watch.current() == before
    after = keyspace(
        ["-40", "40-80", "80-"],
        ["-80", "80-", "-40", "40-80"],
        [(1.0, "-80,80-"), (2.0, "-40,40-80,80-")],
    )
    write(path, after)
    assert watch.current() == after
    path.write_text("spec: [unfinished")
    with caplog.at_level(logging.WARNING):
        assert watch.current() == after
        assert watch.current() == after
    warnings = [r for r in caplog.records if "cannot re-read the Keyspace" in r.getMessage()]
    assert len(warnings) == 1  # once per distinct problem
    other = after.model_copy(update={"metadata": after.metadata.model_copy(update={"name": "x"})})
    write(path, other)
    os.utime(path, ns=(1, 1))
    assert watch.current() == after  # a manifest of another keyspace is not followed


def test_inline_keyspace_json_is_never_re_read_and_bad_watch_sources_are_named(
    tmp_path: Path,
) -> None:
    doc = keyspace(["-"], ["-"], [])
    assert isinstance(open_watch(None, doc, doc.model_dump_json()), FixedKeyspace)
    with pytest.raises(SourceOptionsError, match="kubernetes:<namespace>/<name>"):
        open_watch("kubernetes:only-a-name", doc, "x")
    with pytest.raises(SourceOptionsError, match="not a readable file"):
        open_watch(str(tmp_path / "missing.yaml"), doc, "x")


def test_a_kubernetes_watch_polls_at_most_once_per_interval_and_survives_errors() -> None:
    docs: list[Any] = []
    now = [0.0]
    first = keyspace(["-80", "80-"], ["-80", "80-"], [])
    second = keyspace(["-40", "40-80", "80-"], ["-80", "80-", "-40", "40-80"], [])

    def getter(namespace: str, name: str) -> dict[str, Any]:
        assert (namespace, name) == ("streams", "commerce")
        value = docs.pop(0)
        if isinstance(value, Exception):
            raise value
        return dict(value.model_dump(mode="json", by_alias=True), status={"x": 1})

    watch = KubernetesKeyspaceWatch(
        "streams", "commerce", first, getter=getter, poll_seconds=1.0, clock=lambda: now[0]
    )
    docs[:] = [RuntimeError("connection refused"), second]
    assert watch.current() == first  # the API failed: the last Keyspace stays
    assert watch.current() == first  # within the interval: not asked again
    now[0] = 1.5
    assert watch.current() == second
    assert docs == []


# -- where a hop goes -------------------------------------------------------------------------

HISTORY = [(1.0, "-80,80-"), (2.0, "-40,40-80,80-"), (3.0, "-20,20-40,40-80,80-")]


def test_a_stream_hops_through_the_history_one_map_at_a_time_while_shards_exist() -> None:
    ks = keyspace(
        ["-20", "20-40", "40-80", "80-"],
        ["-40", "40-80", "80-", "-20", "20-40"],  # -80 retired, -40 still declared
        HISTORY,
    )
    assert next_map(ks, ShardMap.parse("-80,80-"), KeyRange.parse("-")) == (
        ShardMap.parse("-40,40-80,80-"),
        2.0,
    )
    assert next_map(ks, ShardMap.parse("-40,40-80,80-"), KeyRange.parse("-")) == (
        ShardMap.parse("-20,20-40,40-80,80-"),
        3.0,
    )


def test_a_shard_stopped_serving_when_the_first_map_without_it_began() -> None:
    merged_back = [*HISTORY, (4.0, "-80,80-")]
    ks = keyspace(["-80", "80-"], ["-80", "80-", "-40", "40-80"], merged_back)
    assert stopped_serving_at(ks, "-40") == 3.0  # the last map with -40 began at 2.0
    assert stopped_serving_at(ks, "-20") == 4.0
    assert stopped_serving_at(ks, "-80") is None  # serving again after the merge
    assert stopped_serving_at(ks, "80-") is None
    assert stopped_serving_at(ks, "c0-") is None  # the history does not name it
    split = keyspace(["-40", "40-80", "80-"], ["-80", "-40", "40-80", "80-"], HISTORY[:2])
    assert stopped_serving_at(split, "-80") == 2.0


def test_a_capped_heartbeat_keeps_its_token_and_says_the_earlier_time() -> None:
    token = EventToken(1700000100, "-80", parse_position("0-1-100"))
    capped = heartbeat("commerce", token, 1700000040)
    assert capped.timestamp == 1700000040 and capped.token == token.dumps()
    assert heartbeat("commerce", token, 1700000200).timestamp == 1700000100
    assert heartbeat("commerce", token).timestamp == 1700000100


def test_an_intermediate_map_whose_shards_are_gone_is_skipped() -> None:
    ks = keyspace(["-20", "20-40", "40-80", "80-"], ["80-", "-20", "20-40", "40-80"], HISTORY)
    serving = ShardMap.parse("-20,20-40,40-80,80-")
    assert next_map(ks, ShardMap.parse("-80,80-"), KeyRange.parse("-")) == (serving, 3.0)
    # Only -80 changed for key range 80-: nothing to read in between.
    assert map_for_shards(ks, {"80-"}, KeyRange.parse("80-")) == serving


def test_the_shards_a_start_names_are_found_in_the_history_or_refused() -> None:
    ks = keyspace(["-40", "40-80", "80-"], ["-40", "40-80", "80-"], HISTORY[:2])
    assert map_for_shards(ks, {"-80", "80-"}, KeyRange.parse("-")) == ShardMap.parse("-80,80-")
    with pytest.raises(SourceOptionsError, match="no shard map of Keyspace commerce"):
        map_for_shards(ks, {"-c0", "c0-"}, KeyRange.parse("-"))


# -- rows -----------------------------------------------------------------------------------


def row(shard: str, tok: EventToken, op: str = "insert") -> tuple[Any, ...]:
    source = tok.source
    event = ChangeEvent(
        keyspace="commerce",
        shard=shard,
        op=op,  # type: ignore[arg-type]
        table="users",
        pk='{"id":1}',
        keyspace_id="00",
        before=None,
        after="{}",
        token=tok.dumps(),
        timestamp=tok.timestamp,
        gtid=str(tok.position),
        tx_index=0,
        source_shard=source.shard if source else None,
        source_gtid=str(source.position) if source else None,
        source_timestamp=source.timestamp if source else None,
    )
    return tuple(getattr(event, name) for name in FIELDS)


def copy_of(pos: str, ts: int = 100) -> EventToken:
    return token("-40", "3-3-9", ts, SourceProvenance("-80", parse_position(pos), ts))


def test_rows_get_the_dedup_rule_verdict() -> None:
    classify = RowClassifier(DedupFilter({"-80": parse_position("1-1-50")}, {"-40": 100}))
    assert classify(row("-40", copy_of("1-1-50"))) == "hop"
    assert classify(row("-40", copy_of("1-1-51"))) is None
    assert classify(row("-40", token("-40", "3-3-10", ts=100))) == "unknown"
    assert classify(row("-40", token("-40", "3-3-11", ts=101))) is None
    assert classify(row("-40", copy_of("1-1-10"), op="heartbeat")) is None


def test_a_retired_shard_is_read_from_its_copies_between_two_positions() -> None:
    via = Via.from_json(Via("-80", parse_position("1-1-10"), parse_position("1-1-20")).to_json())
    assert not via(row("-40", copy_of("1-1-10")))
    assert via(row("-40", copy_of("1-1-11")))
    assert via(row("-40", copy_of("1-1-20")))
    assert not via(row("-40", copy_of("1-1-21")))
    assert not via(row("-40", token("-40", "3-3-12")))  # the destination's own write


def group_rows(ksids: list[str], covered_from: str, pos: str) -> list[tuple[Any, ...]]:
    """The rows of one destination transaction copying a group of source transactions."""
    provenance = SourceProvenance("-80", parse_position(pos), 100, parse_position(covered_from))
    tok = token("-40", "3-3-9", 100, provenance)
    return [(*row("-40", tok)[:5], ksid, *row("-40", tok)[6:]) for ksid in ksids]


def test_a_group_straddling_the_watermark_drops_exactly_its_delivered_prefix() -> None:
    # the stream read 1-1-48 (rows 01 and 2a) and 1-1-50 (row 33; 1-1-49 had none in range)
    recent = RecentTransactions(parse_position("1-1-47")).then(
        [
            (parse_position("1-1-48"), ("01", "2a", "c0")),  # c0: outside the destination -40
            (parse_position("1-1-49"), ()),
            (parse_position("1-1-50"), ("33",)),
        ]
    )
    dedup = DedupFilter({"-80": parse_position("1-1-50")}, {}, {"-80": recent})
    rows = group_rows(["01", "2a", "33", "05", "3f"], "1-1-47", "1-1-53")  # 48..53
    marked = list(RowClassifier(dedup).marked(iter(rows)))
    assert [r[-1] for r in marked] == ["hop", "hop", "hop", None, None]
    # a transaction's rows in another order (a batched delete logs them in key order): the same
    reordered = group_rows(["2a", "01", "33", "05", "3f"], "1-1-47", "1-1-53")
    marked = list(RowClassifier(dedup).marked(iter(reordered)))
    assert [r[-1] for r in marked] == ["hop", "hop", "hop", None, None]
    # rows that do not match what was read: nothing is dropped on a guess
    odd = group_rows(["01", "05", "2a", "33"], "1-1-47", "1-1-53")
    assert [r[-1] for r in RowClassifier(dedup).marked(iter(odd))] == ["straddle"] * 4
    # no record reaching back to the group's start: delivered and counted
    blind = DedupFilter({"-80": parse_position("1-1-50")})
    assert [r[-1] for r in RowClassifier(blind).marked(iter(rows))] == ["straddle"] * 5


def test_a_retired_shard_read_from_its_copies_slices_groups_at_both_ends() -> None:
    # the stream read -80's transactions 48 to 52; the replayed batch is (1-1-49, 1-1-51]
    record = RecentTransactions(parse_position("1-1-47")).then(
        [(parse_position(f"1-1-{n}"), (f"{n - 40:02x}",)) for n in range(48, 53)]
    )
    via = Via("-80", parse_position("1-1-49"), parse_position("1-1-51"), record)
    via = Via.from_json(via.to_json())
    # one group copies 48..53 (rows 08 09 0a 0b 0c, then 0d of 53 the stream never read)
    rows = group_rows(["08", "09", "0a", "0b", "0c", "0d"], "1-1-47", "1-1-53")
    kept = list(RowClassifier(DedupFilter({}), via).marked(iter(rows)))
    assert [r[5] for r in kept] == ["0a", "0b"] and {r[-1] for r in kept} == {None}
    # each row has the identity of the change the stream read from -80: a replay recognises it
    gtid, index = FIELDS.index("source_gtid"), FIELDS.index("tx_index")
    assert [(r[gtid], r[index]) for r in kept] == [("1-1-50", 0), ("1-1-51", 0)]
    # without a record the group's part cannot be told: all of it, counted
    blind = Via("-80", parse_position("1-1-49"), parse_position("1-1-51"))
    kept = list(RowClassifier(DedupFilter({}), blind).marked(iter(rows)))
    assert [r[-1] for r in kept] == ["straddle"] * 6


def test_a_replayed_range_that_begins_inside_a_group_keeps_the_group_s_last_rows() -> None:
    # the batch replayed is (1-1-49, 1-1-52]; its record begins at 49, inside the group 48..51
    record = RecentTransactions(parse_position("1-1-49")).then(
        [(parse_position(f"1-1-{n}"), (f"{n - 40:02x}",)) for n in range(50, 53)]
    )
    via = Via("-80", parse_position("1-1-49"), parse_position("1-1-52"), record)
    rows = group_rows(["08", "09", "0a", "0b"], "1-1-47", "1-1-51")  # 48..51
    kept = list(RowClassifier(DedupFilter({}), via).marked(iter(rows)))
    assert [r[5] for r in kept] == ["0a", "0b"] and {r[-1] for r in kept} == {None}
    gtid, index = FIELDS.index("source_gtid"), FIELDS.index("tx_index")
    assert [(r[gtid], r[index]) for r in kept] == [("1-1-50", 0), ("1-1-51", 0)]
    # last rows that are not the record's: nothing is dropped on a guess
    odd = group_rows(["08", "09", "0b", "0c"], "1-1-47", "1-1-51")
    kept = list(RowClassifier(DedupFilter({}), via).marked(iter(odd)))
    assert [r[-1] for r in kept] == ["straddle"] * 4


def test_a_group_s_rows_get_the_identity_of_the_source_transaction_they_copy() -> None:
    # two changes to one key in 1-1-48, a third in 1-1-49: indexes count within each transaction
    record = RecentTransactions(parse_position("1-1-47")).then(
        [(parse_position("1-1-48"), ("08", "08", "c1")), (parse_position("1-1-49"), ("08",))]
    )
    rows = group_rows(["08", "08", "08"], "1-1-47", "1-1-49")
    source = EventToken.loads(rows[0][FIELDS.index("token")]).source
    assert source is not None
    gtid, index = FIELDS.index("source_gtid"), FIELDS.index("tx_index")
    exact = with_origins(rows, source, record, "-40")
    assert [(r[gtid], r[index]) for r in exact] == [("1-1-48", 0), ("1-1-48", 1), ("1-1-49", 0)]
    # rows that are not the record's, in order, or no record: the group's own identity
    odd = group_rows(["08", "09", "08"], "1-1-47", "1-1-49")
    assert [r[gtid] for r in with_origins(odd, source, record, "-40")] == ["1-1-49"] * 3
    assert [r[gtid] for r in with_origins(rows, source, None, "-40")] == ["1-1-49"] * 3


def test_a_transaction_s_rows_in_another_order_still_get_its_identity(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The development cluster's filtered replication deletes a transaction's rows with one
    `DELETE ... IN`, which the binlog lists in key order: the rows of 1-1-48 come as 0a, 08
    although the source logged 08, 0a."""
    record = RecentTransactions(parse_position("1-1-47")).then(
        [(parse_position("1-1-48"), ("08", "0a")), (parse_position("1-1-49"), ("08",))]
    )
    rows = group_rows(["0a", "08", "08"], "1-1-47", "1-1-49")
    source = EventToken.loads(rows[0][FIELDS.index("token")]).source
    assert source is not None
    gtid = FIELDS.index("source_gtid")
    exact = with_origins(rows, source, record, "-40")
    assert [r[gtid] for r in exact] == ["1-1-48", "1-1-48", "1-1-49"]
    # a row of 1-1-49 among 1-1-48's is not a reordering inside one transaction: unchanged
    crossed = group_rows(["08", "08", "0a"], "1-1-47", "1-1-49")
    assert [r[gtid] for r in with_origins(crossed, source, record, "-40")] == ["1-1-49"] * 3
    assert "may take them again" in caplog.text  # and the log says what that can cost
