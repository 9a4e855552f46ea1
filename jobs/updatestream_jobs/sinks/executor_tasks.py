"""Sink writes that run in Spark's tasks, on the executors, instead of in the driver.

A sink whose contract lets its rows be written in any order between partitions (the mirror:
apply-if-newer; memcached: an entry only moves to a newer token) can hand a micro-batch to
Spark: `run_partitions` runs one task per partition of the batch, each writing its own rows in
stream order, all at the same time, and returns what every task reported, in partition order.
The driver keeps what must be ordered: it waits for every task, then records the results, the
batch's progress and Spark's commit. A task that fails fails the whole Spark job, so the batch
is written again (the sink is idempotent per event).

Rows reach a task as Arrow record batches (`mapInArrow`), read as one dict a row; `kept_events`
turns them into the events a sink receives in the driver (no hop markers, no hop duplicates). A
sink's typed error raised in a task comes back to the driver as text inside Spark's error;
`task_failure` / `driver_error` carry its kind, message and cause across, so the driver raises
the same `SinkUnavailable` (waited out by `SinkRetry`) or `SinkError` it would have raised
itself. The messages never hold credentials: they are the sink's own, which name a server and
what its client said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from updatestream.binlog.events import HOP_MARKER, ChangeEvent
from updatestream.core.dedup import DROPPED_VERDICTS
from updatestream_jobs.sinks import sink as sink_errors
from updatestream_jobs.sinks.sink import BatchContext, SinkError, SinkResult, SinkUnavailable

_MARK = "UPDATESTREAM-SINK-TASK-FAILURE"
_FOUND = re.compile(_MARK + r" (\{[^\n]*\})")


class _Closable(Protocol):
    def close(self) -> None: ...


_Sink = TypeVar("_Sink", bound=_Closable)

# A Python worker's sinks, one per spec, kept between batches (their connections, the mirror's
# table schemas); past `KEPT_WORKER_SINKS` (a worker serving many streams), the oldest is closed.
_WORKER_SINKS: dict[tuple[str, ...], Any] = {}
KEPT_WORKER_SINKS = 8


def worker_sink(key: tuple[str, ...], make: Callable[[], _Sink]) -> _Sink:
    """The worker's sink for `key` (a task's spec texts), made by `make` the first time."""
    if key not in _WORKER_SINKS:
        while len(_WORKER_SINKS) >= KEPT_WORKER_SINKS:
            _WORKER_SINKS.pop(next(iter(_WORKER_SINKS))).close()
        _WORKER_SINKS[key] = make()
    sink: _Sink = _WORKER_SINKS[key]
    return sink


@runtime_checkable
class ExecutorWritten(Protocol):
    """A sink that writes a batch from Spark's tasks: `write_frame` instead of the driver's
    `write_batch` (which it still has, for a caller that holds events)."""

    name: str

    @property
    def writes_from_executors(self) -> bool: ...

    def write_frame(self, frame: Any, ctx: BatchContext) -> SinkResult: ...


def writes_from_executors(sink: object) -> bool:
    return isinstance(sink, ExecutorWritten) and sink.writes_from_executors


def kept_events(rows: Iterable[Mapping[str, Any]]) -> Iterator[ChangeEvent]:
    """A partition's events as a sink receives them: hop markers and dropped copies left out."""
    for row in rows:
        event = ChangeEvent.from_row(row)
        if event.op == HOP_MARKER or event.dedup in DROPPED_VERDICTS:
            continue
        yield event


class SinkTaskFailure(RuntimeError):
    """A sink's typed error raised in a task, in a form that crosses to the driver as text."""


def task_failure(error: SinkError) -> SinkTaskFailure:
    """What a task raises for the sink's `error` (see `driver_error`)."""
    found: dict[str, str | bool] = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, SinkUnavailable):
        found.update(unavailable=True, kind=error.kind, address=error.address, cause=error.cause)
    return SinkTaskFailure(f"{_MARK} {json.dumps(found)}")


def driver_error(exc: BaseException) -> BaseException:
    """The sink's own typed error when Spark's failure `exc` carries one from a task, else
    `exc` itself (a failure of Spark, not of the sink)."""
    match = _FOUND.search(str(exc))
    if match is None:
        return exc
    try:
        found = json.loads(match.group(1))
    except ValueError:
        return exc
    message = str(found.get("message", ""))
    kind = getattr(sink_errors, str(found.get("type")), None)
    if not (isinstance(kind, type) and issubclass(kind, SinkError)):
        kind = SinkError
    if found.get("unavailable"):
        return SinkUnavailable(
            message,
            kind=str(found.get("kind", "")),
            address=str(found.get("address", "")),
            cause=str(found.get("cause", "")),
        )
    return kind(message)


PartitionWriter = Callable[[Iterator[dict[str, Any]]], Iterator[dict[str, Any]]]


class _ArrowTask:
    """A partition's Arrow record batches as row dicts to `write`; its reports as JSON text.
    (Arrow carries the rows to the Python worker much faster than pickled Spark rows.)"""

    def __init__(self, write: PartitionWriter) -> None:
        self.write = write

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow

        rows = (row for batch in batches for row in batch.to_pylist())
        for report in self.write(rows):
            yield pyarrow.RecordBatch.from_pylist([{"report": json.dumps(report)}])


def run_partitions(frame: Any, write: PartitionWriter) -> list[dict[str, Any]]:
    """Run `write` over every partition of `frame` in Spark's tasks; each yields one report
    (a JSON-able dict). Raises the sink's typed error when a task raised one."""
    try:
        found = frame.mapInArrow(_ArrowTask(write), "report string").collect()
        return [json.loads(row["report"]) for row in found]
    except Exception as exc:
        error = driver_error(exc)
        if error is exc:
            raise
        raise error from None
