"""The CDCv2 reader: any order, any duplication, bounded memory, exact history."""

from __future__ import annotations

import dataclasses
import itertools
import random
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink, stream_directory
from updatestream_jobs.sinks.sink import BatchContext

from harness.sink_events import final_rows, two_shard_workload
from updatestream import spec
from updatestream.cdcv2 import (
    CDCv2FormatError,
    Collection,
    OrderedReader,
    Progress,
    Statement,
    Update,
    ordered,
    read_paths,
)
from updatestream.cdcv2.format import decode, encode, stream_files


def history(times: int, per_time: int, per_progress: int) -> Iterator[Statement]:
    """A stream in order: `per_time` updates at each time, progress every `per_progress` times."""
    lower = 0
    for time in range(times):
        for n in range(per_time):
            yield Update(f"row-{time}-{n}", time, 1)
        if (time + 1) % per_progress == 0:
            yield Progress(lower, time + 1, tuple((t, per_time) for t in range(lower, time + 1)))
            lower = time + 1


def mangled(statements: Iterator[Statement], window: int, seed: int) -> Iterator[Statement]:
    """Every statement twice, shuffled within chunks of `window` statements: a copy in its own
    chunk and one in the next (so some duplicates come after their time completed)."""
    rng = random.Random(seed)
    current: list[Statement] = []
    following: list[Statement] = []
    for statement in statements:
        current.append(statement)
        following.append(statement)
        if len(current) >= window:
            rng.shuffle(current)
            yield from current
            current, following = following, []
    current += following
    rng.shuffle(current)
    yield from current


def test_memory_stays_bounded_over_a_million_duplicated_shuffled_statements() -> None:
    times, per_time = 45_000, 10  # 450k updates + 4.5k progress statements, all twice: ~1M
    reader = OrderedReader()
    reported = statements = retained = 0
    tracemalloc.start()
    try:
        for statements, statement in enumerate(mangled(history(times, per_time, 10), 2_000, 1)):
            done = reader.push(statement)
            if done is not None:
                reported += len(done.updates)
            if statements % 1000 == 0:
                retained = max(retained, reader.retained())
            if statements == 100_000:
                _, early_peak = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
        _, late_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert statements + 1 == 2 * (times * per_time + times // 10)
    assert reported == times * per_time  # each update exactly once
    assert reader.frontier == times
    assert reader.retained() == 0
    assert retained <= 2 * 2_000  # never more than the disorder window holds
    # nine times more statements after the first 100k, yet no more memory: it depends on the
    # disorder, not on the length of the stream
    assert late_peak < 1.25 * early_peak + 256 * 1024, (early_peak, late_peak)
    assert late_peak < 8 * 1024 * 1024


def test_progress_out_of_order_waits_for_the_gap() -> None:
    reader = OrderedReader()
    assert reader.push(Progress(5, 9, ((6, 1),))) is None  # cannot be grafted on yet
    assert reader.push(Update("b", 6, 1)) is None
    first = reader.push(Progress(0, 5, ((2, 1),)))
    assert first == ([], 2)  # times 0 and 1 are complete (and empty); 2 misses its update
    done = reader.push(Update("a", 2, 1))
    assert done is not None
    assert done.frontier == 9
    assert [(u.data, u.time) for u in done.updates] == [("a", 2), ("b", 6)]
    assert reader.push(Update("a", 2, 1)) is None  # below the frontier: discarded
    assert reader.retained() == 0


def test_a_closed_stream_reports_everything() -> None:
    reader = OrderedReader()
    reader.push(Update("x", 3, 1))
    done = reader.push(Progress(0, None, ((3, 1),)))
    assert done is not None and done.frontier is None
    assert [u.data for u in done.updates] == ["x"]


def test_contradicting_statements_are_an_error() -> None:
    reader = OrderedReader()
    reader.push(Progress(0, 10, ((3, 1), (5, 1))))  # time 3 still open: 5 cannot complete
    reader.push(Update("a", 5, 1))
    with pytest.raises(CDCv2FormatError, match="more distinct updates at time 5"):
        reader.push(Update("b", 5, 1))
    reader = OrderedReader()
    reader.push(Update("a", 5, 1))
    reader.push(Update("b", 5, 1))
    with pytest.raises(CDCv2FormatError, match="counts 1 updates at time 5 but more"):
        reader.push(Progress(0, 10, ((5, 1),)))


def test_statement_lines_round_trip() -> None:
    for statement in (
        Update({"table": "t", "pk": {"id": 1}, "row": {"id": 1, "s": "é"}}, 17, -1),
        Progress(0, 20, ((3, 2), (17, 1))),
        Progress(20, None, ()),
    ):
        assert decode(encode(statement)) == statement
    with pytest.raises(CDCv2FormatError, match="neither an update nor a progress"):
        decode('{"other": 1}')


consolidated_histories = st.lists(
    st.tuples(st.integers(0, 30), st.sampled_from("abcdef"), st.sampled_from([-1, 1, 2])),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    raw=consolidated_histories,
    cuts=st.lists(st.integers(1, 31), max_size=6),
    copies=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_any_order_any_duplication_gives_the_history(
    raw: list[tuple[int, str, int]], cuts: list[int], copies: int, seed: int
) -> None:
    updates = {(d, t): r for t, d, r in raw}  # consolidated: one diff per (data, time)
    bounds = sorted({0, *cuts, 31})
    statements: list[Statement] = [Update(d, t, r) for (d, t), r in updates.items()]
    per_time = Counter(t for _, t in updates)
    for lower, upper in itertools.pairwise(bounds):
        counts = tuple(sorted((t, n) for t, n in per_time.items() if lower <= t < upper))
        statements.append(Progress(lower, upper, counts))
    statements *= copies
    random.Random(seed).shuffle(statements)
    seen: list[tuple[str, int, int]] = []
    frontier = 0
    for done in ordered(statements):
        assert done.frontier is not None and done.frontier > frontier
        assert all(frontier <= u.time < done.frontier for u in done.updates)
        frontier = done.frontier
        seen += [(u.data, u.time, u.diff) for u in done.updates]
    assert frontier == 31
    assert sorted(seen) == sorted((d, t, r) for (d, t), r in updates.items())


def test_files_in_any_order_with_duplicates_give_the_final_table(tmp_path: Path) -> None:
    work = two_shard_workload()
    sink = CDCv2Sink(spec.CDCv2Sink(type="cdcv2", path=str(tmp_path)))
    sink.open()
    closing = [e for e in work.batches[-1] if e.op == "heartbeat"]
    closing = [dataclasses.replace(e, timestamp=1_700_000_500) for e in closing]
    for i, batch in enumerate([*work.batches, closing]):
        sink.write_batch(batch, BatchContext("s", "-", i))
    files = stream_files(stream_directory(tmp_path, BatchContext("s", "-", 0)))
    mixed = [*reversed(files), *files[::2], files[1]]
    collection = Collection()
    for done in read_paths(mixed):
        collection.apply(done)
    assert collection.tables() == final_rows(work.unique)
