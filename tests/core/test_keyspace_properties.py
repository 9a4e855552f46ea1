"""Property tests of the key range algebra and shard map validation (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from updatestream.core.keyrange import (
    FULL_RANGE,
    KeyRange,
    are_contiguous,
    normalize_keyspace_id,
    sort_key,
)
from updatestream.core.shardmap import ShardMap, ShardMapError, overlaps

# Short ids make collisions with range bounds (the interesting cases) likely.
keyspace_ids = st.binary(max_size=4) | st.binary(min_size=8, max_size=8)
bounds = st.binary(min_size=1, max_size=3).map(normalize_keyspace_id).filter(bool)


@st.composite
def key_ranges(draw: st.DrawFn) -> KeyRange:
    start = draw(st.just(b"") | bounds)
    end = draw(st.just(b"") | bounds)
    if end:
        assume(start != end)
        start, end = (start, end) if start < end else (end, start)
    return KeyRange(start, end)


@st.composite
def shard_maps(draw: st.DrawFn) -> list[KeyRange]:
    """A complete partition of the keyspace, in random order."""
    cuts = sorted(draw(st.sets(bounds, max_size=8)))
    edges = [b"", *cuts, b""]
    shards = [KeyRange(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
    return draw(st.permutations(shards))


def _sample_ids(*ranges: KeyRange) -> list[bytes]:
    """Ids on and around every bound, where off-by-one mistakes show."""
    ids: list[bytes] = [b"", b"\xff" * 9]
    for key_range in ranges:
        for bound in (key_range.start, key_range.end):
            if bound:
                ids += [bound, bound + b"\x00\x01", bound[:-1] + bytes([bound[-1] - 1]) + b"\xff"]
    return ids


@settings(deadline=None)
@given(key_ranges(), st.integers(min_value=0, max_value=3))
def test_name_round_trips_and_padding_is_ignored(key_range: KeyRange, pad: int) -> None:
    assert KeyRange.parse(key_range.name) == key_range
    assert KeyRange.parse(key_range.name.upper()) == key_range
    zeros = "00" * pad
    start = key_range.start.hex() + zeros if key_range.start else zeros
    end = key_range.end.hex() + zeros if key_range.end else ""
    assert KeyRange.parse(f"{start}-{end}") == key_range
    assert (
        KeyRange(key_range.start + bytes(pad), key_range.end + bytes(pad) if key_range.end else b"")
        == key_range
    )
    assert not key_range.start.endswith(b"\x00")
    assert not key_range.end.endswith(b"\x00")
    assert key_range.name == key_range.name.lower()


@settings(deadline=None)
@given(key_ranges(), keyspace_ids, st.integers(min_value=0, max_value=3))
def test_contains_ignores_trailing_zeros(key_range: KeyRange, kid: bytes, pad: int) -> None:
    assert key_range.contains(kid) == key_range.contains(kid + bytes(pad))


@settings(deadline=None)
@given(key_ranges(), key_ranges(), keyspace_ids)
def test_intersection_agrees_with_contains(a: KeyRange, b: KeyRange, kid: bytes) -> None:
    assert a.intersects(b) == b.intersects(a)
    common = a.intersection(b)
    assert common == b.intersection(a)
    assert (common is not None) == a.intersects(b)
    for sample in [kid, *_sample_ids(a, b)]:
        both = a.contains(sample) and b.contains(sample)
        assert (common is not None and common.contains(sample)) == both
    if common is not None:
        assert a.contains_range(common)
        assert b.contains_range(common)
        assert common.contains(common.start)


@settings(deadline=None)
@given(key_ranges(), key_ranges(), keyspace_ids)
def test_contains_range_agrees_with_contains(a: KeyRange, b: KeyRange, kid: bytes) -> None:
    samples = [kid, *_sample_ids(a, b)]
    if a.contains_range(b):
        assert all(a.contains(s) for s in samples if b.contains(s))
        assert a.intersects(b)
    else:
        # A witness: an id of b outside a.
        witnesses = [b.start, *([a.end] if a.end else [])]
        assert any(b.contains(w) and not a.contains(w) for w in witnesses)
    assert a.contains_range(a)
    assert FULL_RANGE.contains_range(a)


@settings(deadline=None)
@given(key_ranges(), st.integers(min_value=1, max_value=9), keyspace_ids)
def test_split_covers_exactly(key_range: KeyRange, n: int, kid: bytes) -> None:
    parts = key_range.split(n)
    assert len(parts) == n
    assert are_contiguous(parts)
    assert parts == sorted(parts, key=sort_key)
    assert parts[0].start == key_range.start
    assert parts[-1].end == key_range.end
    assert all(key_range.contains_range(part) for part in parts)
    for sample in [kid, *_sample_ids(key_range, *parts)]:
        holders = [part for part in parts if part.contains(sample)]
        assert len(holders) == (1 if key_range.contains(sample) else 0)
    if n >= 3:
        assert not are_contiguous([*parts[:1], *parts[2:]])


@settings(deadline=None)
@given(key_ranges(), key_ranges())
def test_ordering_is_total_and_consistent(a: KeyRange, b: KeyRange) -> None:
    assert (a < b) == (sort_key(a) < sort_key(b))
    assert (a == b) == (sort_key(a) == sort_key(b))
    assert sum([a < b, a == b, b < a]) == 1


@settings(deadline=None)
@given(shard_maps(), keyspace_ids, key_ranges())
def test_complete_partitions_validate(shards: list[KeyRange], kid: bytes, probe: KeyRange) -> None:
    shard_map = ShardMap(shards)
    assert list(shard_map.shards) == sorted(shards, key=sort_key)
    assert ShardMap.parse(str(shard_map)) == shard_map
    assert are_contiguous(shard_map.shards)
    for sample in [kid, *_sample_ids(probe, *shards)]:
        holders = [shard for shard in shards if shard.contains(sample)]
        assert holders == [shard_map.shard_for(sample)]
    assert shard_map.shards_for(probe) == [s for s in shard_map.shards if s.intersects(probe)]


@settings(deadline=None)
@given(shard_maps(), shard_maps(), keyspace_ids)
def test_overlaps_cover_each_new_shard(
    old: list[KeyRange], new: list[KeyRange], kid: bytes
) -> None:
    old_map, new_map = ShardMap(old), ShardMap(new)
    result = overlaps(old_map, new_map)
    assert list(result) == list(new_map.shards)
    for shard, sources in result.items():
        assert sources and all(source.intersects(shard) for source in sources)
        if shard in old_map:
            assert sources == [shard]
        for sample in [kid, *_sample_ids(shard)]:
            if shard.contains(sample):
                assert old_map.shard_for(sample) in sources


@settings(deadline=None)
@given(shard_maps(), st.data())
def test_a_missing_shard_is_named_as_the_gap(shards: list[KeyRange], data: st.DataObject) -> None:
    assume(len(shards) > 1)
    removed = data.draw(st.sampled_from(shards))
    with pytest.raises(ShardMapError, match=f"no shard covers {removed.name};"):
        ShardMap([s for s in shards if s != removed])


@settings(deadline=None)
@given(shard_maps(), st.data())
def test_a_narrowed_shard_leaves_a_gap(shards: list[KeyRange], data: st.DataObject) -> None:
    narrowed = data.draw(st.sampled_from(shards))
    kept, lost = narrowed.split(2)
    with pytest.raises(ShardMapError, match=f"no shard covers {lost.name};"):
        ShardMap([kept if s == narrowed else s for s in shards])


@settings(deadline=None)
@given(shard_maps(), st.data())
def test_a_widened_or_repeated_shard_is_named_as_the_overlap(
    shards: list[KeyRange], data: st.DataObject
) -> None:
    ordered = sorted(shards, key=sort_key)
    index = data.draw(st.integers(min_value=0, max_value=len(ordered) - 1))
    repeated = ordered[index]
    with pytest.raises(ShardMapError) as info:
        ShardMap([*shards, repeated])
    assert f"{repeated} and {repeated} overlap on {repeated};" in str(info.value)
    assume(index + 1 < len(ordered))
    following = ordered[index + 1]
    wide = KeyRange(repeated.start, following.end)
    with pytest.raises(ShardMapError) as info:
        ShardMap([wide if s == repeated else s for s in shards])
    assert f"{wide} and {following} overlap on {following};" in str(info.value)
