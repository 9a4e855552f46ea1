"""CDCv2 from parallel writers (`writeFrom: executors`): the same statements as one writer,
replay-safe in any order, a path kept in its mode, and the Spark tasks writing every part."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink, stream_directory
from updatestream_jobs.sinks.sink import BatchContext, SinkError

from harness.sink_events import ShardLog
from updatestream import spec
from updatestream.binlog.events import SPARK_SCHEMA_DDL, ChangeEvent
from updatestream.cdcv2 import Progress, Update
from updatestream.cdcv2.format import read_file, stream_files
from updatestream.cdcv2.parallel_writer import BatchPlan, PartReport, ProgressWriter
from updatestream.cdcv2.writer import CDCv2WriteError

STREAM = "orders-feed"
Batches = list[list[ChangeEvent]]


def make_sink(path: Path, parts: int | None = None, file_format: str = "jsonl") -> CDCv2Sink:
    config: dict[str, Any] = {"type": "cdcv2", "path": str(path), "format": file_format}
    if parts is not None:
        config.update(writeFrom="executors", writePartitions=parts)
    sink = CDCv2Sink(spec.CDCv2Sink.model_validate(config))
    sink.open()
    return sink


def ctx(batch_id: int) -> BatchContext:
    return BatchContext(stream=STREAM, key_range="-", batch_id=batch_id)


def statements(root: Path) -> tuple[set[tuple[str, int, int]], list[Progress]]:
    """Every update of a stream (each once: a second copy fails) and its progress, in order."""
    updates: set[tuple[str, int, int]] = set()
    progress: list[Progress] = []
    for path in stream_files(stream_directory(root, ctx(0))):
        for statement in read_file(path):
            if isinstance(statement, Update):
                key = (json.dumps(statement.data, sort_keys=True), statement.time, statement.diff)
                assert key not in updates, f"{key} written twice"
                updates.add(key)
            else:
                progress.append(statement)
    return updates, progress


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def random_batches(seed: int, batches: int = 12) -> Batches:
    """Two shards' inserts, updates (some back to an earlier row, some changing the key),
    deletes and re-inserts of the same row, many in one second, timestamps that sometimes go
    back a second, and exact copies of earlier events, cut in batches ending in heartbeats."""
    rng = random.Random(seed)
    logs = {"-80": ShardLog("-80", 1), "80-": ShardLog("80-", 2)}
    rows: dict[str, dict[int, dict[str, Any]]] = {"-80": {}, "80-": {}}
    clock = {"-80": 1_700_000_000, "80-": 1_700_000_000}
    out: Batches = []
    sent: list[ChangeEvent] = []
    for _ in range(batches):
        batch: list[ChangeEvent] = []
        for _ in range(rng.randint(0, 14)):
            shard = rng.choice(sorted(logs))
            clock[shard] += rng.choice((0, 0, 1, 1, 2, -1))
            change = _random_change(rng, rows[shard], 1 if shard == "-80" else 500)
            events = logs[shard].transaction(clock[shard], [change])
            batch += events
            sent += events
            if sent and rng.random() < 0.2:
                batch.append(rng.choice(sent[-20:]))  # a copy of an event taken already
        out.append(batch + [log.heartbeat(clock[s]) for s, log in logs.items()])
    far = max(clock.values()) + 10
    return [*out, [log.heartbeat(far) for log in logs.values()]]


def _random_change(
    rng: random.Random, rows: dict[int, dict[str, Any]], base: int
) -> tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]:
    key = base + rng.randrange(4)
    row = rows.get(key)
    if row is None:
        rows[key] = {"id": key, "name": f"u{key}", "visits": 0}  # re-inserts repeat the row
        return ("insert", "users", None, dict(rows[key]))
    pick = rng.random()
    if pick < 0.3:
        del rows[key]
        return ("delete", "users", dict(row), None)
    if pick < 0.4 and key + 100 not in rows:  # the key changes (and may change back later)
        moved = {**row, "id": key + 100}
        del rows[key]
        rows[key + 100] = moved
        return ("update", "users", dict(row), dict(moved))
    changed = {**row, "visits": (row["visits"] + 1) % 2}  # back and forth: equal rows again
    rows[key] = changed
    return ("update", "users", dict(row), dict(changed))


@pytest.mark.parametrize(("seed", "parts"), [(1, 3), (2, 4), (3, 1), (4, 7), (5, 2)])
def test_parts_write_exactly_the_statements_of_one_writer(
    tmp_path: Path, seed: int, parts: int
) -> None:
    work = random_batches(seed)
    single, parallel = make_sink(tmp_path / "one"), make_sink(tmp_path / "parts", parts)
    for i, batch in enumerate(work):
        a, b = single.write_batch(batch, ctx(i)), parallel.write_batch(batch, ctx(i))
        assert (b.written, b.skipped, b.late) == (a.written, a.skipped, a.late), f"batch {i}"
    assert statements(tmp_path / "parts") == statements(tmp_path / "one")
    found = list(stream_files(stream_directory(tmp_path / "parts", ctx(0))))
    assert any(".part-" in p.name for p in found) and len(found) > len(work)


def test_a_replay_in_another_order_rewrites_identical_files(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, 3)
    for i, batch in enumerate(random_batches(7)):
        first = sink.write_batch(batch, ctx(i))
        before = files(tmp_path)
        shuffled = list(batch)
        random.Random(i).shuffle(shuffled)
        again = sink.write_batch(shuffled, BatchContext(STREAM, "-", i, replay=True))
        assert files(tmp_path) == before, f"batch {i}"
        assert (again.written, again.skipped) == (first.written, first.skipped)


def test_a_path_keeps_its_mode_and_its_parts(tmp_path: Path) -> None:
    shard = ShardLog("-80", 1)
    make_sink(tmp_path / "one").write_batch([shard.heartbeat(10)], ctx(0))
    with pytest.raises(SinkError, match=r"was written by one writer, this stream has 4"):
        make_sink(tmp_path / "one", 4).write_batch([shard.heartbeat(11)], ctx(1))
    make_sink(tmp_path / "parts", 4).write_batch([shard.heartbeat(10)], ctx(0))
    with pytest.raises(SinkError, match=r"was written by 4 parallel writers, this stream has 2"):
        make_sink(tmp_path / "parts", 2).write_batch([shard.heartbeat(11)], ctx(1))
    with pytest.raises(SinkError, match=r"written by 4 parallel writers, this stream has one"):
        make_sink(tmp_path / "parts").write_batch([shard.heartbeat(11)], ctx(1))


def test_progress_waits_for_every_part(tmp_path: Path) -> None:
    writer = ProgressWriter(tmp_path, parts=3)
    plan = writer.plan(0, {"-80": 100})
    assert plan == BatchPlan(0, 0, 100, {"-80": 100}, 0)
    reports = [PartReport(part, 0, 0, 0, {}) for part in (0, 2)]
    with pytest.raises(CDCv2WriteError, match=r"each of parts 0\.\.2, got \[0, 2\]"):
        writer.finish(plan, reports)
    assert not list(tmp_path.glob("batch-*")), "no progress without every part"


@pytest.mark.parametrize("file_format", ["jsonl", "parquet"])
def test_spark_tasks_write_what_the_driver_would(
    spark: Any, tmp_path: Path, file_format: str
) -> None:
    """The same batches written by `write_frame` (Spark's tasks, 4 parts) and by the driver's
    `write_batch` with the same parts give the same files, byte for byte."""
    work = random_batches(11, batches=6)
    driver = make_sink(tmp_path / "driver", 4, file_format)
    tasks = make_sink(tmp_path / "tasks", 4, file_format)
    for i, batch in enumerate(work):
        frame = spark.createDataFrame([e.as_tuple() for e in batch], SPARK_SCHEMA_DDL)
        a = driver.write_batch(batch, ctx(i))
        b = tasks.write_frame(frame.repartition(3), ctx(i))
        assert (b.written, b.skipped, b.late) == (a.written, a.skipped, a.late), f"batch {i}"
    assert files(tmp_path / "tasks") == files(tmp_path / "driver")
    assert any(".part-" in name for name in files(tmp_path / "tasks"))


def test_a_part_that_cannot_write_fails_the_batch_with_the_sink_error(
    spark: Any, tmp_path: Path
) -> None:
    shard = ShardLog("-80", 1)
    events = shard.transaction(
        100, [("insert", "users", None, {"id": 1, "name": "a", "visits": 0})]
    )
    sink = make_sink(tmp_path, 2)
    directory = stream_directory(tmp_path, ctx(0))
    directory.mkdir(parents=True)
    for part in range(2):  # a file where each part's state directory goes
        (directory / "_state").mkdir(exist_ok=True)
        (directory / "_state" / f"part-{part:03d}").write_text("x")
    frame = spark.createDataFrame(
        [e.as_tuple() for e in [*events, shard.heartbeat(200)]], SPARK_SCHEMA_DDL
    )
    with pytest.raises(SinkError, match=r"cdcv2\(.*\): cannot write part [01] of batch 0 into"):
        sink.write_frame(frame, ctx(0))
