"""The lag benchmark's bookkeeping: batch write times per transaction, joined with a ledger."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest
from updatestream_cli.devcluster.ledger import LedgerEntry
from updatestream_jobs.sinks.cdcv2_sink import CDCv2Sink, stream_directory
from updatestream_jobs.sinks.console_sink import ConsoleSink
from updatestream_jobs.sinks.sink import BatchContext, SinkResult

from bench.lagtools import (
    TimedSink,
    cdcv2_complete_times,
    event_lags,
    fast_lane_times,
    gtid_candidates,
    summarize,
    transaction_keys,
)
from harness.sink_events import ShardLog
from updatestream import spec


def user(uid: int) -> dict[str, object]:
    return {"id": uid, "name": f"user{uid}"}


def entry(shard: str, gtid: str, commit_time: float, order: int = 1) -> LedgerEntry:
    return LedgerEntry(
        order,
        order,
        "users",
        json.dumps({"id": order}),
        "insert",
        "d",
        shard,
        "00",
        gtid,
        commit_time,
    )


def test_timed_sink_passes_the_batch_on_and_records_its_transactions(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    clock = itertools.count(1000.0, 0.5)
    sink = TimedSink(
        ConsoleSink(spec.ConsoleSink(type="console", path=str(out))), clock=lambda: next(clock)
    )
    a, b = ShardLog("-80", 1), ShardLog("80-", 2)
    events = [
        *a.transaction(
            100, [("insert", "users", None, user(1)), ("insert", "users", None, user(2))]
        ),
        *b.transaction(100, [("insert", "users", None, user(3))]),
        a.heartbeat(101),
        b.heartbeat(101),
    ]
    sink.open()
    result = sink.write_batch(iter(events), BatchContext("s", "-", 0))
    sink.close()
    assert result.written == 5 and sink.name == f"console({out})"
    assert len(out.read_text().splitlines()) == 5
    (batch,) = sink.batches
    assert (batch.started_at, batch.read_at, batch.completed_at) == (1000.0, 1000.5, 1001.0)
    assert dict(batch.transactions) == {("-80", "1-1-1"): 2, ("80-", "2-2-1"): 1}
    assert sink.delivered_at() == {("-80", "1-1-1"): 1001.0, ("80-", "2-2-1"): 1001.0}
    assert sink.rows() == 3 and sink.rows(since=1001.5) == 0


@dataclasses.dataclass
class FrameWriter:
    """Stands in for a sink written from the executors: only the bookkeeping is tested here
    (the mirror's executor writes run for real in tests/jobs/test_mirror_job.py)."""

    name: str = "mirror(db:3306/m)"
    writes_from_executors: bool = True

    def write_frame(self, frame: object, ctx: BatchContext) -> SinkResult:
        return SinkResult(written=len(frame) if isinstance(frame, list) else 0, skipped=0)


def test_a_sink_written_from_the_executors_takes_each_batchs_transactions_from_its_peer(
    tmp_path: Path,
) -> None:
    clock = itertools.count(1000.0, 0.5)
    peer = TimedSink(ConsoleSink(spec.ConsoleSink(type="console", path=str(tmp_path / "o"))))
    timed = TimedSink(FrameWriter(), clock=lambda: next(clock), peer=peer)  # type: ignore[arg-type]
    assert timed.writes_from_executors and not peer.writes_from_executors
    a = ShardLog("-80", 1)
    batch = [*a.transaction(100, [("insert", "users", None, user(1))]), a.heartbeat(101)]
    peer.open()
    peer.write_batch(iter(batch), BatchContext("s", "-", 0))
    result = timed.write_frame(["row"], BatchContext("s", "-", 0))
    timed.write_frame(["row"], BatchContext("s", "-", 1))  # the peer has not written batch 1
    assert result.written == 1
    (record,) = timed.batches
    assert (record.batch_id, record.completed_at, record.written) == (0, 1000.5, 1)
    assert timed.delivered_at() == {("-80", "1-1-1"): 1000.5}


def test_lags_are_write_time_minus_commit_time_and_missing_changes_are_counted() -> None:
    delivered = {("-80", "1-1-7"): 12.0, ("80-", "2-2-3"): 15.5}
    ledger = [
        entry("-80", "1-1-7", 11.25, 1),
        entry("-80", "1-1-7", 11.5, 2),
        entry("80-", "2-2-3", 15.0, 3),
        entry("80-", "2-2-4", 15.1, 4),
    ]
    lags, missing = event_lags(ledger, delivered)
    assert lags == [0.75, 0.5, 0.5] and missing == 1


def test_summary_gives_the_median_the_99th_percentile_and_the_maximum() -> None:
    report = summarize([float(x) for x in range(1, 101)], missing=2)
    assert report.as_dict() == {
        "events": 100,
        "missing": 2,
        "p50_s": 50.5,
        "p99_s": 99.01,
        "max_s": 100.0,
    }
    assert summarize([]).as_dict()["p50_s"] is None


def test_a_cdcv2_change_is_complete_when_a_progress_statement_passes_its_second(
    tmp_path: Path,
) -> None:
    clock = iter([10.0, 10.5, 11.0, 20.0, 20.5, 21.0, 30.0, 30.5, 31.0])
    sink = TimedSink(
        CDCv2Sink(spec.CDCv2Sink(type="cdcv2", path=str(tmp_path))),
        clock=lambda: next(clock),
    )
    a, b = ShardLog("-80", 1), ShardLog("80-", 2)
    sink.open()
    first = a.transaction(100, [("insert", "users", None, user(1))])
    second = b.transaction(101, [("insert", "users", None, user(2))])
    # batch 0: both shards at 101 -> watermark 100 (lateness 1): nothing complete yet
    sink.write_batch(
        [*first, *second, a.heartbeat(101), b.heartbeat(101)], BatchContext("s", "-", 0)
    )
    # batch 1: marks at 102 -> watermark 101: second 100 is complete, 101 is not
    sink.write_batch([a.heartbeat(102), b.heartbeat(102)], BatchContext("s", "-", 1))
    # batch 2: marks at 105 -> watermark 104: 101 is complete too
    sink.write_batch([a.heartbeat(105), b.heartbeat(105)], BatchContext("s", "-", 2))
    directory = stream_directory(tmp_path, BatchContext("s", "-", 0))
    complete = cdcv2_complete_times(directory, sink)
    assert complete == {("-80", "1-1-1"): 21.0, ("80-", "2-2-1"): 31.0}
    assert sink.delivered_at() == {("-80", "1-1-1"): 11.0, ("80-", "2-2-1"): 11.0}


@pytest.mark.parametrize("position", ["0-1-4,1-1-9", "1-1-9"])
def test_an_event_is_matched_by_any_gtid_of_its_position(position: str) -> None:
    (event,) = ShardLog("-80", 1).transaction(5, [("insert", "users", None, user(1))])
    assert ("-80", "1-1-9") in transaction_keys(dataclasses.replace(event, gtid=position))


def test_the_fast_lane_s_log_gives_each_transaction_s_first_application(tmp_path: Path) -> None:
    log = tmp_path / "fast-lane.jsonl"
    assert fast_lane_times(log) == {}  # no lane, no times: every change counts as missing
    lines = [
        {"shard": "-80", "gtid": "1-1-7", "tailedAt": 10.25, "appliedAt": 10.5},
        {"shard": "-80", "gtid": "1-1-7", "tailedAt": 10.9, "appliedAt": 11.0},  # started again
        {"shard": "80-", "gtid": "0-1-3,2-2-9", "tailedAt": 11.5, "appliedAt": 12.0},
        {"shard": "80-", "gtid": "0-1-4", "tailedAt": None, "appliedAt": 12.5},  # trimmed first
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"shard": "-80", "gt')
    assert fast_lane_times(log) == {
        ("-80", "1-1-7"): 10.5,
        ("80-", "0-1-3"): 12.0,
        ("80-", "2-2-9"): 12.0,
        ("80-", "0-1-4"): 12.5,
    }
    assert fast_lane_times(log, "tailedAt") == {
        ("-80", "1-1-7"): 10.25,
        ("80-", "0-1-3"): 11.5,
        ("80-", "2-2-9"): 11.5,
    }


def test_a_positions_transaction_is_named_by_each_domain_or_source() -> None:
    # MariaDB: one GTID per domain, the transaction's among them
    assert gtid_candidates("0-1-5,1-2-9") == ["0-1-5", "1-2-9"]
    # MySQL: the executed set; the transaction ends one source's last interval
    assert gtid_candidates("7af9f258-e9e4-11f1-bbe8-02fc00000001:1-10207") == [
        "7af9f258-e9e4-11f1-bbe8-02fc00000001:10207"
    ]
    assert gtid_candidates("a:1-5:7-9, b:1-3") == ["a:9", "b:3"]
    assert gtid_candidates("a:7") == ["a:7"]
