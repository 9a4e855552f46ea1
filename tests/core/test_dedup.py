"""The dedup rule: hop duplicates by provenance, overlap events without it, JSON and pickling."""

from __future__ import annotations

import json
import pickle

import pytest

from tests.core.builders import refusal, tok
from updatestream.core.dedup import DedupFilter, DedupFilterError, DedupVerdict
from updatestream.core.gtid import Flavor, GTIDPosition, PositionError, parse_position
from updatestream.core.hop_plan import plan_hop
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
D, H, U = DedupVerdict.DELIVER, DedupVerdict.DUPLICATE_HOP, DedupVerdict.OVERLAP_UNKNOWN


def marks(**by_shard: str) -> dict[str, GTIDPosition]:
    return {shard: parse_position(pos) for shard, pos in by_shard.items()}


FILTER = DedupFilter(
    {"-80": parse_position("0-1-50"), "80-": parse_position(f"{U1}:1-20")},
    {"-40": 100, "40-80": 100},
)

CASES = [
    ("provenance at watermark", tok(100, "-40", "2-1-9", ("-80", "0-1-50", 100)), H),
    ("provenance below watermark", tok(90, "40-80", "3-1-9", ("-80", "0-1-3", 90)), H),
    ("provenance above watermark", tok(100, "-40", "2-1-10", ("-80", "0-1-51", 100)), D),
    ("provenance in another domain", tok(100, "-40", "2-1-10", ("-80", "5-1-1", 100)), D),
    ("provenance from an unknown source", tok(100, "-40", "2-1-10", ("c0-", "0-1-1", 100)), D),
    ("mysql provenance inside", tok(100, "80-c0", "9-1-1", ("80-", f"{U1}:1-7", 100)), H),
    ("mysql provenance outside", tok(100, "80-c0", "9-1-1", ("80-", f"{U1}:1-21", 100)), D),
    ("no provenance inside window", tok(100, "-40", "2-1-11"), U),
    ("no provenance before window end", tok(42, "40-80", "3-1-11"), U),
    ("no provenance after window", tok(101, "-40", "2-1-12"), D),
    ("no provenance, shard without window", tok(50, "80-", "4-1-1"), D),
    ("non-canonical spellings", tok(100, "0000-4000", "2-1-9", ("00-80", "0-1-50", 100)), H),
]


