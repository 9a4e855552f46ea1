"""Property tests: GTID set algebra, Event Token comparison, hop planning and the dedup rule."""

from __future__ import annotations

import itertools
from typing import NamedTuple

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from updatestream.core.dedup import DedupFilter, DedupVerdict
from updatestream.core.gtid import (
    Comparison,
    MariaDBGTID,
    MariaDBPosition,
    MySQLGTIDSet,
    compare_positions,
    parse_position,
)
from updatestream.core.hop_plan import HopPlan, HopPlanningError, plan_hop
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken, SourceProvenance, compare

UUIDS = (
    "3e11fa47-71ca-11e1-9e33-c80aa9429562",
    "8a94f357-aab4-11df-86ab-c80aa9429562",
    "00000000-0000-0000-0000-000000000001",
)

# --- strategies --------------------------------------------------------------------------------

mariadb_positions = st.dictionaries(
    st.integers(0, 3), st.tuples(st.integers(1, 3), st.integers(0, 12)), max_size=4
).map(lambda d: MariaDBPosition(MariaDBGTID(dom, srv, seq) for dom, (srv, seq) in d.items()))

intervals = st.tuples(st.integers(1, 30), st.integers(0, 6)).map(lambda t: (t[0], t[0] + t[1]))
mysql_sets = st.dictionaries(st.sampled_from(UUIDS), st.lists(intervals, max_size=4)).map(
    MySQLGTIDSet
)


def expand(gtid_set: MySQLGTIDSet) -> set[tuple[str, int]]:
    """Every GTID of the set, one by one (the oracle for the interval arithmetic)."""
    return {
        (sid, n)
        for sid, ivs in gtid_set.entries.items()
        for start, end in ivs
        for n in range(start, end + 1)
    }


def seqs(position: MariaDBPosition) -> dict[int, int]:
    return {domain: gtid.seq for domain, gtid in position.entries.items()}


# --- GTID algebra, both flavours ----------------------------------------------------------------


@pytest.mark.parametrize("positions", [mariadb_positions, mysql_sets], ids=["mariadb", "mysql"])
def test_union_is_a_semilattice(positions: st.SearchStrategy[MariaDBPosition]) -> None:
    @given(positions, positions, positions)
    def check(a: MariaDBPosition, b: MariaDBPosition, c: MariaDBPosition) -> None:
        assert a.union(b) == b.union(a)
        assert a.union(b).union(c) == a.union(b.union(c))
        assert a.union(a) == a
        assert a.union(b).contains(a)
        assert a.union(b).contains(b)
        # contains is reflexive and transitive: (a+b+c) holds (b+c), which holds c
        assert a.contains(a)
        big, mid = a.union(b).union(c), b.union(c)
        assert big.contains(mid) and mid.contains(c) and big.contains(c)
        # the union is the least upper bound
        if c.contains(a) and c.contains(b):
            assert c.contains(a.union(b))
        # round trip through the canonical text
        assert type(a).parse(str(a)) == a
        assert parse_position(str(a), a.flavor) == a

    check()


@given(mysql_sets, mysql_sets)
def test_mysql_sets_match_set_semantics(a: MySQLGTIDSet, b: MySQLGTIDSet) -> None:
    assert expand(a.union(b)) == expand(a) | expand(b)
    assert a.contains(b) is (expand(b) <= expand(a))
    # antisymmetric: mutual containment is equality
    if a.contains(b) and b.contains(a):
        assert a == b
    # canonical intervals are sorted, disjoint and not adjacent
    for ivs in a.entries.values():
        for (_, end), (start, _) in itertools.pairwise(ivs):
            assert end + 1 < start


@given(mysql_sets, st.sampled_from(UUIDS), st.integers(1, 40))
def test_mysql_add(a: MySQLGTIDSet, sid: str, seq: int) -> None:
    added = a.add(sid, seq)
    assert expand(added) == expand(a) | {(sid, seq)}
    assert added.contains_gtid(sid, seq)
    assert added.contains(a)


