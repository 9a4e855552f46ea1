"""How the job hands one micro-batch to its sinks (Spark local mode, a real DataFrame): read
from Spark once, in one job, when it is small (then written to every sink at the same time),
once per sink when it is larger than the driver should hold; either way every sink gets the same
events in the same order, duplicates counted once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

import pytest
from updatestream_jobs.batch_delivery import SINGLE_PASS_EVENTS
from updatestream_jobs.job import Job
from updatestream_jobs.sinks import SinkError

from updatestream import spec
from updatestream.binlog.events import HOP_MARKER, SPARK_SCHEMA_DDL, ChangeEvent
from updatestream.contract.job_config import JobConfig


class CountingFrame:
    """A real DataFrame that counts how often the job reads it back to the driver."""

    def __init__(self, frame: Any) -> None:
        self.frame = frame
        self.reads = 0
        self.persisted = 0

    def toLocalIterator(self, prefetchPartitions: bool = False) -> Any:
        self.reads += 1
        return self.frame.toLocalIterator(prefetchPartitions=prefetchPartitions)

    def limit(self, rows: int) -> Limited:
        return Limited(self, rows)

    def persist(self) -> CountingFrame:
        self.persisted += 1
        self.frame.persist()
        return self

    def unpersist(self) -> CountingFrame:
        self.persisted -= 1
        self.frame.unpersist()
        return self


class Limited:
    """`CountingFrame.limit`: its `collect` counts as one read."""

    def __init__(self, counting: CountingFrame, rows: int) -> None:
        self.counting, self.rows = counting, rows

    def collect(self) -> list[Any]:
        self.counting.reads += 1
        return cast(list[Any], self.counting.frame.limit(self.rows).collect())


# a hop marker's payload: the source's HopInfo as JSON (what the tracker reads of it)
HOP = {"number": 1, "fromMap": "-", "toMap": "-", "from": ["-"], "to": ["-"], "detectedAt": 5}


def _event(n: int, op: str = "insert", dedup: str | None = None) -> ChangeEvent:
    token = json.dumps({"shard": "-", "pos": f"0-1-{n}", "ts": 1_700_000_000 + n})
    return ChangeEvent(
        keyspace="commerce",
        shard="-",
        op=op,  # type: ignore[arg-type]
        table=None if op == HOP_MARKER else "orders",
        pk=None if op == HOP_MARKER else json.dumps({"id": n}),
        keyspace_id=None,
        before=None,
        after=json.dumps(HOP) if op == HOP_MARKER else "{}",
        token=token,
        timestamp=1_700_000_000 + n,
        gtid=f"0-1-{n}",
        tx_index=0,
        dedup=dedup,
    )


def _job(tmp_path: Path, sinks: int) -> tuple[Job, list[Path]]:
    paths = [tmp_path / f"sink{i}.jsonl" for i in range(sinks)]
    stream = spec.parse_update_stream(
        {
            "metadata": {"name": "orders-feed"},
            "spec": {
                "keyspace": "commerce",
                "tables": ["orders"],
                "sinks": [{"type": "console", "path": str(p)} for p in paths],
            },
        }
    )
    keyspace = spec.parse_keyspace(
        {
            "metadata": {"name": "commerce"},
            "spec": {
                "shards": [
                    {"name": "-", "mysql": {"host": "db"}, "credentialsSecret": {"name": "r"}}
                ],
                "vschema": {"sharded": False},
                "servingShards": ["-"],
            },
        }
    )
    options = JobConfig(
        stream=stream, keyspace=keyspace, secrets_dir=tmp_path, checkpoint=tmp_path / "cp"
    )
    return Job(options), paths


def _batch(spark: Any, events: list[ChangeEvent]) -> CountingFrame:
    return CountingFrame(spark.createDataFrame([e.as_tuple() for e in events], SPARK_SCHEMA_DDL))


def _written(path: Path) -> list[tuple[str, str | None]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [(line["gtid"], line["pk"]) for line in lines]


EVENTS = [
    _event(0, HOP_MARKER),
    *(_event(n) for n in range(1, 6)),
    _event(6, dedup="hop"),  # a hop duplicate: dropped, counted once
    _event(7, dedup="unknown"),  # undecidable: delivered, counted once
    _event(8),
]
DELIVERED = [(f"0-1-{n}", json.dumps({"id": n})) for n in (1, 2, 3, 4, 5, 7, 8)]


@pytest.mark.parametrize(
    ("limit", "reads"),
    # too large: one read finds it out, then one per sink
    [(SINGLE_PASS_EVENTS, 1), (len(EVENTS), 1), (len(EVENTS) - 1, 4), (2, 4)],
    ids=["default", "just-fits", "one-over", "large"],
)
def test_every_sink_gets_the_same_batch_read_once_when_it_fits(
    spark: Any, tmp_path: Path, limit: int, reads: int
) -> None:
    job, paths = _job(tmp_path, sinks=3)
    job.single_pass_events = limit
    frame = _batch(spark, EVENTS)
    job.write_batch(frame, 0)
    assert frame.reads == reads
    assert frame.persisted == 0  # persisted for the batch, released after it
    for path in paths:
        assert _written(path) == DELIVERED, path.name
    assert +job.tracker.duplicates == {"hop": 1, "unknown": 1}  # (causes at 0 left out)
    assert [hop.number for hop in job.tracker.hops] == [1]
    for sink in job.sinks:
        assert job.tracker.sinks[sink.name]["written"] == len(DELIVERED)


@pytest.mark.parametrize(
    ("limit", "reads"),
    [(SINGLE_PASS_EVENTS, 1), (2, 2)],  # too large: one read finds it out, the sink's streams it
    ids=["held", "large"],
)
def test_one_sink_gets_a_small_batch_held_and_a_large_one_streamed(
    spark: Any, tmp_path: Path, limit: int, reads: int
) -> None:
    job, (path,) = _job(tmp_path, sinks=1)
    job.single_pass_events = limit
    frame = _batch(spark, EVENTS)
    job.write_batch(frame, 0)
    assert frame.reads == reads and frame.persisted == 0
    assert _written(path) == DELIVERED
    assert +job.tracker.duplicates == {"hop": 1, "unknown": 1}  # (causes at 0 left out)


@pytest.mark.parametrize("sinks", [1, 2])
def test_each_batch_records_where_its_time_went(spark: Any, tmp_path: Path, sinks: int) -> None:
    job, _ = _job(tmp_path, sinks=sinks)
    for batch_id in (0, 1):
        job.write_batch(_batch(spark, EVENTS), batch_id)
    assert [p.batch_id for p in job.batch_phases] == [0, 1]
    for phases in job.batch_phases:
        assert list(phases.sinks_s) == [sink.name for sink in job.sinks]  # in stream order
        assert phases.read_s > 0  # held before the first sink writes
        assert phases.concurrent == (sinks > 1)  # a held batch's sinks write at the same time
        writing = max(phases.sinks_s.values())  # (the sum, when they write one after another)
        parts = phases.read_s + writing + phases.finish_s
        assert 0 < parts <= phases.total_s
        assert phases.started_at > 1_700_000_000


def test_the_status_report_says_where_the_last_batch_went(spark: Any, tmp_path: Path) -> None:
    job, _ = _job(tmp_path, sinks=2)
    assert job.tracker.snapshot().last_batch is None  # before the first batch
    job.write_batch(_batch(spark, EVENTS), 0)
    job.tracker.observe_spark_phases(0, {"addBatch": 180, "walCommit": 51, "latestOffset": 3})
    job.write_batch(_batch(spark, EVENTS), 1)
    report = job.tracker.snapshot()
    last = report.last_batch
    assert last is not None and last.batch_id == 1
    assert list(last.sink_seconds) == [sink.name for sink in job.sinks]
    assert 0 < last.read_seconds + max(last.sink_seconds.values()) <= last.total_seconds
    # Spark reports a batch after it commits: the report carries the last one it reported
    assert last.spark_batch_id == 0
    assert last.spark_seconds == {"addBatch": 0.18, "latestOffset": 0.003, "walCommit": 0.051}
    data = json.loads(report.dumps())["lastBatch"]
    assert set(data) >= {"batchId", "readSeconds", "sinkSeconds", "sparkSeconds", "totalSeconds"}


class Paced:
    """A sink that takes `seconds` longer, or fails, and notes when its write returned."""

    def __init__(self, inner: Any, seconds: float = 0.0, fail: bool = False) -> None:
        self.inner, self.seconds, self.fail = inner, seconds, fail
        self.name = inner.name
        self.returned: list[float] = []

    def write_batch(self, events: Any, ctx: Any) -> Any:
        result = self.inner.write_batch(events, ctx)
        time.sleep(self.seconds)
        self.returned.append(time.monotonic())
        if self.fail:
            raise SinkError(f"{self.name}: unreachable")
        return result


def test_a_held_batch_s_sinks_write_at_the_same_time(spark: Any, tmp_path: Path) -> None:
    """A slow sink does not hold the others back; a failing one fails the batch once every
    sink has returned (Spark runs it again: every sink is idempotent)."""
    job, paths = _job(tmp_path, sinks=3)
    slow, quick, failing = Paced(job.sinks[0], 1.5), Paced(job.sinks[1]), Paced(job.sinks[2])
    job.sinks = [slow, quick, failing]
    job.write_batch(_batch(spark, EVENTS), 0)
    assert quick.returned[0] < slow.returned[0] - 1.0
    failing.fail = True
    with pytest.raises(SinkError, match="unreachable"):
        job.write_batch(_batch(spark, EVENTS), 1)
    assert len(slow.returned) == len(quick.returned) == 2  # the others wrote batch 1 anyway
    for path in paths:
        assert _written(path) == DELIVERED * 2, path.name
