"""Snapshot progress: which rows of which tables the snapshot has delivered, as plain data.

A snapshot delivers every existing row of the stream's tables in its key range once, then the
stream goes on from where the snapshot left off. Its unit of progress is a `SnapshotRange`: one
table's rows whose keyspace ids lie in one key range (a shard's range, cut to the job's range,
as it was when the snapshot began). A range is read in chunks in primary-key order; a chunk is
`frontier < pk <= upper`, its upper bound fixed when it is planned. `last` is the highest key
that existed when the range was planned: rows above it were inserted later and arrive through
the binlog like any change.

The rule that makes the seam exact (see docs/snapshot.md): the chunks of one micro-batch are read
as of the batch's end position, and while a range of the stream's starting snapshot is
unfinished the binlog events of its keys that lie above the frontier are dropped
(`SnapshotFilter`): the chunk that later covers such a key reads its state, which already
includes them. A key at or below the frontier, or above `last`, is delivered as usual. So each
key gets its snapshot row once, then every later change.

A range of a snapshot on demand (`on_demand`) holds nothing back. Its sinks hold every key of
it already, so a dropped change would be lost where the chunk cannot make up for it: a key
deleted before its chunk is read gets no row, and the sinks would keep the row they hold. Its
chunks are still read as of their batch's end, so a re-read row is the key's state after every
change delivered before it, and every later change follows it.

Keys are tuples of the primary-key columns' values as the binlog decodes them (ints, strings);
Python orders them as the chunk queries do because the adapter reads string keys in binary
order. Progress is keyed by key range, not by shard, so a reshard during the snapshot moves the
unfinished ranges to whichever shards hold their rows now, and finished chunks are never read
again.

Everything here is pure: the adapter (`updatestream.snapshot`) asks the shards for bounds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange, parse_keyspace_id

Key = tuple[Any, ...]  # primary-key column values, in key order


class SnapshotStateError(UpdateStreamError):
    """Snapshot progress in an offset or a request cannot be read."""


def key_of(pk_json: str) -> Key:
    """The key tuple of an event's `pk` (a JSON object of key column -> value, in key order)."""
    return tuple(json.loads(pk_json).values())