@given(mariadb_positions, mariadb_positions)
def test_mariadb_contains_is_per_domain_sequence(a: MariaDBPosition, b: MariaDBPosition) -> None:
    expected = all(
        a.domain_seq(dom) is not None and seqs(a)[dom] >= seq for dom, seq in seqs(b).items()
    )
    assert a.contains(b) is expected
    union = a.union(b)
    assert seqs(union) == {
        dom: max(seqs(a).get(dom, -1), seqs(b).get(dom, -1))
        for dom in seqs(a).keys() | seqs(b).keys()
    }
    # antisymmetric up to server ids (contains looks at sequence numbers only)
    if a.contains(b) and b.contains(a):
        assert seqs(a) == seqs(b)


@given(mariadb_positions, st.integers(0, 3), st.integers(1, 3), st.integers(0, 20))
def test_mariadb_advance(a: MariaDBPosition, dom: int, srv: int, seq: int) -> None:
    after = a.advance(MariaDBGTID(dom, srv, seq))
    assert after.domain_seq(dom) == seq
    assert {d: s for d, s in seqs(after).items() if d != dom} == {
        d: s for d, s in seqs(a).items() if d != dom
    }


@pytest.mark.parametrize("positions", [mariadb_positions, mysql_sets], ids=["mariadb", "mysql"])
def test_compare_positions_is_antisymmetric(positions: st.SearchStrategy[MariaDBPosition]) -> None:
    @given(positions, positions)
    def check(a: MariaDBPosition, b: MariaDBPosition) -> None:
        result = compare_positions(a, b)
        assert compare_positions(b, a) is result.mirror()
        assert (result in (Comparison.BEFORE, Comparison.EQUAL)) is b.contains(a)
        assert (result in (Comparison.AFTER, Comparison.EQUAL)) is a.contains(b)

    check()


# --- Event Tokens --------------------------------------------------------------------------------

SHARDS = ("-80", "80-", "-40", "40-80")
provenances = st.builds(
    SourceProvenance, st.sampled_from(SHARDS), mariadb_positions, st.integers(0, 3)
)
tokens = st.builds(
    EventToken,
    st.integers(0, 3),
    st.sampled_from(SHARDS),
    mariadb_positions,
    st.none() | provenances,
)


@given(tokens, tokens)
def test_token_compare_is_antisymmetric(a: EventToken, b: EventToken) -> None:
    assert compare(b, a) is compare(a, b).mirror()
    assert compare(a, a) is Comparison.EQUAL


@given(tokens, tokens)
def test_tokens_without_provenance_follow_seed_000(a: EventToken, b: EventToken) -> None:
    a, b = (
        EventToken(a.timestamp, a.shard, a.position),
        EventToken(b.timestamp, b.shard, b.position),
    )
    result = compare(a, b)
    if a.timestamp != b.timestamp:
        assert result is (Comparison.BEFORE if a.timestamp < b.timestamp else Comparison.AFTER)
    elif a.shard != b.shard:
        assert result is Comparison.UNKNOWN
    else:
        assert result is compare_positions(a.position, b.position)


@given(tokens)
def test_token_json_round_trip(token: EventToken) -> None:
    assert EventToken.from_json(token.to_json()) == token
    assert EventToken.loads(token.dumps()) == token


@given(tokens, tokens)
def test_copies_of_one_source_transaction_are_equal(a: EventToken, b: EventToken) -> None:
    assume(a.source is not None)
    assert a.source is not None
    copy = EventToken(b.timestamp, b.shard, b.position, a.source)
    assert compare(a, copy) is Comparison.EQUAL
    original = EventToken(a.source.timestamp, a.source.shard, a.source.position)
    assert compare(original, a) is Comparison.EQUAL


# --- hop planning --------------------------------------------------------------------------------


@st.composite
def shard_maps(draw: st.DrawFn) -> ShardMap:
    cuts = sorted(draw(st.sets(st.integers(1, 255), max_size=6)))
    bounds = [b"", *(bytes([cut]) for cut in cuts), b""]
    return ShardMap(KeyRange(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1))


@st.composite
def key_ranges(draw: st.DrawFn) -> KeyRange:
    low = draw(st.integers(0, 255))
    high = draw(st.integers(low + 1, 256))
    return KeyRange(bytes([low]) if low else b"", bytes([high]) if high < 256 else b"")


