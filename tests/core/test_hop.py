"""Hop plans for splits, merges, mixed changes, unaligned key ranges and missing positions."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, replace

import pytest

from tests.core.builders import tok
from updatestream.core.gtid import parse_position
from updatestream.core.hop_plan import DestinationStart, HopPlan, HopPlanningError, plan_hop
from updatestream.core.keyrange import FULL_RANGE, KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


@dataclass(frozen=True)
class Case:
    name: str
    old: str
    new: str
    tokens: dict[str, EventToken]
    key_range: str
    destinations: dict[str, tuple[int, tuple[str, ...]]]
    unchanged: tuple[str, ...]
    retired: tuple[str, ...]
    watermarks: dict[str, str]


SPLIT = Case(
    "split",
    "-80,80-",
    "-40,40-80,80-",
    {"-80": tok(100, "-80", "0-1-50"), "80-": tok(105, "80-", "1-2-9")},
    "-",
    {"-40": (100, ("-80",)), "40-80": (100, ("-80",))},
    ("80-",),
    ("-80",),
    {"-80": "0-1-50"},
)

CASES = [
    SPLIT,
    Case(
        "merge",
        "-40,40-80,80-",
        "-80,80-",
        {
            "-40": tok(100, "-40", "0-1-50"),
            "40-80": tok(90, "40-80", "1-1-7"),
            "80-": tok(95, "80-", "2-1-3"),
        },
        "-",
        {"-80": (90, ("-40", "40-80"))},
        ("80-",),
        ("-40", "40-80"),
        {"-40": "0-1-50", "40-80": "1-1-7"},
    ),
    Case(
        "mixed split and merge",
        "-80,80-",
        "-40,40-c0,c0-",
        {"-80": tok(100, "-80", "0-1-50"), "80-": tok(97, "80-", "1-2-9")},
        "-",
        {"-40": (100, ("-80",)), "40-c0": (97, ("-80", "80-")), "c0-": (97, ("80-",))},
        (),
        ("-80", "80-"),
        {"-80": "0-1-50", "80-": "1-2-9"},
    ),
    # the same plan: 30-90 reads from both halves of -80 and from 80-
    replace(SPLIT, name="unaligned key range, split", key_range="30-90"),
    Case(
        # 80- only takes 80-90 from the stream's range: c0- is no source and needs no token
        "unaligned key range, merge",
        "-40,40-80,80-c0,c0-",
        "-80,80-",
        {
            "-40": tok(100, "-40", "0-1-50"),
            "40-80": tok(101, "40-80", "1-1-7"),
            "80-c0": tok(99, "80-c0", "2-1-3"),
        },
        "30-90",
        {"-80": (100, ("-40", "40-80")), "80-": (99, ("80-c0",))},
        (),
        ("-40", "40-80", "80-c0"),
        {"-40": "0-1-50", "40-80": "1-1-7", "80-c0": "2-1-3"},
    ),
    Case(
        "key range inside one destination",
        "-80,80-",
        "-40,40-80,80-",
        {"-80": tok(100, "-80", "0-1-50")},
        "10-20",
        {"-40": (100, ("-80",))},
        (),
        ("-80",),
        {"-80": "0-1-50"},
    ),
    Case(
        "change outside the key range is a no-op",
        "-80,80-",
        "-80,80-c0,c0-",
        {},
        "-80",
        {},
        ("-80",),
        (),
        {},
    ),
    Case(
        "mysql split",
        "-",
        "-80,80-",
        {"-": tok(100, "-", f"{U1}:1-50")},
        "-",
        {"-80": (100, ("-",)), "80-": (100, ("-",))},
        (),
        ("-",),
        {"-": f"{U1}:1-50"},
    ),
]


def hop(old: str, new: str, tokens: dict[str, EventToken], key_range: str = "-") -> HopPlan:
    """`plan_hop` with the shard maps and the stream's key range written as text."""
    return plan_hop(ShardMap.parse(old), ShardMap.parse(new), tokens, KeyRange.parse(key_range))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_plan_hop(case: Case) -> None:
    plan = hop(case.old, case.new, case.tokens, case.key_range)
    assert plan.destinations == {
        name: DestinationStart(name, ts, sources)
        for name, (ts, sources) in case.destinations.items()
    }
    assert plan.unchanged == case.unchanged
    assert plan.retired == case.retired
    assert {name: str(pos) for name, pos in plan.watermarks.items()} == case.watermarks
    assert plan.is_noop is (not case.destinations)
    assert plan.key_range == KeyRange.parse(case.key_range)
    assert plan.old == ShardMap.parse(case.old)
    assert plan.new == ShardMap.parse(case.new)


def test_missing_token_names_the_shard() -> None:
    with pytest.raises(HopPlanningError) as info:
        hop("-80,80-", "-40,40-c0,c0-", {"-80": tok(100, "-80", "0-1-50")})
    message = str(info.value)
    assert "source shard 80-" in message
    assert "40-c0" in message
    assert "record the stream's last delivered token for 80-" in message