def _key(value: Any, what: str) -> Key | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise SnapshotStateError(f"snapshot {what} must be a list of key values, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class SnapshotRange:
    """One table's rows in one key range, and how far the snapshot has read them."""

    key_range: str  # a key range name, e.g. "-80" or "60-80"
    table: str
    last: Key | None  # the highest key when planned; None: the table was empty
    frontier: Key | None = None  # every key <= frontier is delivered; None: nothing yet
    done: bool = False
    chunks: int = 0  # chunks read so far
    request: str = "start"  # the snapshot request this range belongs to
    estimate: int = 1  # chunks the range was estimated to take when planned
    on_demand: bool = False  # a re-read while the stream runs: the sinks hold its rows already

    @property
    def ident(self) -> str:
        return f"{self.request}:{self.table}:{self.key_range}"

    def holds_back(self, key: Key) -> bool:
        """Whether a binlog event of `key` is dropped: the range will read its state later and
        the sinks hold nothing of the key yet (never for a range of a snapshot on demand)."""
        if self.on_demand or self.done or self.last is None:
            return False
        if self.frontier is not None and key <= self.frontier:
            return False
        return key <= self.last

    def to_json(self) -> dict[str, Any]:
        return {
            "range": self.key_range,
            "table": self.table,
            "last": None if self.last is None else list(self.last),
            "frontier": None if self.frontier is None else list(self.frontier),
            "done": self.done,
            "chunks": self.chunks,
            "request": self.request,
            "estimate": self.estimate,
            "onDemand": self.on_demand,
        }

    @classmethod
    def from_json(cls, data: Any) -> SnapshotRange:
        if not isinstance(data, Mapping):
            raise SnapshotStateError(f"a snapshot range must be an object, got {data!r}")
        try:
            return cls(
                key_range=KeyRange.parse(str(data["range"])).name,
                table=str(data["table"]),
                last=_key(data.get("last"), "last"),
                frontier=_key(data.get("frontier"), "frontier"),
                done=bool(data.get("done", False)),
                chunks=int(data.get("chunks", 0)),
                request=str(data.get("request", "start")),
                estimate=int(data.get("estimate", 1)),
                # offsets written before the field: every range but the start's is on demand
                on_demand=bool(data.get("onDemand", data.get("request", "start") != "start")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotStateError(f"snapshot range {data!r} is malformed: {exc}") from None


@dataclass(frozen=True)
class Chunk:
    """One chunk to read: the rows of a range with `after < key <= upto`."""

    range_ident: str
    key_range: str
    table: str
    after: Key | None
    upto: Key

    def to_json(self) -> dict[str, Any]:
        return {
            "ident": self.range_ident,
            "range": self.key_range,
            "table": self.table,
            "after": None if self.after is None else list(self.after),
            "upto": list(self.upto),
        }

    @classmethod
    def from_json(cls, data: Any) -> Chunk:
        try:
            upto = _key(data["upto"], "chunk upto")
            assert upto is not None
            return cls(
                str(data["ident"]),
                str(data["range"]),
                str(data["table"]),
                _key(data.get("after"), "chunk after"),
                upto,
            )
        except (KeyError, TypeError, AssertionError) as exc:
            raise SnapshotStateError(f"snapshot chunk {data!r} is malformed: {exc}") from None


@dataclass(frozen=True)
class SnapshotState:
    """All snapshot progress of a stream, carried in its offsets.

    `chunks` are the chunks of the micro-batch that ends at the offset holding this state;
    `batch` numbers the batches that read chunks, so a batch can tell its own chunks from those
    of the batch before it.
    """

    ranges: tuple[SnapshotRange, ...]
    batch: int = 0
    chunks: tuple[Chunk, ...] = ()
    rows: int = 0  # rows delivered by finished batches (an estimate while a batch runs)
    started_at: float = 0.0
    requests: tuple[str, ...] = ("start",)

    @property
    def finished(self) -> bool:
        return all(r.done for r in self.ranges)

    def pending(self) -> list[SnapshotRange]:
        return [r for r in self.ranges if not r.done]

    def range(self, ident: str) -> SnapshotRange:
        for item in self.ranges:
            if item.ident == ident:
                return item
        raise SnapshotStateError(f"the snapshot has no range {ident}")

    def chunks_done(self) -> int:
        return sum(r.chunks for r in self.ranges)

    def advance(self, planned: Sequence[tuple[SnapshotRange, Key]]) -> SnapshotState:
        """The state after reading, for each (range, upper bound), the range's next chunk."""
        chunks = []
        by_ident = {r.ident: r for r in self.ranges}
        for item, upto in planned:
            current = by_ident[item.ident]
            assert current.last is not None and not current.done
            chunks.append(Chunk(item.ident, item.key_range, item.table, current.frontier, upto))
            by_ident[item.ident] = replace(
                current, frontier=upto, done=upto >= current.last, chunks=current.chunks + 1
            )
        if not chunks:
            return replace(self, chunks=())
        return replace(
            self,
            ranges=tuple(by_ident[r.ident] for r in self.ranges),
            batch=self.batch + 1,
            chunks=tuple(chunks),
        )

    def with_rows(self, rows: int) -> SnapshotState:
        return replace(self, rows=rows)

    def with_request(self, request: str, ranges: Iterable[SnapshotRange]) -> SnapshotState:
        """Add the ranges of a snapshot on demand (a request id is taken once). An unfinished
        range of an earlier request that a new range covers (same table, key range within the
        new one) is finished: the new range re-reads every key it has left, so two requests of
        one table never read a key twice in one batch."""
        if request in self.requests:
            return self
        added = tuple(ranges)
        kept = tuple(
            replace(item, done=True) if _covered(item, added) else item for item in self.ranges
        )
        return replace(self, ranges=kept + added, requests=(*self.requests, request))

    def to_json(self) -> dict[str, Any]:
        return {
            "ranges": [r.to_json() for r in self.ranges],
            "batch": self.batch,
            "chunks": [c.to_json() for c in self.chunks],
            "rows": self.rows,
            "startedAt": self.started_at,
            "requests": list(self.requests),
        }

    @classmethod
    def from_json(cls, data: Any) -> SnapshotState:
        if not isinstance(data, Mapping):
            raise SnapshotStateError(f"offset field '_snapshot' must be an object, got {data!r}")
        try:
            return cls(
                ranges=tuple(SnapshotRange.from_json(r) for r in data["ranges"]),
                batch=int(data.get("batch", 0)),
                chunks=tuple(Chunk.from_json(c) for c in data.get("chunks", ())),
                rows=int(data.get("rows", 0)),
                started_at=float(data.get("startedAt", 0.0)),
                requests=tuple(str(r) for r in data.get("requests", ("start",))),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotStateError(f"offset field '_snapshot' is malformed: {exc}") from None

    def chunks_of_batch(self, previous: SnapshotState | None) -> tuple[Chunk, ...]:
        """The chunks the batch from `previous` to this state reads."""
        if previous is not None and previous.batch == self.batch:
            return ()
        return self.chunks


def _covered(item: SnapshotRange, added: Sequence[SnapshotRange]) -> bool:
    """Whether an unfinished range of a snapshot on demand is re-read whole by one of `added`."""
    if item.done or not item.on_demand:
        return False
    within = KeyRange.parse(item.key_range)
    return any(
        new.on_demand and new.table == item.table
        and KeyRange.parse(new.key_range).contains_range(within)
        for new in added
    )  # fmt: skip


def next_chunks(state: SnapshotState, budget: int) -> list[SnapshotRange]:
    """The ranges whose next chunks the coming batch reads, up to `budget` chunks: round robin
    over the unfinished ranges (different key ranges live on different shards and read in
    parallel), so a range may come more than once: its chunks follow each other."""
    pending = state.pending()
    if not pending:
        return []
    by_range: dict[str, list[SnapshotRange]] = {}
    for item in pending:
        by_range.setdefault(item.key_range, []).append(item)
    order: list[SnapshotRange] = []
    queues = list(by_range.values())
    depth = max(len(q) for q in queues)
    for level in range(depth):
        order += [queue[level] for queue in queues if level < len(queue)]
    return [order[i % len(order)] for i in range(budget)]


class SnapshotFilter:
    """Decides which binlog events an unfinished snapshot holds back (see the module doc)."""

    def __init__(self, ranges: Iterable[SnapshotRange]) -> None:
        self._by_table: dict[str, list[tuple[KeyRange, SnapshotRange]]] = {}
        for item in ranges:
            if not item.done and item.last is not None and not item.on_demand:
                entry = (KeyRange.parse(item.key_range), item)
                self._by_table.setdefault(item.table, []).append(entry)

    @property
    def active(self) -> bool:
        return bool(self._by_table)

    def tables(self) -> frozenset[str]:
        return frozenset(self._by_table)

    def holds_back(self, table: str | None, keyspace_id: str | None, pk: str | None) -> bool:
        candidates = self._by_table.get(table or "")
        if not candidates or pk is None or keyspace_id is None:
            return False
        ksid = parse_keyspace_id(keyspace_id)
        key: Key | None = None
        for key_range, item in candidates:
            if key_range.contains(ksid):
                key = key_of(pk) if key is None else key
                try:
                    if item.holds_back(key):
                        return True
                except TypeError:
                    raise SnapshotStateError(
                        f"key {pk} of table {table} cannot be ordered against the snapshot's "
                        f"bounds {item.frontier}..{item.last}"
                    ) from None
        return False


@dataclass
class SnapshotProgress:
    """What a person watching the snapshot sees: chunks done of (estimated) total, rows, rate."""

    chunks_done: int
    chunks_total: int
    rows: int
    elapsed: float
    ranges_done: int
    ranges_total: int
    finished: bool

    @property
    def rate(self) -> float:
        return self.rows / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        if self.finished:
            return 0.0
        if self.chunks_done == 0 or self.elapsed <= 0:
            return None
        per_chunk = self.elapsed / self.chunks_done
        return max(0.0, (self.chunks_total - self.chunks_done) * per_chunk)


def progress_of(state: SnapshotState, now: float) -> SnapshotProgress:
    """Progress of `state` at time `now`; unfinished ranges count their planning estimate."""
    total = 0
    for item in state.ranges:
        total += item.chunks if item.done else max(item.estimate, item.chunks + 1)
    done = sum(1 for r in state.ranges if r.done)
    return SnapshotProgress(
        chunks_done=state.chunks_done(),
        chunks_total=total,
        rows=state.rows,
        elapsed=max(0.0, now - state.started_at) if state.started_at else 0.0,
        ranges_done=done,
        ranges_total=len(state.ranges),
        finished=state.finished,
    )
