"""The binlog tail's buffer without a server: ranges by exact positions, bounds, overflow,
trimming after a commit, the admission cut and waiting for a position."""

from __future__ import annotations

import threading
import time

from updatestream.binlog.tailer import TailBuffer, row_bytes
from updatestream.core.gtid import MariaDBPosition


def pos(seq: int) -> MariaDBPosition:
    return MariaDBPosition.parse(f"0-1-{seq}")


def row(seq: int, n: int, text: str = "x") -> tuple[object, ...]:
    return ("ks", "-", "insert", "t", f'{{"id":{n}}}', None, None, text, "tok", 1, f"0-1-{seq}", 0)


def fill(buffer: TailBuffer, first: int, last: int, rows_each: int = 2) -> None:
    """Transactions first..last, each with `rows_each` rows."""
    for seq in range(first, last + 1):
        for n in range(rows_each):
            assert buffer.add(row(seq, n))
        buffer.finish(pos(seq))


def test_ranges_are_handed_out_only_between_exact_positions() -> None:
    buffer = TailBuffer(pos(10), max_rows=1000, max_bytes=1 << 20)
    fill(buffer, 11, 15)
    assert buffer.position == pos(15) and buffer.rows == 10
    assert buffer.rows_between(pos(10), pos(15), 100) == [
        row(s, n) for s in range(11, 16) for n in (0, 1)
    ]
    assert buffer.rows_between(pos(12), pos(13), 100) == [row(13, 0), row(13, 1)]
    assert buffer.rows_between(pos(13), pos(13), 100) == []
    assert buffer.rows_between(pos(9), pos(12), 100) is None  # before the base
    assert buffer.rows_between(pos(12), pos(16), 100) is None  # not read yet
    assert buffer.rows_between(pos(14), pos(12), 100) is None  # backwards
    other_server = MariaDBPosition.parse("0-2-12")  # same sequence number, not the same position
    assert buffer.rows_between(other_server, pos(13), 100) is None
    assert buffer.rows_between(pos(10), pos(15), 9) is None  # more than the limit
    assert buffer.rows_after(pos(12)) == 6 and buffer.rows_after(pos(9)) is None


def test_a_transaction_being_read_is_not_handed_out() -> None:
    buffer = TailBuffer(pos(1), max_rows=100, max_bytes=1 << 20)
    fill(buffer, 2, 2)
    buffer.add(row(3, 0))
    assert buffer.rows == 3 and buffer.position == pos(2)
    assert buffer.rows_between(pos(1), pos(3), 100) is None
    buffer.finish(pos(3))
    assert buffer.rows_between(pos(2), pos(3), 100) == [row(3, 0)]


def test_overflow_by_rows_drops_everything_and_takes_nothing_more() -> None:
    buffer = TailBuffer(pos(0), max_rows=7, max_bytes=1 << 20)
    fill(buffer, 1, 3)  # 6 rows
    assert buffer.add(row(4, 0))
    assert not buffer.add(row(4, 1))  # the 8th row, of a transaction still being read
    assert buffer.overflowed and buffer.rows == 0 and buffer.size == 0
    buffer.finish(pos(4))
    assert not buffer.add(row(5, 0))
    assert buffer.rows_between(pos(0), pos(1), 100) is None
    assert not buffer.holds(pos(0))


def test_overflow_by_bytes_counts_the_row_text() -> None:
    big = row(1, 0, "y" * 10_000)
    buffer = TailBuffer(pos(0), max_rows=1000, max_bytes=3 * row_bytes(big))
    for n in range(3):
        assert buffer.add((*big[:4], f'{{"id":{n}}}', *big[5:]))
    assert not buffer.add(big)
    assert buffer.overflowed


def test_commit_trims_the_front_and_frees_the_bound() -> None:
    buffer = TailBuffer(pos(0), max_rows=6, max_bytes=1 << 20)
    fill(buffer, 1, 3)  # full: 6 rows
    size = buffer.size
    buffer.trim(pos(2))
    assert buffer.base == pos(2) and buffer.rows == 2 and buffer.size == size // 3
    assert buffer.rows_between(pos(0), pos(3), 100) is None
    assert buffer.rows_between(pos(2), pos(3), 100) == [row(3, 0), row(3, 1)]
    fill(buffer, 4, 5)  # room again
    assert buffer.rows_after(pos(2)) == 6
    buffer.trim(pos(9))  # past everything read
    assert buffer.rows == 0 and buffer.base == pos(5)
    assert buffer.rows_between(pos(5), pos(5), 10) == []


def test_cut_keeps_whole_transactions_within_the_limit() -> None:
    buffer = TailBuffer(pos(0), max_rows=1000, max_bytes=1 << 20)
    fill(buffer, 1, 10, rows_each=3)  # 30 rows
    assert buffer.cut_after(pos(0), 30) is None  # all of it fits
    assert buffer.cut_after(pos(0), 10) == pos(3)  # 9 rows; a 4th transaction would be 12
    assert buffer.cut_after(pos(8), 1) == pos(9)  # at least one transaction
    assert buffer.cut_after(pos(10), 1) is None  # nothing after it
    assert buffer.cut_after(pos(42), 1) is None
    assert buffer.cut_after(pos(0), 30, max_bytes=buffer.size) is None  # all of it fits both
    assert buffer.cut_after(pos(0), 30, max_bytes=buffer.size - 1) == pos(9)  # bytes cut first
    assert buffer.cut_after(pos(0), 10, max_bytes=buffer.size - 1) == pos(3)  # rows cut first
    assert buffer.cut_after(pos(0), 30, max_bytes=1) == pos(1)  # at least one transaction


def test_wait_for_returns_when_the_tail_gets_there_or_overflows() -> None:
    buffer = TailBuffer(pos(0), max_rows=100, max_bytes=1 << 20)
    assert not buffer.wait_for(pos(2), 0.01)

    def later() -> None:
        time.sleep(0.05)
        fill(buffer, 1, 2)

    thread = threading.Thread(target=later)
    thread.start()
    began = time.monotonic()
    assert buffer.wait_for(pos(2), 5)
    assert time.monotonic() - began < 4
    thread.join()
    threading.Timer(0.05, buffer.fail).start()
    assert not buffer.wait_for(pos(3), 5)