@pytest.mark.parametrize(
    ("tokens", "fragment"),
    [
        ({"0": tok(100, "-80", "0-1-50")}, "'0' is not one"),
        ({"-80": tok(100, "80-", "0-1-50")}, "was read from shard '80-'"),
        ({"-80": tok(1, "-80", "0-1-5"), "00-80": tok(1, "-80", "0-1-5")}, "two last delivered"),
    ],
)
def test_bad_last_delivered(tokens: dict[str, EventToken], fragment: str) -> None:
    with pytest.raises(HopPlanningError, match=fragment):
        hop("-80,80-", "-40,40-80,80-", tokens)


def test_non_canonical_shard_spelling_is_accepted() -> None:
    plan = hop("-80,80-", "-40,40-80,80-", {"00-80": tok(100, "0000-8000", "0-1-50")}, "-80")
    assert set(plan.destinations) == {"-40", "40-80"}
    assert str(plan.watermarks["-80"]) == "0-1-50"
    assert plan.is_duplicate(tok(100, "-40", "2-1-1", ("00-80", "0-1-50", 100)))


def test_is_duplicate_uses_exact_source_positions() -> None:
    plan = hop("-80,80-", "-40,40-80,80-", {"-80": tok(100, "-80", "0-1-50")}, "-80")
    assert plan.is_duplicate(tok(100, "-40", "2-1-9", ("-80", "0-1-50", 100)))  # at
    assert plan.is_duplicate(tok(99, "40-80", "3-1-9", ("-80", "0-1-49", 99)))  # below
    assert not plan.is_duplicate(tok(100, "-40", "2-1-10", ("-80", "0-1-51", 100)))  # above
    assert not plan.is_duplicate(tok(100, "-40", "2-1-10"))  # no provenance
    assert not plan.is_duplicate(tok(100, "-40", "2-1-10", ("80-", "1-1-1", 100)))  # not a source
    assert plan.overlap_until() == {"-40": 100, "40-80": 100}


def test_merge_overlap_until_is_the_latest_source() -> None:
    plan = hop(
        "-40,40-80,80-",
        "-80,80-",
        {"-40": tok(100, "-40", "0-1-50"), "40-80": tok(90, "40-80", "1-1-7")},
    )
    assert plan.destinations["-80"].start_timestamp == 90
    assert plan.overlap_until() == {"-80": 100}
    assert dict(plan.source_timestamps) == {"-40": 100, "40-80": 90}


def test_split_then_merge_back_uses_the_sources_own_positions() -> None:
    old_80 = "0-1-50"
    first = hop("-80,80-", "-40,40-80,80-", {"-80": tok(100, "-80", old_80)}, "-80")
    assert set(first.destinations) == {"-40", "40-80"}
    # later the stream reads the destinations, whose tokens carry provenance from the old -80
    on_destinations = {
        "-40": tok(200, "-40", "2-1-70", ("-80", "0-1-140", 200)),
        "40-80": tok(201, "40-80", "3-1-30", ("-80", "0-1-141", 201)),
    }
    second = hop("-40,40-80,80-", "-80,80-", on_destinations, "-80")
    assert second.destinations == {"-80": DestinationStart("-80", 200, ("-40", "40-80"))}
    assert {name: str(pos) for name, pos in second.watermarks.items()} == {
        "-40": "2-1-70",
        "40-80": "3-1-30",
    }
    # events of the new -80 copied from -40 / 40-80 are judged by those shards' positions
    assert second.is_duplicate(tok(200, "-80", "7-1-1", ("-40", "2-1-70", 200)))
    assert not second.is_duplicate(tok(202, "-80", "7-1-2", ("-40", "2-1-71", 202)))
    # provenance naming the old -80 is no source of this hop: not a duplicate of it
    assert not second.is_duplicate(tok(100, "-80", "7-1-3", ("-80", "0-1-10", 100)))


def test_same_map_is_a_noop() -> None:
    shard_map = ShardMap.parse("-40,40-80,80-")
    plan = plan_hop(shard_map, shard_map, {})
    assert plan.is_noop
    assert plan.unchanged == ("-40", "40-80", "80-")
    assert plan.retired == ()
    assert dict(plan.watermarks) == {}
    assert plan.key_range == FULL_RANGE


def test_plan_pickles() -> None:
    plan = hop(
        "-80,80-",
        "-40,40-c0,c0-",
        {"-80": tok(100, "-80", "0-1-50"), "80-": tok(97, "80-", "1-1-5")},
        "30-90",
    )
    copy = pickle.loads(pickle.dumps(plan))
    assert copy == plan
    assert copy.destinations["40-c0"].start_timestamp == 97
    assert copy.is_duplicate(tok(97, "40-c0", "5-1-1", ("80-", "1-1-5", 97)))


def test_plan_is_read_only() -> None:
    plan = hop("-80,80-", "-40,40-80,80-", {"-80": tok(100, "-80", "0-1-50")})
    with pytest.raises(TypeError):
        plan.watermarks["x"] = parse_position("0-1-1")  # type: ignore[index]
    with pytest.raises(AttributeError):
        plan.retired = ()  # type: ignore[misc]