@pytest.mark.parametrize(("token", "verdict"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_classify(token: EventToken, verdict: DedupVerdict) -> None:
    assert FILTER.classify(token) is verdict


def test_verdict_values() -> None:
    assert DedupVerdict.DUPLICATE_HOP.value == "hop"
    assert DedupVerdict.OVERLAP_UNKNOWN.value == "unknown"
    assert DedupVerdict("deliver") is DedupVerdict.DELIVER


def test_mixed_flavours_raise() -> None:
    with pytest.raises(PositionError):
        FILTER.classify(tok(100, "-40", "2-1-9", ("80-", "0-1-5", 100)))


def test_empty_filter_delivers_everything() -> None:
    empty = DedupFilter({})
    assert empty.is_empty()
    assert not FILTER.is_empty()
    assert empty.classify(tok(1, "-40", "2-1-9", ("-80", "0-1-1", 1))) is D
    assert empty.classify(tok(1, "-40", "2-1-9")) is D


def filter_of_hop(old: str, new: str, last: dict[str, EventToken]) -> DedupFilter:
    """The dedup filter of the hop from shard map `old` to `new` after the `last` tokens."""
    return DedupFilter.from_plan(plan_hop(ShardMap.parse(old), ShardMap.parse(new), last))


def test_from_plan_split() -> None:
    dedup = filter_of_hop(
        "-80,80-",
        "-40,40-80,80-",
        {"-80": tok(100, "-80", "0-1-50"), "80-": tok(104, "80-", "1-1-5")},
    )
    assert dedup == DedupFilter(marks(**{"-80": "0-1-50"}), {"-40": 100, "40-80": 100})
    # the hop duplicate is dropped, the next copy and unchanged-shard events are delivered
    assert dedup.classify(tok(100, "-40", "2-1-1", ("-80", "0-1-50", 100))) is H
    assert dedup.classify(tok(101, "-40", "2-1-2", ("-80", "0-1-51", 101))) is D
    assert dedup.classify(tok(100, "80-", "1-1-6")) is D


def test_from_plan_merge_window_ends_at_latest_source() -> None:
    dedup = filter_of_hop(
        "-40,40-80,80-",
        "-80,80-",
        {"-40": tok(100, "-40", "0-1-50"), "40-80": tok(90, "40-80", "1-1-7")},
    )
    assert dict(dedup.overlap_until) == {"-80": 100}
    assert dedup.classify(tok(95, "-80", "7-1-1")) is U
    assert dedup.classify(tok(95, "-80", "7-1-1", ("40-80", "1-1-8", 95))) is D
    assert dedup.classify(tok(95, "-80", "7-1-1", ("40-80", "1-1-7", 90))) is H


def test_merged_later_hop_wins_for_recurring_names() -> None:
    first = DedupFilter(marks(**{"-80": "0-1-50"}), {"-40": 100, "40-80": 100})
    second = DedupFilter(
        marks(**{"-40": "2-1-70", "40-80": "3-1-30", "-80": "9-1-1"}), {"-80": 200}
    )
    both = first.merged(second)
    assert {shard: str(pos) for shard, pos in both.watermarks.items()} == {
        "-40": "2-1-70",
        "-80": "9-1-1",
        "40-80": "3-1-30",
    }
    assert dict(both.overlap_until) == {"-40": 100, "40-80": 100, "-80": 200}
    assert both.classify(tok(200, "-80", "7-1-1", ("-40", "2-1-70", 200))) is H
    assert both.classify(tok(199, "-80", "7-1-1")) is U
    # the operands are unchanged
    assert dict(first.overlap_until) == {"-40": 100, "40-80": 100}


ROUND_TRIPS = [
    DedupFilter({}),
    FILTER,
    DedupFilter({"-80": parse_position("", Flavor.MARIADB)}, {}),
    DedupFilter({"-": parse_position("", Flavor.MYSQL)}, {"-80": 0}),
]


@pytest.mark.parametrize("dedup", ROUND_TRIPS, ids=repr)
def test_round_trips(dedup: DedupFilter) -> None:
    data = dedup.to_json()
    text = json.dumps(data)
    assert DedupFilter.from_json(json.loads(text)) == dedup
    assert pickle.loads(pickle.dumps(dedup)) == dedup
    assert hash(pickle.loads(pickle.dumps(dedup))) == hash(dedup)


def test_json_shape() -> None:
    assert FILTER.to_json() == {
        "watermarks": {
            "-80": {"pos": "0-1-50", "flavor": "mariadb"},
            "80-": {"pos": f"{U1}:1-20", "flavor": "mysql"},
        },
        "overlap_until": {"-40": 100, "40-80": 100},
    }


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"watermarks": []}, "'watermarks'"),
        ({"watermarks": {"-80": "0-1-5"}}, "'watermarks.-80'"),
        ({"watermarks": {"-80": {"pos": "0-1-5"}}}, "'watermarks.-80.flavor'"),
        ({"watermarks": {"-80": {"pos": 5, "flavor": "mariadb"}}}, "'watermarks.-80.pos'"),
        ({"watermarks": {"-80": {"pos": "0-1", "flavor": "mariadb"}}}, "'watermarks.-80.pos'"),
        ({"overlap_until": [1]}, "'overlap_until'"),
        ({"overlap_until": {"-40": "100"}}, "'overlap_until.-40'"),
        ({"overlap_until": {"-40": -1}}, "'overlap_until.-40'"),
    ],
)
def test_from_json_malformed(data: dict[str, object], field: str) -> None:
    assert field in refusal(DedupFilterError, lambda: DedupFilter.from_json(data))


def test_constructor_validates() -> None:
    with pytest.raises(DedupFilterError, match="watermark of source shard '-80'"):
        DedupFilter({"-80": "0-1-5"})  # type: ignore[dict-item]
    with pytest.raises(DedupFilterError, match="overlap_until of shard '-40'"):
        DedupFilter({}, {"-40": 1.5})  # type: ignore[dict-item]


def test_read_only() -> None:
    with pytest.raises(TypeError):
        FILTER.watermarks["x"] = parse_position("0-1-1")  # type: ignore[index]
    with pytest.raises(AttributeError):
        FILTER.foo = 1  # type: ignore[attr-defined]
