"""`copy_starts.floor`: where a stream may start reading a real Vitess target past its
copy-phase rows, and when it may not."""

from __future__ import annotations

from updatestream.binlog.copy_starts import CopyStart, floor
from updatestream.core.gtid import Flavor, GTIDPosition, parse_position

A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"  # source -40
B = "5f0c2a10-71ca-11e1-9e33-c80aa9429562"  # source 40-80
T = "7a9d3b21-71ca-11e1-9e33-c80aa9429562"  # the target -80


def at(uuid: str, n: int) -> GTIDPosition:
    return parse_position(f"{uuid}:1-{n}", Flavor.MYSQL)


# A merge into -80: -40's running phase began at -80's transaction 40 (-40 copied up to 100),
# 40-80's at transaction 55, when -40 had been copied up to 108.
STARTS = {
    "-40": CopyStart(at(A, 100), at(T, 40), {"-40": at(A, 100)}),
    "40-80": CopyStart(at(B, 70), at(T, 55), {"-40": at(A, 108), "40-80": at(B, 70)}),
}


def test_after_the_last_running_phase_began_when_the_stream_delivered_what_was_copied() -> None:
    assert floor(STARTS, {"-40": at(A, 120), "40-80": at(B, 90)}) == at(T, 55)
    assert floor(STARTS, {"-40": at(A, 108), "40-80": at(B, 70)}) == at(T, 55)


def test_nowhere_when_a_copy_before_that_point_may_not_have_been_delivered() -> None:
    # -40's copies of 101..108 sit between the two starts: the stream delivered only 1..104
    assert floor(STARTS, {"-40": at(A, 104), "40-80": at(B, 90)}) is None


def test_a_single_source_and_an_unknown_one() -> None:
    assert floor(STARTS, {"-40": at(A, 100)}) == at(T, 40)
    assert floor(STARTS, {"c0-": at(A, 5)}) is None
    assert floor({}, {"-40": at(A, 100)}) is None
