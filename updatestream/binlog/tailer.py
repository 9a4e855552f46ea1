"""Following one shard's binlog with one long-lived connection, into a bounded buffer.

A `ShardTailer` runs a thread that reads the shard's binlog from a position without end
(`BinlogRangeReader` with `end=None`: one blocking dump connection, the reader's reconnect
rules) and converts each row with the `RowConverter` a one-off read uses, so the rows it keeps
are exactly the rows a read of the same range returns. `TailBuffer` keeps them per transaction
with the shard's position after each, from a base position on: it can hand out the rows of any
range `(start, end]` whose both ends are its base or a transaction's position.

The buffer is bounded by rows and bytes, the transaction being read included. When a bound is
passed it drops everything and the tailer stops: whoever reads through it then reads that range
the ordinary way, and may start a new tailer further on. Transactions are dropped from its front
once the stream has committed past them (`trim`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from updatestream.binlog.config import ReaderConfig, ShardEndpoint
from updatestream.binlog.range_reader import BinlogRangeReader
from updatestream.binlog.row_converter import EventRow, RowConverter, Transaction
from updatestream.binlog.session import flavor_of
from updatestream.core.gtid import GTIDPosition, position_contains

log = logging.getLogger(__name__)

_ROW_OVERHEAD = 200  # bytes a row tuple costs besides its text fields, roughly


def row_bytes(row: EventRow) -> int:
    """About what a row tuple holds in memory: its text fields and a fixed overhead."""
    return _ROW_OVERHEAD + sum(len(value) for value in row if isinstance(value, str))


class _Kept(NamedTuple):
    position: GTIDPosition  # the shard's position after this transaction
    rows: list[EventRow]
    total: int  # rows of every transaction kept since the buffer began, this one included
    size: int  # bytes of this transaction's rows (row_bytes)
    finished_at: float  # Unix time the tail read the transaction's end


class TailTransaction(NamedTuple):
    """One transaction a tail holds, as `TailBuffer.transactions_between` hands it out."""

    position: GTIDPosition  # the shard's position after it
    rows: list[EventRow]
    finished_at: float  # Unix time the tail read its end (its commit event)


class TailBuffer:
    """The transactions `(base, position]` of one shard, bounded; thread-safe.

    One thread adds (`add` for each row, `finish` at each transaction's end); others read
    (`rows_between`, `rows_after`), trim and wait. After an overflow the buffer stays empty
    (`overflowed`) and takes nothing more.
    """

    def __init__(self, base: GTIDPosition, max_rows: int, max_bytes: int) -> None:
        self.base = base  # the position before the first kept transaction
        self.position = base  # after the last finished transaction
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.overflowed = False
        self._kept: deque[_Kept] = deque()
        self._index: dict[GTIDPosition, int] = {}  # position -> running number of its tx
        self._first = 0  # running number of _kept[0]
        self._total = 0  # rows kept since the buffer began (drives `_Kept.total`)
        self._rows = 0  # rows held now, the pending transaction's included
        self._bytes = 0
        self._pending: list[EventRow] = []
        self._pending_bytes = 0
        self._changed = threading.Condition()

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def size(self) -> int:
        return self._bytes

    def add(self, row: EventRow) -> bool:
        """Keep a row of the transaction being read; False once the buffer has overflowed."""
        if self.overflowed:
            return False
        size = row_bytes(row)
        with self._changed:
            if self._rows + 1 > self.max_rows or self._bytes + size > self.max_bytes:
                self._overflow()
                return False
            self._pending.append(row)
            self._pending_bytes += size
            self._rows += 1
            self._bytes += size
        return True

    def finish(self, position: GTIDPosition) -> None:
        """The transaction being read ended; the shard is at `position` after it."""
        if self.overflowed:
            return
        with self._changed:
            rows, self._pending = self._pending, []
            self._total += len(rows)
            number = self._first + len(self._kept)
            self._kept.append(_Kept(position, rows, self._total, self._pending_bytes, time.time()))
            self._pending_bytes = 0
            self._index[position] = number
            self.position = position
            self._changed.notify_all()

    def _overflow(self) -> None:
        self.overflowed = True
        self._kept.clear()
        self._index.clear()
        self._pending = []
        self._rows = self._bytes = self._pending_bytes = 0
        self._changed.notify_all()

    def fail(self) -> None:
        """The reading ended for good: stop waiting for it (the buffer takes nothing more)."""
        with self._changed:
            self._overflow()

    def _number(self, position: GTIDPosition) -> int | None:
        """The running number of the transaction that ends at `position`; `_first - 1` for the
        base; None when no kept transaction ends exactly there."""
        if position == self.base:
            return self._first - 1
        return self._index.get(position)

    def holds(self, position: GTIDPosition) -> bool:
        with self._changed:
            return not self.overflowed and self._number(position) is not None

    def wait_for(self, position: GTIDPosition, timeout: float) -> bool:
        """Wait up to `timeout` seconds until the buffer reaches `position`; True when it did
        (then `holds(position)` tells whether it holds it exactly)."""
        with self._changed:
            return (
                self._changed.wait_for(
                    lambda: self.overflowed or position_contains(self.position, position), timeout
                )
                and not self.overflowed
            )

    def wait_past(self, position: GTIDPosition, timeout: float) -> bool:
        """Wait up to `timeout` seconds until the buffer has a transaction after `position`
        (its position is another); False on timeout or once it overflowed or failed."""
        with self._changed:
            return (
                self._changed.wait_for(
                    lambda: self.overflowed or self.position != position, timeout
                )
                and not self.overflowed
            )

    def rows_between(
        self, start: GTIDPosition, end: GTIDPosition, max_rows: int, max_bytes: int = 0
    ) -> list[EventRow] | None:
        """The rows of the transactions `(start, end]`, in binlog order; None when the buffer
        does not hold both ends exactly, the range has more than `max_rows` rows or (when
        `max_bytes` is set) more than `max_bytes` bytes of them (`row_bytes`)."""
        with self._changed:
            numbers = self._numbers_between(start, end, max_rows)
            if numbers is None:
                return None
            if max_bytes and sum(self._kept[n - self._first].size for n in numbers) > max_bytes:
                return None
            out: list[EventRow] = []
            for number in numbers:
                out += self._kept[number - self._first].rows
            return out

    def transactions_between(
        self, start: GTIDPosition, end: GTIDPosition, max_rows: int
    ) -> list[TailTransaction] | None:
        """The transactions `(start, end]`, in binlog order; None as for `rows_between`."""
        with self._changed:
            numbers = self._numbers_between(start, end, max_rows)
            if numbers is None:
                return None
            kept = [self._kept[n - self._first] for n in numbers]
            return [TailTransaction(k.position, k.rows, k.finished_at) for k in kept]

    def _numbers_between(
        self, start: GTIDPosition, end: GTIDPosition, max_rows: int
    ) -> range | None:
        """The numbers of the kept transactions `(start, end]`; None when the buffer does not
        hold both ends exactly or they hold more than `max_rows` rows. Call it holding the lock."""
        if self.overflowed:
            return None
        first, last = self._number(start), self._number(end)
        if first is None or last is None or last < first:
            return None
        if self._total_at(last) - self._total_at(first) > max_rows:
            return None
        return range(first + 1, last + 1)

    def _total_at(self, number: int) -> int:
        if number < self._first:  # the base
            return self._kept[0].total - len(self._kept[0].rows) if self._kept else self._total
        return self._kept[number - self._first].total

    def rows_after(self, start: GTIDPosition) -> int | None:
        """How many rows the kept transactions after `start` hold; None when `start` is not
        the base or a kept transaction's position."""
        with self._changed:
            first = None if self.overflowed else self._number(start)
            if first is None:
                return None
            return self._total - self._total_at(first)

    def cut_after(
        self, start: GTIDPosition, max_rows: int, max_bytes: int = 0
    ) -> GTIDPosition | None:
        """The position after the last kept transaction that keeps `(start, there]` within
        `max_rows` rows and (when set) `max_bytes` bytes of them (`row_bytes`), at least one
        transaction; None when the buffer does not hold `start` or all it holds after `start`
        fits."""
        with self._changed:
            first = None if self.overflowed else self._number(start)
            if first is None:
                return None
            base = self._total_at(first)
            if self._total - base <= max_rows and not max_bytes:
                return None
            chosen, size = None, 0
            for number in range(first + 1, self._first + len(self._kept)):
                kept = self._kept[number - self._first]
                size += kept.size
                over = kept.total - base > max_rows or (max_bytes and size > max_bytes)
                if chosen is not None and over:
                    return chosen
                chosen = kept.position
            return None

    def trim(self, upto: GTIDPosition) -> None:
        """Drop the transactions at or before `upto` (the stream committed them)."""
        with self._changed:
            while self._kept and position_contains(upto, self._kept[0].position):
                kept = self._kept.popleft()
                self._index.pop(kept.position, None)
                self._first += 1
                self._rows -= len(kept.rows)
                self._bytes -= kept.size
                self.base = kept.position


class ShardTailer:
    """One shard's binlog followed from `start` by a thread, into a `TailBuffer`."""

    def __init__(
        self,
        endpoint: ShardEndpoint,
        config: ReaderConfig,
        start: GTIDPosition,
        *,
        max_rows: int,
        max_bytes: int,
        converter: RowConverter | None = None,
        reader: Callable[..., BinlogRangeReader] = BinlogRangeReader,
    ) -> None:
        self.endpoint = endpoint
        self.buffer = TailBuffer(start, max_rows, max_bytes)
        self.error: BaseException | None = None
        converter = converter or RowConverter(config, endpoint.shard, flavor_of(endpoint))
        self._reader = reader(endpoint, config, start, None, converter, on_finish=self._finished)
        self._thread = threading.Thread(
            target=self._run, name=f"binlog-tail-{endpoint.shard}", daemon=True
        )

    @property
    def shard(self) -> str:
        return self.endpoint.shard

    def start(self) -> ShardTailer:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        """Still following the shard (not stopped, failed or overflowed)."""
        return self._thread.is_alive() and not self.buffer.overflowed

    def silent_for(self) -> float:
        """Seconds since the server last sent anything (it sends a heartbeat every second
        while the shard is idle)."""
        return time.monotonic() - self._reader.last_event

    def stop(self) -> None:
        """Ask the thread to end (it does at the next event or server heartbeat)."""
        self._reader.close()
        self.buffer.fail()

    def _finished(self, tx: Transaction) -> None:
        self.buffer.finish(tx.position)

    def _run(self) -> None:
        buffer = self.buffer
        rows = self._reader.rows()
        try:
            for row in rows:
                if not buffer.add(row):
                    log.info(
                        "binlog tail of shard %s: buffer full (%d rows / %d bytes), dropped",
                        self.shard,
                        buffer.max_rows,
                        buffer.max_bytes,
                    )
                    break
        except Exception as exc:  # the stream reads this shard the ordinary way from here
            self.error = exc
            log.warning("binlog tail of shard %s ended: %s", self.shard, exc)
        finally:
            self._reader.close()
            rows.close()  # closes the dump connection now, not when collected
            buffer.fail()
