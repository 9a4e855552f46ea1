"""The job's status file: dropped duplicates by cause, sink counts and the phase, as the operator's
progress reader and the verifier read them. No Spark: the tracker alone."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from updatestream_cli.verify.inputs import read_duplicates
from updatestream_jobs.progress_tracker import ProgressListener, ProgressTracker
from updatestream_jobs.sinks import SinkResult
from updatestream_jobs.stream_metrics import StreamMetrics
from updatestream_operator.reconciler.progress_reader import loads_progress

from updatestream.binlog.events import ChangeEvent
from updatestream.core.gtid import parse_position
from updatestream.core.token import EventToken


def test_status_file_carries_duplicates_by_cause_for_operator_and_verifier(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    metrics = StreamMetrics("orders-feed")
    tracker = ProgressTracker("orders-feed", "-", metrics=metrics, status_file=status)
    tracker.set_phase("hopping")
    for cause in ("hop", "hop", "hop", "unknown"):
        tracker.count_duplicate(cause)
    tracker.sink_result("cdcv2(x)", SinkResult(written=5, skipped=2, late=1))
    tracker.sink_result("cdcv2(x)", SinkResult(written=1, skipped=0))
    tracker.sink_result("console(stdout)", None)
    tracker.finish_batch(3)

    data = json.loads(status.read_text())
    assert data["duplicates"] == {"hop": 3, "reverse": 0, "straddle": 0, "unknown": 1}
    assert data["phase"] == "hopping" and data["batchId"] == 3
    assert data["sinks"]["cdcv2(x)"] == {
        "written": 6,
        "skipped": 2,
        "late": 1,
        "duplicatesDelivered": 0,
    }
    assert data["sinks"]["console(stdout)"]["written"] == 0

    progress = loads_progress(status.read_text(), launch_id=1, source=str(status))
    assert progress.duplicates == {"hop": 3, "reverse": 0, "straddle": 0, "unknown": 1}
    # the verifier's total is what was dropped: undecidable events were delivered
    assert read_duplicates(status) == (3, {"hop": 3, "reverse": 0, "straddle": 0, "unknown": 1})

    value = metrics.registry.get_sample_value
    labels = {"stream": "orders-feed"}
    assert value("updatestream_duplicates_total", {**labels, "cause": "hop"}) == 3
    phase = {**labels, "key_range": "-"}
    assert value("updatestream_job_phase", {**phase, "phase": "hopping"}) == 1
    assert value("updatestream_job_phase", {**phase, "phase": "running"}) == 0


def test_a_fresh_status_file_says_no_duplicates_yet(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    ProgressTracker("s", "-80", status_file=status).write_status()
    assert json.loads(status.read_text())["duplicates"] == {
        "hop": 0,
        "reverse": 0,
        "straddle": 0,
        "unknown": 0,
    }
    assert read_duplicates(status) == (0, {"hop": 0, "reverse": 0, "straddle": 0, "unknown": 0})
    assert loads_progress(status.read_text(), launch_id=None, source="s").duplicates == {
        "hop": 0,
        "reverse": 0,
        "straddle": 0,
        "unknown": 0,
    }


def test_threads_writing_the_status_file_at_once_leave_a_whole_report(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the snapshot's progress thread and the batch thread both write it; one shared temp
    # file once left a report with the tail of a longer one after it, and a lost rename
    status = tmp_path / "status.json"
    tracker = ProgressTracker("s", "-80", status_file=status)
    failures: list[BaseException] = []

    def write_many(phase: str) -> None:
        try:
            for _ in range(200):
                tracker.set_phase(phase)
                tracker.write_status()
        except BaseException as exc:
            failures.append(exc)

    writers = [threading.Thread(target=write_many, args=(p,)) for p in ("snapshot", "stream")]
    for writer in writers:
        writer.start()
    seen = 0
    while any(w.is_alive() for w in writers):
        if status.exists():
            json.loads(status.read_text())
            seen += 1
    for writer in writers:
        writer.join()
    assert failures == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert json.loads(status.read_text())["stream"] == "s" and seen > 0
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_without_a_latest_offset_the_lag_reads_the_end_offsets_behind_shards() -> None:
    """`prefetchHeld`: Spark reports no latest offset; the end offset names the shards whose
    tail had read past it (`_behind`), and only those are behind."""
    now = 1_800_000_000.0
    tracker = ProgressTracker("s", "-", clock=lambda: now)
    delivered = {"-80": "0-1-10", "80-": "0-2-20"}

    def token(shard: str, gtid: str, ago: int) -> EventToken:
        return EventToken(int(now) - ago, shard, parse_position(gtid))

    events = [
        ChangeEvent("ks", shard, op, "t", "1", "00", None, None, token(shard, gtid, 30).dumps(),
                    int(now) - 30, gtid, 0)
        for shard, gtid in delivered.items() for op in ("insert", "heartbeat")
    ]  # fmt: skip
    for _ in tracker.observe(iter(events)):
        pass
    end = {shard: token(shard, gtid, 30).to_json() for shard, gtid in delivered.items()}
    end["_behind"] = {"-80": token("-80", "0-1-15", 0).to_json()}
    # PySpark gives a missing latest offset as the text "None" (`str` of the JVM's null)
    source = SimpleNamespace(latestOffset="None", endOffset=json.dumps(end))
    progress = SimpleNamespace(name="q", batchId=1, durationMs={}, sources=[source])
    ProgressListener(tracker, "q").onQueryProgress(SimpleNamespace(progress=progress))
    assert {shard: p.lag_seconds for shard, p in tracker.shards.items()} == {
        "-80": 30.0,
        "80-": 0.0,
    }
