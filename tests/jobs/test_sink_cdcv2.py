"""The CDCv2 sink: true progress statements, exact reconstruction, replay and duplicates."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink, stream_directory
from updatestream_jobs.sinks.sink import BatchContext, SinkError

from harness.sink_events import ShardLog, final_rows, split_transaction, two_shard_workload
from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.cdcv2 import Collection, Progress, Update, read_directory
from updatestream.cdcv2.format import read_file, stream_files

STREAM = "orders-feed"


def make_sink(path: Path, lateness: int = 1, **extra: object) -> CDCv2Sink:
    config = spec.CDCv2Sink.model_validate(
        {"type": "cdcv2", "path": str(path), "allowedLatenessSeconds": lateness, **extra}
    )
    sink = CDCv2Sink(config)
    sink.open()
    return sink


def ctx(batch_id: int, key_range: str = "-") -> BatchContext:
    return BatchContext(stream=STREAM, key_range=key_range, batch_id=batch_id)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def closing_batch(at: int) -> list[ChangeEvent]:
    """A heartbeat-only batch well after the workload, so every time completes."""
    return [ShardLog("-40", 3, seq=2).heartbeat(at), ShardLog("80-", 2, seq=11).heartbeat(at)]


@pytest.mark.parametrize(
    "writers", [{}, {"writeFrom": "executors", "writePartitions": 4}], ids=["one", "parts"]
)
def test_reader_reconstructs_the_final_table_exactly(
    tmp_path: Path, writers: dict[str, object]
) -> None:
    work = two_shard_workload()
    sink = make_sink(tmp_path, **writers)
    results = [sink.write_batch(b, ctx(i)) for i, b in enumerate(work.batches)]
    sink.write_batch(closing_batch(1_700_000_100), ctx(len(work.batches)))

    assert sum(r.written for r in results) == len(work.unique)
    assert sum(r.skipped for r in results) == work.duplicates == 2
    collection = Collection()
    for completed in read_directory(stream_directory(tmp_path, ctx(0))):
        collection.apply(completed)
    assert collection.tables() == final_rows(work.unique)
    assert collection.frontier == 1_700_000_100 - 1


def test_every_progress_statement_is_true(tmp_path: Path) -> None:
    work = two_shard_workload()
    sink = make_sink(tmp_path)
    for i, batch in enumerate([*work.batches, closing_batch(1_700_000_100)]):
        sink.write_batch(batch, ctx(i))
    directory = stream_directory(tmp_path, ctx(0))
    updates: set[tuple[str, int, int]] = set()
    progress: list[Progress] = []
    for path in stream_files(directory):
        for statement in read_file(path):
            if isinstance(statement, Update):
                key = (json.dumps(statement.data, sort_keys=True), statement.time, statement.diff)
                assert key not in updates, "an update was written twice"
                updates.add(key)
            else:
                progress.append(statement)
    per_time = Counter(time for _, time, _ in updates)
    covered = 0
    for statement in progress:  # in file order they tile [0, frontier) without gaps
        assert statement.lower == covered
        assert statement.upper is not None
        for time in {t for t in per_time if statement.lower <= t < statement.upper}:
            assert dict(statement.counts).get(time) == per_time[time]
        assert all(per_time[t] == n for t, n in statement.counts)
        covered = statement.upper
    assert all(t < covered for t in per_time)
    # batch 2 ends with a change in the second of its heartbeats: it waits for a later file
    files = stream_files(directory)
    late_second = work.batches[2][-3].timestamp
    assert work.batches[2][-1].timestamp == late_second
    assert all(s.time < late_second for s in read_file(files[2]) if isinstance(s, Update))
    assert any(s.time == late_second for s in read_file(files[3]) if isinstance(s, Update))


def test_replayed_batch_rewrites_identical_files(tmp_path: Path) -> None:
    work = two_shard_workload()
    sink = make_sink(tmp_path)
    for i, batch in enumerate(work.batches):
        first = sink.write_batch(batch, ctx(i))
        before = snapshot(tmp_path)
        again = sink.write_batch(list(reversed(batch)), ctx(i))  # cross-shard order may differ
        assert snapshot(tmp_path) == before
        assert (again.written, again.skipped) == (first.written, first.skipped)


def test_duplicate_events_change_nothing(tmp_path: Path) -> None:
    work = two_shard_workload()
    plain, doubled = tmp_path / "plain", tmp_path / "doubled"
    a, b = make_sink(plain), make_sink(doubled)
    for i, batch in enumerate(work.batches):
        a.write_batch(batch, ctx(i))
        result = b.write_batch(batch + [e for e in batch if e.op != "heartbeat"], ctx(i))
        assert result.skipped >= len([e for e in batch if e.op != "heartbeat"])
    assert snapshot(plain) == snapshot(doubled)


def test_rows_of_one_source_transaction_copied_to_two_destinations_are_both_taken(
    tmp_path: Path,
) -> None:
    # each destination numbers its copied rows from 0.
    split = split_transaction()
    copies, low, high = split.copies, split.destinations["-40"], split.destinations["40-80"]
    sink = make_sink(tmp_path)
    report = sink.write_batch(copies["-40"] + copies["40-80"], ctx(0))
    sink.write_batch([low.heartbeat(1_700_000_200), high.heartbeat(1_700_000_200)], ctx(1))
    sink.close()
    assert (report.written, report.skipped) == (2, 0)
    collection = Collection()
    for completed in read_directory(stream_directory(tmp_path, ctx(0))):
        collection.apply(completed)
    assert collection.tables() == final_rows(split.original)


def test_late_change_is_written_at_the_watermark_not_lost(tmp_path: Path) -> None:
    shard = ShardLog("-80", 1)
    sink = make_sink(tmp_path, lateness=0)
    row = {"id": 1, "name": "a", "visits": 0}
    first = shard.transaction(100, [("insert", "users", None, row)])
    sink.write_batch([*first, shard.heartbeat(200)], ctx(0))
    late = shard.transaction(150, [("update", "users", row, {**row, "visits": 1})])
    result = sink.write_batch([*late, shard.heartbeat(300)], ctx(1))
    assert result.late == 1
    completed = list(read_directory(stream_directory(tmp_path, ctx(0))))
    times = [u.time for c in completed for u in c.updates]
    assert times == [100, 200, 200]  # the update's -1 and +1 moved from 150 to 200
    collection = Collection()
    for c in completed:
        collection.apply(c)
    assert collection.tables()["users"] == {'{"id":1}': {**row, "visits": 1}}


def test_key_ranges_write_separate_streams(tmp_path: Path) -> None:
    shard = ShardLog("-80", 1)
    sink = make_sink(tmp_path)
    sink.write_batch([shard.heartbeat(10)], ctx(0, "-80"))
    sink.write_batch([shard.heartbeat(10)], ctx(0, "80-"))
    assert (tmp_path / STREAM / "range=-80" / "batch-000000000000.jsonl").is_file()
    assert (tmp_path / STREAM / "range=80-" / "batch-000000000000.jsonl").is_file()


def test_restarted_checkpoint_is_refused(tmp_path: Path) -> None:
    shard = ShardLog("-80", 1)
    sink = make_sink(tmp_path)
    for i in range(3):
        sink.write_batch([shard.heartbeat(10 + i)], ctx(i))
    with pytest.raises(SinkError, match=r"cdcv2\(.*\).*already holds batch 2, after batch 0"):
        sink.write_batch([shard.heartbeat(20)], ctx(0))


def test_unwritable_path_raises_sink_error_naming_sink_and_path(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    sink = CDCv2Sink(spec.CDCv2Sink(type="cdcv2", path=str(blocker)))
    with pytest.raises(SinkError) as err:
        sink.write_batch([ShardLog("-80", 1).heartbeat(5)], ctx(0))
    assert f"cdcv2({blocker})" in str(err.value)
    assert "batch 0" in str(err.value)


def test_parquet_files_hold_the_same_stream(tmp_path: Path) -> None:
    work = two_shard_workload()
    as_json, as_parquet = tmp_path / "json", tmp_path / "parquet"
    sinks = [make_sink(as_json)]
    sinks.append(
        CDCv2Sink(
            spec.CDCv2Sink(type="cdcv2", path=str(as_parquet), format="parquet"),
        )
    )
    for i, batch in enumerate([*work.batches, closing_batch(1_700_000_100)]):
        for sink in sinks:
            sink.write_batch(batch, ctx(i))
        before = snapshot(as_parquet)
        sinks[1].write_batch(batch, ctx(i))  # replayed: the same bytes
        assert snapshot(as_parquet) == before
    files = stream_files(stream_directory(as_parquet, ctx(0)))
    assert [f.suffix for f in files] == [".parquet"] * 5
    json_files = stream_files(stream_directory(as_json, ctx(0)))
    for json_file, parquet_file in zip(json_files, files, strict=True):
        assert list(read_file(parquet_file)) == list(read_file(json_file))
    collection = Collection()
    for completed in read_directory(stream_directory(as_parquet, ctx(0))):
        collection.apply(completed)
    assert collection.tables() == final_rows(work.unique)