# every 1-byte keyspace id and one 2-byte id inside each 1-byte step
KEYSPACE_IDS = [bytes([b]) for b in range(256)] + [bytes([b, 0x80]) for b in range(256)]


class Hop(NamedTuple):
    """A shard map change, the stream's key range and its last delivered token per old shard."""

    old: ShardMap
    new: ShardMap
    key_range: KeyRange
    last: dict[str, EventToken]

    def plan(self) -> HopPlan:
        return plan_hop(self.old, self.new, self.last, self.key_range)


@st.composite
def hops(draw: st.DrawFn) -> Hop:
    old, new, key_range = draw(shard_maps()), draw(shard_maps()), draw(key_ranges())
    last = {
        shard.name: EventToken(
            draw(st.integers(0, 1000)),
            shard.name,
            MariaDBPosition([MariaDBGTID(index, 1, draw(st.integers(0, 50)))]),
        )
        for index, shard in enumerate(old.shards)
    }
    return Hop(old, new, key_range, last)


@given(hops())
def test_hop_serves_every_keyspace_id_once(hop: Hop) -> None:
    old, new, key_range, _ = hop
    plan = hop.plan()
    served = [KeyRange.parse(name) for name in (*plan.destinations, *plan.unchanged)]
    assert not set(plan.destinations) & set(plan.unchanged)
    for kid in KEYSPACE_IDS:
        if key_range.contains(kid):
            owners = [shard for shard in served if shard.contains(kid)]
            assert owners == [new.shard_for(kid)]  # exactly one, the serving shard
    for shard in served:
        assert shard.intersects(key_range)
    # every old shard the stream read is either still serving or retired, never both
    read = {shard.name for shard in old.shards_for(key_range)}
    assert set(plan.retired) | set(plan.unchanged) == read
    assert not set(plan.retired) & set(plan.unchanged)
    assert not set(plan.retired) & set(new.names)


@given(hops())
def test_hop_start_is_the_minimum_of_the_sources(hop: Hop) -> None:
    old, _, key_range, last = hop
    plan = hop.plan()
    for name, start in plan.destinations.items():
        wanted = KeyRange.parse(name).intersection(key_range)
        assert wanted is not None
        assert start.sources == tuple(s.name for s in old.shards_for(wanted))
        times = [last[source].timestamp for source in start.sources]
        assert all(start.start_timestamp <= ts for ts in times)
        assert start.start_timestamp == min(times)
        assert plan.overlap_until()[name] == max(times)
        for source in start.sources:
            assert plan.watermarks[source] == last[source].position
    assert set(plan.watermarks) == set(plan.retired)


@given(hops(), st.data())
def test_hop_without_a_source_token_fails(hop: Hop, data: st.DataObject) -> None:
    old, new, key_range, last = hop
    plan = hop.plan()
    assume(plan.retired)
    missing = data.draw(st.sampled_from(plan.retired))
    with pytest.raises(HopPlanningError, match=f"source shard {missing},"):
        plan_hop(old, new, {k: v for k, v in last.items() if k != missing}, key_range)


@given(hops(), st.lists(tokens, max_size=10))
def test_dedup_filter_agrees_with_the_plan(hop: Hop, later: list[EventToken]) -> None:
    plan = hop.plan()
    dedup = DedupFilter.from_plan(plan)
    assert DedupFilter.from_json(dedup.to_json()) == dedup
    for token in later:
        verdict = dedup.classify(token)
        assert (verdict is DedupVerdict.DUPLICATE_HOP) is plan.is_duplicate(token)
        if token.source is not None:
            assert verdict is not DedupVerdict.OVERLAP_UNKNOWN


@given(hops(), hops(), hops())
def test_dedup_merge_is_associative(first: Hop, second: Hop, third: Hop) -> None:
    a, b, c = (DedupFilter.from_plan(hop.plan()) for hop in (first, second, third))
    assert a.merged(b).merged(c) == a.merged(b.merged(c))
    assert a.merged(a) == a
    # the later filter wins where both name a shard
    for shard, position in b.watermarks.items():
        assert a.merged(b).watermarks[shard] == position
