"""Table-driven tests of shard map validation, lookup, overlaps and history."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from tests.core.builders import kr, refusal
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import parse_shard_names
from updatestream.core.shardmap import (
    ShardMap,
    ShardMapChange,
    ShardMapError,
    ShardMapHistory,
    overlaps,
)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("-", ("-",)),
        ("-80,80-", ("-80", "80-")),
        ("80-,-80", ("-80", "80-")),
        ("c0-,-40,80-c0,40-80", ("-40", "40-80", "80-c0", "c0-")),
        ("-8000,80-", ("-80", "80-")),
        ("-4080,4080-", ("-4080", "4080-")),
    ],
)
def test_valid_maps_sort_and_format(text: str, names: tuple[str, ...]) -> None:
    shard_map = ShardMap.parse(text)
    assert shard_map.names == names
    assert str(shard_map) == ",".join(names)
    assert shard_map.shards == tuple(kr(name) for name in names)
    assert ShardMap(parse_shard_names(text)) == shard_map
    assert len(shard_map) == len(names)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("-40,80-", "no shard covers 40-80"),
        ("40-", "no shard covers -40"),
        ("-80", "no shard covers 80-"),
        ("-40,40-80", "no shard covers 80-"),
        ("-80,40-c0,c0-", "-80 and 40-c0 overlap on 40-80"),
        ("-80,-80,80-", "-80 and -80 overlap on -80"),
        ("-,80-", "- and 80- overlap on 80-"),
        ("-,-", "- and - overlap on -"),
        ("-c0,40-80,80-", "-c0 and 40-80 overlap on 40-80"),
        ("-40,80-,-40", "-40 and -40 overlap on -40"),
    ],
)
def test_invalid_maps_name_the_gap_or_overlap(text: str, fragment: str) -> None:
    message = refusal(ShardMapError, lambda: ShardMap.parse(text))
    assert fragment in message
    assert "list shards that cover the whole keyspace exactly once" in message
    assert issubclass(ShardMapError, UpdateStreamError)


@pytest.mark.parametrize(("text", "fragment"), [("", "is empty"), ("-80,8-", "odd number")])
def test_parse_errors_are_shard_map_errors(text: str, fragment: str) -> None:
    with pytest.raises(ShardMapError, match=fragment):
        ShardMap.parse(text)


def test_empty_and_wrongly_typed_maps() -> None:
    with pytest.raises(ShardMapError, match="shard map is empty"):
        ShardMap([])
    with pytest.raises(ShardMapError, match="must be key ranges"):
        ShardMap(["-80", "80-"])  # type: ignore[list-item]


def test_immutable_hashable_equal_by_shards() -> None:
    a = ShardMap.parse("-80,80-")
    b = ShardMap.parse("80-,0000-8000")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, ShardMap.parse("-")}) == 2
    assert a != ShardMap.parse("-")
    assert kr("-80") in a
    assert list(a) == [kr("-80"), kr("80-")]
    with pytest.raises(AttributeError):
        a.foo = 1
    assert eval(repr(a), {"ShardMap": ShardMap}) == a


@pytest.mark.parametrize(
    ("shards", "keyspace_id", "shard"),
    [
        ("-", "", "-"),
        ("-", "ffffffffffffffff", "-"),
        ("-80,80-", "", "-80"),
        ("-80,80-", "7fffffffffffffff", "-80"),
        ("-80,80-", "80", "80-"),
        ("-80,80-", "8000000000000000", "80-"),
        ("-80,80-", "8000000000000001", "80-"),
        ("-40,40-80,80-c0,c0-", "166b40b44aba4bd6", "-40"),
        ("-40,40-80,80-c0,c0-", "4eb190c9a2fa169c", "40-80"),
        ("-40,40-80,80-c0,c0-", "d2fd8867d50d2dfe", "c0-"),
        ("-40,40-80,80-c0,c0-", "c0", "c0-"),
        ("-40,40-80,80-c0,c0-", "bfffffffffffffff", "80-c0"),
        ("-4080,4080-", "4080", "4080-"),
        ("-4080,4080-", "407fff", "-4080"),
    ],
)
def test_shard_for(shards: str, keyspace_id: str, shard: str) -> None:
    assert ShardMap.parse(shards).shard_for(bytes.fromhex(keyspace_id)) == kr(shard)


@pytest.mark.parametrize(
    ("shards", "key_range", "found"),
    [
        ("-80,80-", "-", "-80,80-"),
        ("-80,80-", "-80", "-80"),
        ("-80,80-", "80-", "80-"),
        ("-80,80-", "40-c0", "-80,80-"),
        ("-80,80-", "40-80", "-80"),
        ("-80,80-", "c0-", "80-"),
        ("-40,40-80,80-c0,c0-", "-80", "-40,40-80"),
        ("-40,40-80,80-c0,c0-", "30-90", "-40,40-80,80-c0"),
        ("-40,40-80,80-c0,c0-", "80-", "80-c0,c0-"),
        ("-", "40-80", "-"),
    ],
)
def test_shards_for(shards: str, key_range: str, found: str) -> None:
    result = ShardMap.parse(shards).shards_for(kr(key_range))
    assert ",".join(shard.name for shard in result) == found


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("-80,80-", "-80,80-", {"-80": "-80", "80-": "80-"}),
        ("-", "-80,80-", {"-80": "-", "80-": "-"}),
        ("-80,80-", "-", {"-": "-80,80-"}),
        ("-80,80-", "-40,40-80,80-", {"-40": "-80", "40-80": "-80", "80-": "80-"}),
        ("-40,40-80,80-", "-80,80-", {"-80": "-40,40-80", "80-": "80-"}),
        ("-80,80-", "-40,40-c0,c0-", {"-40": "-80", "40-c0": "-80,80-", "c0-": "80-"}),
    ],
)
def test_overlaps(old: str, new: str, expected: dict[str, str]) -> None:
    result = overlaps(ShardMap.parse(old), ShardMap.parse(new))
    assert {dst.name: ",".join(src.name for src in srcs) for dst, srcs in result.items()} == (
        expected
    )
    assert list(result) == list(ShardMap.parse(new).shards)


def _history() -> ShardMapHistory:
    return (
        ShardMapHistory()
        .with_change(ShardMap.parse("-"), 100.0)
        .with_change(ShardMap.parse("-80,80-"), 200.5)
        .with_change(ShardMap.parse("-40,40-80,80-"), 300.0)
    )


@pytest.mark.parametrize(
    ("ts", "shards"),
    [
        (100.0, "-"),
        (150.0, "-"),
        (200.4999, "-"),
        (200.5, "-80,80-"),
        (299.0, "-80,80-"),
        (300.0, "-40,40-80,80-"),
        (1e12, "-40,40-80,80-"),
    ],
)
def test_history_at(ts: float, shards: str) -> None:
    assert _history().at(ts) == ShardMap.parse(shards)


def test_history_current_entries_and_immutability() -> None:
    history = _history()
    assert history.current == ShardMap.parse("-40,40-80,80-")
    assert [entry.at for entry in history.entries] == [100.0, 200.5, 300.0]
    assert len(history) == 3
    extended = history.with_change(ShardMap.parse("-80,80-"), 400)
    assert len(history) == 3
    assert extended.current == ShardMap.parse("-80,80-")
    assert extended != history
    with pytest.raises(AttributeError):
        history.entries = ()  # type: ignore[misc]


def test_history_equal_times_later_wins() -> None:
    history = (
        ShardMapHistory()
        .with_change(ShardMap.parse("-"), 5)
        .with_change(ShardMap.parse("-80,80-"), 5)
    )
    assert history.at(5) == ShardMap.parse("-80,80-")


def test_history_errors() -> None:
    with pytest.raises(ShardMapError, match=r"no shard map is known at 99\.0: the first change is"):
        _history().at(99.0)
    with pytest.raises(ShardMapError, match="shard map history is empty"):
        _ = ShardMapHistory().current
    with pytest.raises(ShardMapError, match="it is empty"):
        ShardMapHistory().at(1.0)
    with pytest.raises(ShardMapError, match="before the last change"):
        _history().with_change(ShardMap.parse("-"), 299.0)
    with pytest.raises(ShardMapError, match="goes back in time"):
        ShardMapHistory(
            [
                ShardMapChange(at=2.0, shard_map=ShardMap.parse("-")),
                ShardMapChange(at=1.0, shard_map=ShardMap.parse("-80,80-")),
            ]
        )
    with pytest.raises(ShardMapError, match="not a finite number"):
        ShardMapChange(at=float("nan"), shard_map=ShardMap.parse("-"))
    with pytest.raises(ShardMapError, match="unix seconds"):
        ShardMapChange(at="now", shard_map=ShardMap.parse("-"))  # type: ignore[arg-type]


def test_history_json_round_trip() -> None:
    history = _history()
    data = history.to_json()
    assert data == [
        {"at": 100.0, "shards": "-"},
        {"at": 200.5, "shards": "-80,80-"},
        {"at": 300.0, "shards": "-40,40-80,80-"},
    ]
    assert ShardMapHistory.from_json(json.loads(json.dumps(data))) == history
    assert ShardMapHistory.from_json([]) == ShardMapHistory()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"at": 1, "shards": "-"}, "must be a list"),
        ([{"at": 1}], "entry 0"),
        ([{"at": 1, "shards": "-", "extra": 1}], "exactly 'at'"),
        ([{"at": 1, "shards": ["-"]}], "'shards' must be text"),
        ([{"at": 1, "shards": "-"}, {"at": 2, "shards": "-40,80-"}], "entry 1: shard map"),
        ([{"at": 1, "shards": "-"}, {"at": 2, "shards": "-40,80-"}], "no shard covers 40-80"),
        ([{"at": "x", "shards": "-"}], "entry 0: shard map change time"),
        ([{"at": 2, "shards": "-"}, {"at": 1, "shards": "-"}], "goes back in time"),
    ],
)
def test_history_from_json_rejects(data: object, fragment: str) -> None:
    with pytest.raises(ShardMapError, match=fragment):
        ShardMapHistory.from_json(data)


def test_pickles_for_spark_tasks() -> None:
    shard_map = ShardMap.parse("-40,40-80,80-")
    restored = pickle.loads(pickle.dumps(shard_map))
    assert restored == shard_map
    assert restored.shard_for(b"\x50") == kr("40-80")
    assert copy.deepcopy(shard_map) == shard_map
    history = _history()
    assert pickle.loads(pickle.dumps(history)) == history
    assert pickle.loads(pickle.dumps(history)).at(250) == ShardMap.parse("-80,80-")
