"""A sink's typed error raised in a Spark task reaches the driver as the same typed error, and
a mirror task's deadlock with another task is retried, not a failed batch; a Python worker
keeps a bounded number of mirror sinks."""

from __future__ import annotations

import pymysql
import pytest
from updatestream_jobs.sinks.executor_tasks import driver_error, task_failure
from updatestream_jobs.sinks.mirror_sink import (
    _TASK_SINKS,
    KEPT_TASK_SINKS,
    LOCK_RETRIES,
    MirrorTask,
    with_deadlock_retry,
)
from updatestream_jobs.sinks.sink import MirrorSinkSchemaError, SinkError, SinkUnavailable

from updatestream import spec
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

    first = task("m0").sink()
    assert task("m0").sink() is first  # the same spec: the same sink, its connection kept
    for number in range(1, KEPT_TASK_SINKS + 1):
        task(f"m{number}").sink()
    kept = {sink.config.database for sink in _TASK_SINKS.values()}
    assert len(kept) == KEPT_TASK_SINKS and "m0" not in kept
    _TASK_SINKS.clear()
