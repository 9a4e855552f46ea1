"""Read a CDCv2 stream back in time order from statements in any order, with any duplication.

:class:`OrderedReader` takes statements as they come (push) and reports, each time its
frontier advances, the updates at the times that just completed together with the new frontier:
every time below the frontier is complete and has been reported. It keeps only what is needed
for the times not yet complete:

* the distinct updates received at times at or beyond the frontier (to report them, and to
  recognise their duplicates),
* per such time, the announced count minus the distinct updates received,
* progress statements that cannot be grafted on yet (their ``lower`` is beyond the times the
  integrated progress statements cover).

Anything about a time below the frontier is discarded on arrival, so memory is proportional to
the unfinished times only, however long the stream and however often statements repeat.

Times are integers (the writer's are seconds since the epoch) and a stream starts at time 0,
the ``lower`` of its first progress statement.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from updatestream.cdcv2.format import (
    CDCv2FormatError,
    Progress,
    Statement,
    Update,
    canonical,
    read_file,
    stream_files,
)

__all__ = [
    "Collection",
    "Completed",
    "OrderedReader",
    "ordered",
    "read_directory",
    "read_paths",
]


class Completed(NamedTuple):
    """Updates at the times that completed, and the new frontier (None: the stream closed)."""

    updates: list[Update]
    frontier: int | None


class OrderedReader:
    """Reorders and deduplicates CDCv2 statements; see the module docstring."""

    def __init__(self, frontier: int = 0) -> None:
        self._frontier: int | None = frontier  # every time below it has been reported
        self._progress: int | None = frontier  # progress statements cover times below it
        self._expected: dict[int, int] = {}  # time -> announced count - distinct received
        self._blocking: list[int] = []  # heap of times whose expected count may be non-zero
        self._pending: dict[int, set[tuple[str, int]]] = {}  # time -> {(data text, diff)}
        self._pending_times: list[int] = []  # heap of the keys of _pending
        self._queue: list[tuple[int, int, Progress]] = []  # heap of progress not yet grafted
        self._seq = itertools.count()

    @property
    def frontier(self) -> int | None:
        """All times below this are complete and reported; None once the stream has closed."""
        return self._frontier

    def retained(self) -> int:
        """How many statements the reader holds (distinct updates plus queued progress)."""
        return sum(len(s) for s in self._pending.values()) + len(self._queue)

    def push(self, statement: Statement) -> Completed | None:
        """Take one statement; returns what completed because of it, if anything."""
        if isinstance(statement, Update):
            self._push_update(statement)
        else:
            self._push_progress(statement)
        return self._advance()

    def push_all(self, statements: Iterable[Statement]) -> Iterator[Completed]:
        for statement in statements:
            done = self.push(statement)
            if done is not None:
                yield done

    # -- internals ------------------------------------------------------------------------

    def _below_frontier(self, time: int) -> bool:
        return self._frontier is None or time < self._frontier

    def _covered(self, time: int) -> bool:
        return self._progress is None or time < self._progress

    def _adjust(self, time: int, delta: int) -> int:
        before = self._expected.get(time, 0)
        after = before + delta
        self._expected[time] = after
        if before == 0 and after != 0:
            heapq.heappush(self._blocking, time)
        return after

    def _push_update(self, update: Update) -> None:
        time = update.time
        if self._below_frontier(time):
            return  # already reported: a duplicate
        key = (canonical(update.data), update.diff)
        seen = self._pending.get(time)
        if seen is None:
            seen = self._pending[time] = set()
            heapq.heappush(self._pending_times, time)
        elif key in seen:
            return  # a duplicate of an update still held
        seen.add(key)
        if self._adjust(time, -1) < 0 and self._covered(time):
            raise CDCv2FormatError(
                f"more distinct updates at time {time} than its progress statement counts "
                f"(one more: {key[0][:200]} diff {key[1]}); the stream mixes two histories"
            )

    def _push_progress(self, progress: Progress) -> None:
        for time, count in progress.counts:
            if time < progress.lower or (progress.upper is not None and time >= progress.upper):
                raise CDCv2FormatError(
                    f"progress statement [{progress.lower}, {progress.upper}) counts time {time} "
                    "outside its interval"
                )
            if count <= 0:
                raise CDCv2FormatError(f"progress statement counts {count} updates at {time}")
        if self._progress is None:
            return  # the stream is closed; nothing more can be learned
        heapq.heappush(self._queue, (progress.lower, next(self._seq), progress))
        while self._queue and self._progress is not None and self._queue[0][0] <= self._progress:
            _, _, ready = heapq.heappop(self._queue)
            covered = self._progress
            if ready.upper is not None and ready.upper <= covered:
                continue  # everything it says is known already
            for time, count in ready.counts:
                if time >= covered and self._adjust(time, count) < 0:
                    raise CDCv2FormatError(
                        f"progress statement counts {count} updates at time {time} but more "
                        "distinct updates were received; the stream mixes two histories"
                    )
            self._progress = ready.upper

    def _advance(self) -> Completed | None:
        while self._blocking and self._expected.get(self._blocking[0], 0) == 0:
            heapq.heappop(self._blocking)
        candidate = self._progress
        if self._blocking and (candidate is None or self._blocking[0] < candidate):
            candidate = self._blocking[0]
        current = self._frontier
        if current is None or (candidate is not None and candidate <= current):
            return None
        updates: list[Update] = []
        while self._pending_times and (candidate is None or self._pending_times[0] < candidate):
            time = heapq.heappop(self._pending_times)
            self._expected.pop(time, None)
            for text, diff in sorted(self._pending.pop(time)):
                updates.append(Update(json.loads(text), time, diff))
        self._frontier = candidate
        return Completed(updates, candidate)


def ordered(statements: Iterable[Statement], frontier: int = 0) -> Iterator[Completed]:
    """Reorder and deduplicate statements: yields ``(updates, frontier)`` as times complete."""
    yield from OrderedReader(frontier).push_all(statements)


def read_paths(paths: Iterable[Path], frontier: int = 0) -> Iterator[Completed]:
    """Read CDCv2 files given in any order, possibly repeated."""
    reader = OrderedReader(frontier)
    for path in paths:
        yield from reader.push_all(read_file(path))


def read_directory(directory: Path, frontier: int = 0) -> Iterator[Completed]:
    """Read the batch files of one stream directory (``<path>/<stream>/range=<key range>``)."""
    if not directory.is_dir():
        raise CDCv2FormatError(f"CDCv2 stream directory {directory} does not exist")
    return read_paths(stream_files(directory), frontier)


class Collection:
    """The multiset the updates describe, accumulated time by time."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self.frontier: int | None = 0

    def apply(self, completed: Completed) -> None:
        for update in completed.updates:
            key = canonical(update.data)
            count = self._counts.get(key, 0) + update.diff
            if count:
                self._counts[key] = count
            else:
                self._counts.pop(key, None)
        self.frontier = completed.frontier

    def multiplicities(self) -> Mapping[str, int]:
        """Canonical JSON of each datum with a non-zero multiplicity."""
        return dict(self._counts)

    def tables(self) -> dict[str, dict[str, Any]]:
        """For change-stream data: table -> canonical primary-key JSON -> row.

        Raises CDCv2FormatError if a row's multiplicity is not 1 or two rows share a key, which
        would mean the history is not that of a keyed table.
        """
        result: dict[str, dict[str, Any]] = {}
        for text, count in sorted(self._counts.items()):
            data = json.loads(text)
            where = f"{data.get('table')} {canonical(data.get('pk'))}"
            if count != 1:
                raise CDCv2FormatError(f"row {where} has multiplicity {count}, expected 1")
            rows = result.setdefault(data["table"], {})
            pk = canonical(data["pk"])
            if pk in rows:
                raise CDCv2FormatError(f"two rows with the primary key {where}")
            rows[pk] = data["row"]
        return result
