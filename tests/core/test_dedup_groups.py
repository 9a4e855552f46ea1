"""Grouped copies and the dedup rule: a group wholly delivered, none of it, or straddling."""

from __future__ import annotations

import pickle

import pytest

from updatestream.core import recent_rows
from updatestream.core.dedup import DedupFilter, DedupVerdict
from updatestream.core.gtid import Flavor, parse_position
from updatestream.core.recent_rows import RecentTransactions
from updatestream.core.token import EventToken, SourceProvenance

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
OTHER = "5f0c2a10-71ca-11e1-9e33-c80aa9429562"  # the server of an earlier shard of that name


def at(n: int) -> object:
    return parse_position(f"{UUID}:1-{n}" if n else "", Flavor.MYSQL)


def copy(first: int, last: int, *, reverse: bool = False, source: str = "-80") -> EventToken:
    """A destination event copying source transactions first..last of `source` as one group."""
    provenance = SourceProvenance(source, at(last), 1_000, at(first - 1), reverse)
    return EventToken(1_000, "-40", parse_position("0-1-5"), provenance)


# what the stream read of -80 before it hopped: transactions 8..10, their rows' keyspace ids
RECENT = RecentTransactions(at(7)).then(
    [(at(8), ("10", "90")), (at(9), ()), (at(10), ("20", "30"))]
)
FILTER = DedupFilter({"-80": at(10)}, {}, {"-80": RECENT})


@pytest.mark.parametrize(
    ("first", "last", "verdict"),
    [
        (6, 10, DedupVerdict.DUPLICATE_HOP),  # every copied transaction delivered
        (11, 14, DedupVerdict.DELIVER),  # none delivered
        (9, 12, DedupVerdict.STRADDLE),  # 9 and 10 delivered, 11 and 12 not
    ],
)
def test_a_group_is_classified_by_what_the_watermark_holds(
    first: int, last: int, verdict: DedupVerdict
) -> None:
    assert FILTER.classify(copy(first, last)) is verdict


def test_the_record_gives_the_rows_of_the_transactions_between_two_positions() -> None:
    assert RECENT.rows_between(at(8), at(10)) == ["20", "30"]  # transactions 9 and 10
    assert RECENT.rows_between(at(7), at(8)) == ["10", "90"]
    # a record that does not reach back to the start, or forward to the end, cannot answer
    assert RecentTransactions(at(9)).rows_between(at(8), at(9)) is None
    assert RECENT.rows_between(at(8), at(11)) is None


def test_reverse_copies_of_a_shard_not_read_yet_are_dropped() -> None:
    assert DedupFilter({}).classify(copy(2, 3, reverse=True, source="-40")) is (
        DedupVerdict.DUPLICATE_REVERSE
    )
    # once the stream read that shard (a watermark), its copies follow the watermark rule
    read = DedupFilter({"-40": at(3)})
    assert read.classify(copy(2, 3, reverse=True, source="-40")) is DedupVerdict.DUPLICATE_HOP
    assert read.classify(copy(4, 4, reverse=True, source="-40")) is DedupVerdict.DELIVER


def test_a_watermark_of_an_earlier_shard_of_that_name_says_nothing_of_its_copies() -> None:
    """-40 was merged away and split off again: the watermark the first hop left is of the
    first -40 (another server's GTIDs). The second -40's reverse copies into the shard the
    stream still reads are dropped, its forward copies delivered."""
    earlier = DedupFilter({"-40": parse_position(f"{OTHER}:1-900", Flavor.MYSQL)})
    reverse, forward = copy(2, 3, reverse=True, source="-40"), copy(2, 3, source="-40")
    assert earlier.classify(reverse) is DedupVerdict.DUPLICATE_REVERSE
    assert earlier.classify(forward) is DedupVerdict.DELIVER
    # a watermark of that server holding some of its transactions still decides
    both = DedupFilter({"-40": parse_position(f"{OTHER}:1-900,{UUID}:1-2", Flavor.MYSQL)})
    assert both.classify(reverse) is DedupVerdict.STRADDLE


def test_the_filter_keeps_its_records_through_json_and_pickle() -> None:
    again = DedupFilter.from_json(FILTER.to_json())
    assert again == FILTER and again.recent["-80"] == RECENT
    assert pickle.loads(pickle.dumps(FILTER)) == FILTER
    token = EventToken.loads(copy(9, 12).dumps())
    assert token == copy(9, 12) and token.source is not None and token.source.covered_from


def test_records_stay_within_their_bounds() -> None:
    many = RecentTransactions(at(0)).then([(at(n), ("aa",) * 10) for n in range(1, 400)])
    assert sum(len(ids) for _, ids in many.entries) <= 2048 and len(many.entries) <= 256
    assert many.position == at(399) and many.base != at(0)
    assert many.rows_between(at(0), at(399)) is None  # dropped from the front: unknown
    assert many.rows_between(at(398), at(399)) == ["aa"] * 10


def test_a_record_read_back_again_parses_only_its_new_positions() -> None:
    """A stream's driver reads each batch's offsets several times, and a batch's record holds
    the last batch's transactions: each position is parsed once, not at every read."""
    record = RecentTransactions(at(500)).then([(at(n), ("aa",)) for n in range(501, 757)])
    assert RecentTransactions.from_json(record.to_json()) == record
    parsed = recent_rows._parse_entry_position.cache_info().misses
    grown = record.then([(at(757), ("bb",))])
    assert RecentTransactions.from_json(grown.to_json()) == grown
    assert RecentTransactions.from_json(grown.to_json()) == grown
    assert recent_rows._parse_entry_position.cache_info().misses == parsed + 1
