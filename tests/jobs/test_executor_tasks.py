"""A sink's typed error raised in a Spark task reaches the driver as the same typed error, and
a mirror task's deadlock with another task is retried, not a failed batch; a Python worker
keeps a bounded number of mirror sinks; when every sink writes from the executors the driver
reads the batch's progress without the rows' images, and a snapshot's rows as counts."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pymysql
import pytest
from updatestream_jobs.batch_delivery import BatchDelivery, progress_columns, progress_rows
from updatestream_jobs.progress_tracker import ProgressTracker
from updatestream_jobs.sinks.executor_tasks import (
    _WORKER_SINKS,
    KEPT_WORKER_SINKS,
    driver_error,
    task_failure,
)
from updatestream_jobs.sinks.mirror_sink import (
    LOCK_RETRIES,
    MirrorTask,
    with_deadlock_retry,
)
from updatestream_jobs.sinks.sink import MirrorSinkSchemaError, SinkError, SinkUnavailable

from harness.sink_events import two_shard_workload
from updatestream import spec
from updatestream.binlog.events import HOP_MARKER, SPARK_SCHEMA_DDL, ChangeEvent
from updatestream.mirror import ApplyResult


def spark_text(error: BaseException) -> RuntimeError:
    """What the driver gets: the task's traceback inside Spark's own message."""
    return RuntimeError(
        "An error occurred while calling o93.collectToPython.\n: org.apache.spark.SparkException: "
        "Job aborted due to stage failure: Task 1 in stage 4.0 failed 1 times\n"
        'Traceback (most recent call last):\n  File "worker.py", line 1\n'
        f"updatestream_jobs.sinks.executor_tasks.SinkTaskFailure: {error}\n\tat org.apache..."
    )


def test_an_unavailable_server_comes_back_as_sink_unavailable_with_its_fields() -> None:
    raised = SinkUnavailable(
        "mirror(db:3306/m): cannot apply: refused",
        kind="mirror",
        address="db:3306",
        cause="refused",
    )
    found = driver_error(spark_text(task_failure(raised)))
    assert isinstance(found, SinkUnavailable)
    assert (str(found), found.kind, found.address, found.cause) == (
        str(raised),
        "mirror",
        "db:3306",
        "refused",
    )


@pytest.mark.parametrize("kind", [SinkError, MirrorSinkSchemaError])
def test_other_sink_errors_keep_their_type_and_message(kind: type[SinkError]) -> None:
    found = driver_error(spark_text(task_failure(kind("mirror(db:3306/m): users.x was dropped"))))
    assert type(found) is kind and str(found) == "mirror(db:3306/m): users.x was dropped"


def test_a_failure_of_spark_itself_is_left_as_it_is() -> None:
    exc = RuntimeError("Job aborted: executor lost")
    assert driver_error(exc) is exc


def test_a_deadlock_is_retried_and_a_lasting_one_is_raised() -> None:
    calls: list[int] = []

    def twice_a_victim() -> ApplyResult:
        calls.append(1)
        if len(calls) < 3:
            raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")
        return ApplyResult(applied=7)

    assert with_deadlock_retry(twice_a_victim).applied == 7 and len(calls) == 3

    def always() -> ApplyResult:
        raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")

    with pytest.raises(pymysql.err.OperationalError):
        with_deadlock_retry(always)

    refused: list[int] = []

    def denied() -> ApplyResult:
        refused.append(1)
        raise pymysql.err.OperationalError(1142, "INSERT command denied")

    with pytest.raises(pymysql.err.OperationalError):
        with_deadlock_retry(denied)
    assert len(refused) == 1 and LOCK_RETRIES > 1


def test_a_python_worker_keeps_a_few_mirror_sinks_and_closes_the_oldest() -> None:
    def task(database: str) -> MirrorTask:
        config = spec.MirrorSink.model_validate(
            {"type": "mirror", "mysql": {"host": "db"}, "credentialsSecret": {"name": "w"},
             "database": database, "writeFrom": "executors"}
        )  # fmt: skip
        return MirrorTask(config.model_dump_json(by_alias=True), "", "/secrets")

    for other in _WORKER_SINKS.values():  # another test's, in this process
        other.close()
    _WORKER_SINKS.clear()
    first = task("m0").sink()
    assert task("m0").sink() is first  # the same spec: the same sink, its connection kept
    for number in range(1, KEPT_WORKER_SINKS + 1):
        task(f"m{number}").sink()
    kept = {sink.config.database for sink in _WORKER_SINKS.values()}
    assert len(kept) == KEPT_WORKER_SINKS and "m0" not in kept
    _WORKER_SINKS.clear()


def test_the_progress_read_carries_no_images_but_every_field_progress_and_hops_need(
    spark: Any,
) -> None:
    events = [e for batch in two_shard_workload().batches for e in batch]
    hop = {"number": 1, "fromShards": ["-80"], "toShards": ["-40", "40-80"]}
    marker = dataclasses.replace(events[0], op=HOP_MARKER, after=json.dumps(hop), pk=None)
    frame = spark.createDataFrame(  # type: ignore[attr-defined]
        [e.as_tuple() for e in [marker, *events]], SPARK_SCHEMA_DDL
    )
    read = [ChangeEvent.from_row(row.asDict()) for row in progress_columns(frame).collect()]
    assert len(read) == len(events) + 1 and json.loads(read[0].after or "") == hop
    assert all(e.before is None and e.after is None and e.pk is None for e in read[1:])
    assert any(e.after is not None for e in events)
    kept = ("shard", "op", "table", "token", "timestamp", "gtid", "tx_index", "dedup")
    for got, sent in zip(read, [marker, *events], strict=True):
        assert all(getattr(got, name) == getattr(sent, name) for name in kept), (got, sent)
        assert (got.source_shard, got.source_gtid) == (sent.source_shard, sent.source_gtid)


def test_a_batch_of_existing_rows_comes_to_the_driver_as_counts_with_the_same_progress(
    spark: Any,
) -> None:
    events = [e for batch in two_shard_workload().batches for e in batch]
    hop = {"number": 1, "fromMap": "-80,80-", "toMap": "-40,40-80,80-", "from": ["-80"],
           "to": ["-40", "40-80"], "detectedAt": 5}  # fmt: skip
    marker = dataclasses.replace(events[0], op=HOP_MARKER, after=json.dumps(hop), pk=None)
    existing = [
        dataclasses.replace(e, op=op, dedup=dedup)
        for e in events
        for op, dedup in (("snapshot", None), ("reread", None), ("snapshot", "hop"))
    ]
    batch = [*existing[:7], marker, *events[:5], *existing[7:], *events[5:]]
    assert {e.shard for e in existing} == {e.shard for e in events} and len(events) > 5
    frame = spark.createDataFrame(  # type: ignore[attr-defined]
        [e.as_tuple() for e in batch], SPARK_SCHEMA_DDL
    ).repartition(3)
    frame.persist()  # as `BatchDelivery.deliver` does with executor-written sinks
    groups = {(e.shard, e.op, e.dedup) for e in existing}
    assert progress_rows(frame).count() == len(events) + 1 + len(groups)
    read, held = ProgressTracker("s", "-"), ProgressTracker("s", "-")
    BatchDelivery([], read)._progress_only(frame)
    order = [row.asDict() for row in frame.collect()]  # the order the partitions hold
    every = BatchDelivery([], held)
    for _ in held.observe(every.deduplicated(ChangeEvent.from_row(r) for r in order)):
        pass
    assert read.snapshot_rows == held.snapshot_rows == 2 * len(events)
    assert read.duplicates == held.duplicates and read.duplicates["hop"] == len(events)
    assert [h.number for h in read.hops] == [1]
    for shard, progress in held.shards.items():
        got = read.shards[shard]
        assert (got.token, got.position, got.by_op) == (
            progress.token,
            progress.position,
            progress.by_op,
        ), shard
