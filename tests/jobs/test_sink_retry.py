"""Riding out a sink server's outage, without a server: which errors are an outage, the
backoff, the messages, the retry loop and the status report it writes while it waits."""

from __future__ import annotations

import threading
from pathlib import Path

import pymysql
import pytest
from updatestream_jobs.job import typed_error
from updatestream_jobs.progress_tracker import ProgressTracker
from updatestream_jobs.sink_retry import SinkRetry, SinkRetryPolicy, unavailable_message
from updatestream_jobs.sinks.server_outage import server_unavailable, sink_failure
from updatestream_jobs.sinks.sink import SinkError, SinkUnavailable

from updatestream.contract.progress_report import ProgressReport

REFUSED = pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'")


def outage(cause: str = "MySQL error 2003: Can't connect") -> SinkUnavailable:
    return SinkUnavailable(
        f"mirror(127.0.0.1:3307/m): cannot apply batch 4: {cause}",
        kind="mirror",
        address="127.0.0.1:3307",
        cause=cause,
    )


@pytest.mark.parametrize(
    ("exc", "down"),
    [
        (REFUSED, True),
        (pymysql.err.OperationalError(2013, "Lost connection to server during query"), True),
        (pymysql.err.OperationalError(2006, "MySQL server has gone away"), True),
        (pymysql.err.OperationalError(1053, "Server shutdown in progress"), True),
        (pymysql.err.OperationalError(1927, "Connection was killed"), True),
        (pymysql.err.InterfaceError(0, ""), True),
        (ConnectionRefusedError(111, "Connection refused"), True),
        (pymysql.err.OperationalError(1045, "Access denied for user 'w'@'localhost'"), False),
        (pymysql.err.OperationalError(1142, "INSERT command denied"), False),
        (pymysql.err.ProgrammingError(1146, "Table 'm.users' doesn't exist"), False),
        (ValueError("a value the table cannot hold"), False),
    ],
)
def test_only_a_server_that_does_not_answer_is_an_outage(exc: BaseException, down: bool) -> None:
    assert server_unavailable(exc) is down
    error = sink_failure(exc, "failed", name="m", kind="mirror", address="h:1", cause="c")
    assert isinstance(error, SinkError) and str(error) == "m: failed: c"
    assert isinstance(error, SinkUnavailable) is down


def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = SinkRetryPolicy(first_delay=1.0, max_delay=15.0, give_up_after=900.0)
    assert [policy.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 15, 15, 15]


def test_the_waiting_message_names_the_sink_and_what_to_do() -> None:
    message = unavailable_message(1, outage(), 42, SinkRetryPolicy())
    assert message.startswith(
        "spec.sinks[1]: mirror 127.0.0.1:3307 does not answer (MySQL error 2003: Can't connect)"
    )
    assert "batch 42" in message and "900s" in message and "nothing is lost" in message
    assert "check that the server runs" in message


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingStop(threading.Event):
    """A stop event whose waits advance the clock instead of sleeping."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        self.clock.now += timeout or 0.0
        return self.is_set()


def test_a_write_is_retried_until_the_server_answers_and_later_attempts_are_replays() -> None:
    clock = FakeClock()
    stop = CountingStop(clock)
    retry = SinkRetry(SinkRetryPolicy(1.0, 4.0, 900.0), stop, clock=clock)
    calls: list[bool] = []
    told: list[str] = []

    def attempt(again: bool) -> str:
        calls.append(again)
        if len(calls) < 5:
            raise outage()
        return "written"

    assert retry.write(attempt, index=2, batch_id=9, waiting=told.append) == "written"
    assert calls == [False, True, True, True, True]
    assert stop.waits == [1.0, 2.0, 4.0, 4.0]
    assert len(told) == 4 and all(t.startswith("spec.sinks[2]: mirror") for t in told)


def test_past_the_policys_limit_the_job_fails_with_the_typed_error() -> None:
    clock = FakeClock()
    retry = SinkRetry(SinkRetryPolicy(1.0, 10.0, 30.0), CountingStop(clock), clock=clock)

    def attempt(again: bool) -> None:
        raise outage()

    with pytest.raises(SinkUnavailable) as failed:
        retry.write(attempt, index=0, batch_id=3, waiting=lambda _m: None)
    assert str(failed.value).startswith("spec.sinks[0]: mirror 127.0.0.1:3307 did not answer")
    assert "relaunched from its positions" in str(failed.value)


def test_other_sink_errors_are_not_retried_and_a_stop_ends_the_wait() -> None:
    clock = FakeClock()
    stop = CountingStop(clock)
    retry = SinkRetry(SinkRetryPolicy(), stop, clock=clock)

    def refused(again: bool) -> None:
        raise SinkError("mirror: Access denied")

    with pytest.raises(SinkError, match="Access denied"):
        retry.write(refused, index=0, batch_id=1, waiting=lambda _m: None)
    assert stop.waits == []
    stop.set()
    with pytest.raises(SinkUnavailable, match="did not answer"):
        retry.write(lambda again: (_ for _ in ()).throw(outage()), index=0, batch_id=1,
                    waiting=lambda _m: None)  # fmt: skip


def test_a_sink_outage_ending_the_query_comes_back_as_the_typed_error() -> None:
    text = (
        "pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] "
        "An exception was raised by the Python Proxy. Return Message: Traceback ...\n"
        "updatestream_jobs.sinks.sink.SinkUnavailable: spec.sinks[1]: mirror 127.0.0.1:3307 "
        "did not answer for 900s (MySQL error 2003: Can't connect)\n"
    )
    typed = typed_error(RuntimeError(text))
    assert isinstance(typed, SinkUnavailable)
    assert str(typed).startswith("spec.sinks[1]: mirror 127.0.0.1:3307 did not answer")


def test_the_status_report_says_the_job_waits_then_clears_once_delivered(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    tracker = ProgressTracker("feed", "-", status_file=status)
    tracker.set_phase("running")
    message = unavailable_message(1, outage(), 5, SinkRetryPolicy())
    tracker.wait_for_sink(message)
    waiting = ProgressReport.read(status)
    assert (waiting.phase, waiting.error, waiting.retryable) == ("waiting", message, True)
    tracker.wait_for_sink(message)  # a later attempt keeps the phase the wait interrupted
    tracker.sinks_answer()
    back = ProgressReport.read(status)
    assert (back.phase, back.error, back.retryable) == ("running", None, None)


def test_no_secret_value_reaches_the_waiting_message(tmp_path: Path) -> None:
    (tmp_path / "mirror-writer").mkdir()
    (tmp_path / "mirror-writer" / "password").write_text("s3cr3t-Value\n")
    clock = FakeClock()
    retry = SinkRetry(SinkRetryPolicy(), CountingStop(clock), tmp_path, clock)
    calls: list[bool] = []
    told: list[str] = []

    def attempt(again: bool) -> None:
        calls.append(again)
        if len(calls) == 1:
            raise outage("MySQL error 1927: killed while using password s3cr3t-Value")

    retry.write(attempt, index=1, batch_id=2, waiting=told.append)
    (message,) = told
    assert "s3cr3t-Value" not in message and "password ***" in message
