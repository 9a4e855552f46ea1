"""The streaming job: binlog source -> key-range filter -> hop dedup -> sinks, with progress.

One job serves one key range of one UpdateStream. The source reads only the shards that
intersect the key range and drops rows whose keyspace id lies outside it (the key-range filter
runs inside the source's read, before anything leaves the worker). When the Keyspace's serving
shard map changes, the source hops inside the running query (see `source.hopping`): the hop
batch starts with a `hop` marker row and the reader marks each row with the dedup rule's verdict.
Each micro-batch then goes, in the driver, to every sink with `write_batch(events,
BatchContext(stream, key_range, batch_id))`, in stream order (per shard in GTID order,
heartbeats last), without the hop duplicates, which are counted; markers are recorded as hops
(`batch_delivery`: a small batch is read once and written to every sink at the same time).

Spark runs in local mode (`local[*]`) unless a master is given or the job runs under
spark-submit. Spark's own logging is kept to errors; credentials are read from Secret files on
the workers and never appear in options, logs or the status file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.binlog.errors import SourceOptionsError
from updatestream.contract.job_config import JobConfig
from updatestream.core.errors import UpdateStreamError
from updatestream_jobs.batch_delivery import BatchDelivery, BatchPhases
from updatestream_jobs.progress_tracker import ProgressListener, ProgressTracker
from updatestream_jobs.sink_retry import SinkRetry, SinkRetryPolicy
from updatestream_jobs.sinks import BatchContext, Sink, SinkContext, build_sinks
from updatestream_jobs.source.options import start_option
from updatestream_jobs.stream_metrics import StreamMetrics

log = logging.getLogger(__name__)

# how many micro-batches' phase timings a job keeps (`Job.batch_phases`)
KEPT_BATCH_PHASES = 1000


_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def source_options(config: JobConfig, key_range: str) -> dict[str, str]:
    """The data source options of a job (Spark hands options around as text)."""
    stream = config.stream.spec
    if stream.keyspace != config.keyspace.metadata.name:
        raise SourceOptionsError(
            f"stream {config.name} reads keyspace {stream.keyspace}, but the Keyspace manifest "
            f"is {config.keyspace.metadata.name}"
        )
    found = {
        "keyspace": config.keyspace.model_dump_json(by_alias=True, exclude_none=True),
        "keyRange": key_range,
        "tables": ",".join(stream.tables),
        "secretsDir": str(config.secrets_dir),
        "start": start_option(stream.start),
    }
    if config.keyspace_watch:
        found["keyspaceWatch"] = config.keyspace_watch
    if config.snapshot_requests:
        found["snapshotRequests"] = config.snapshot_requests
    if config.dedup is not None and not config.dedup.is_empty():
        found["dedup"] = json.dumps(config.dedup.to_json(), sort_keys=True)
    ahead = [s for s in stream.sinks if isinstance(s, spec.MemcachedSink) and s.fast_lane]
    if ahead:  # the source's fast lane invalidates ahead of the batches (`source.fast_lane`)
        found["fastLaneSinks"] = json.dumps([s.model_dump(by_alias=True) for s in ahead])
    return {**found, **config.source_options}


CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def spark_session(master: str | None, app_name: str, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession with quiet logging; workers use this Python interpreter. `conf` adds
    Spark settings (`spark.driver.memory` takes effect only when this starts the JVM)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if not under_submit and "SPARK_SUBMIT_OPTS" not in os.environ:
        config = Path(tempfile.gettempdir()) / "updatestream-log4j2.properties"
        config.write_text(_LOG4J)
        # A larger thread stack: Spark's handling of a batch interrupted by stop() runs a deep
        # regex match that overflows the default one.
        os.environ["SPARK_SUBMIT_OPTS"] = f"-Dlog4j2.configurationFile=file:{config} -Xss8m"
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None or not under_submit:
        builder = builder.master(master or "local[*]")
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        # Python workers connect back to the JVM; on a loaded machine 15 s is not always enough.
        .config("spark.python.authenticate.socketTimeout", "120s")
        # Every micro-batch writes its offset and commit log entries (walCommit, commitOffsets).
        # Through FileSystem rather than FileContext they are the same files, written to a
        # temporary name and renamed into place (atomic on a local disk and on HDFS), and take
        # about a third of the time on a local disk.
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    quiet_accumulator_server(session.sparkContext)
    from updatestream_jobs.source.data_source import register

    register(session)
    return session


def quiet_accumulator_server(context: Any) -> None:
    """PySpark's accumulator server (a socketserver thread in this process) prints a traceback
    when the JVM closes its connection in the middle of a read, as it does when SIGTERM reaches
    the whole process group and the JVM exits first. That is the stop the job asked for, not an
    error: it is logged at debug level; any other error of the server is printed as before."""
    server = getattr(context, "_accumulatorServer", None)
    if server is None or getattr(server, "updatestream_quiet", False):
        return  # no server, or a session made again (getOrCreate) already quieted it
    server.updatestream_quiet = True
    printed = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, EOFError | ConnectionError):
            log.debug("the JVM closed Spark's accumulator connection: %r", error)
            return
        printed(request, client_address)

    server.handle_error = handle_error


class Job:
    """A running (or finished) stream job; `run()` blocks until it stops."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self.name = config.name
        try:
            self.key_range = config.serving_key_range().name  # the sinks and source take text
        except spec.SpecError as exc:
            raise SourceOptionsError(str(exc)) from None
        self.metrics = StreamMetrics(self.name)
        self.tracker = ProgressTracker(
            self.name, self.key_range, metrics=self.metrics, status_file=config.status_file
        )
        self.sinks: list[Sink] = build_sinks(
            config.stream.spec.sinks,
            SinkContext(
                keyspace=config.keyspace.metadata.name,
                secrets_dir=config.secrets_dir,
                keyspace_spec=config.keyspace,
                registry=self.metrics.registry,
            ),
        )
        self.metrics_port: int | None = None
        self.query: Any = None
        self._listening: tuple[Any, ProgressListener] | None = None  # (Spark session, listener)
        # a sink whose server does not answer gets the same batch again until the job stops
        self.stopping = threading.Event()
        retry = SinkRetry(SinkRetryPolicy(), self.stopping, config.secrets_dir)
        self.delivery = BatchDelivery(self.sinks, self.tracker, retry)
        self._hop_pending = config.hop_started_at is not None
        self.stop_requested = threading.Event()
        self.batch_phases: deque[BatchPhases] = deque(maxlen=KEPT_BATCH_PHASES)
        self.replays = uncommitted_batches(config.checkpoint)
        self.tracker.shard_map = config.keyspace.spec.serving_map
        self.tracker.dedup = config.dedup  # until the source reports the one it applies

    @property
    def single_pass_events(self) -> int:
        return self.delivery.single_pass_events

    @single_pass_events.setter
    def single_pass_events(self, value: int) -> None:
        self.delivery.single_pass_events = value

    def write_batch(self, frame: Any, batch_id: int) -> None:
        """The foreachBatch function: runs in the driver for every micro-batch."""
        began = time.perf_counter()
        phases = BatchPhases(batch_id, time.time())
        ctx = BatchContext(self.name, self.key_range, batch_id, batch_id in self.replays)
        self.delivery.sinks = self.sinks  # (a caller may wrap or replace the sinks)
        dropped_before = self.tracker.duplicates["hop"]
        self.delivery.deliver(frame, ctx, phases)
        self.tracker.sinks_answer()
        fault_after_sink_write(batch_id)
        finish_began = time.perf_counter()
        self._after_sinks(batch_id, dropped_before)
        self.tracker.batch_timings(
            batch_id, phases.read_s, phases.sinks_s, time.perf_counter() - began
        )
        self.tracker.finish_batch(batch_id)
        done = time.perf_counter()
        phases.finish_s, phases.total_s = done - finish_began, done - began
        self.batch_phases.append(phases)

    def _after_sinks(self, batch_id: int, dropped_before: int) -> None:
        """Hops the batch completed, and the relaunch's hop when it is the first batch."""
        if any(hop.completed_at is None for hop in self.tracker.hops):
            fault_after_hop_write(batch_id)
        for hop in self.tracker.complete_hops(self.tracker.duplicates["hop"] - dropped_before):
            log.info(
                "hop %s done: %s -> %s in %.1fs, %d duplicates dropped",
                hop.number,
                ",".join(map(str, hop.from_shards)),
                ",".join(map(str, hop.to_shards)),
                hop.duration_seconds,
                hop.duplicates_dropped,
            )
        if self._hop_pending and self.config.hop_started_at is not None:
            self._hop_pending = False
            self.metrics.hops.labels(self.name).inc()
            elapsed = max(0.0, time.time() - self.config.hop_started_at)
            self.metrics.hop_duration.labels(self.name).observe(elapsed)
            self.tracker.set_phase("running")

    def start(self, spark: Any | None = None) -> Any:
        config = self.config
        spark = spark or spark_session(config.master, f"updatestream-{self.name}")
        self.metrics.add_sinks([sink.name for sink in self.sinks])
        self.tracker.set_phase("starting")
        if config.metrics_port is not None:
            self.metrics_port = self.metrics.serve(config.metrics_port, config.metrics_host)
            log.info("metrics on %s:%d/metrics", config.metrics_host, self.metrics_port)
        for sink in self.sinks:
            sink.open()
        query_name = f"updatestream_{self.name}_{self.key_range}".replace("-", "_")
        listener = ProgressListener(self.tracker, query_name)
        spark.streams.addListener(listener)
        self._listening = (spark, listener)
        frame = (
            spark.readStream.format("updatestream")
            .options(**source_options(config, self.key_range))
            .load()
        )
        writer = (
            frame.writeStream.queryName(query_name)
            .foreachBatch(self.write_batch)
            .option("checkpointLocation", str(config.checkpoint))
        )
        if config.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
        self.query = writer.start()
        self.tracker.set_phase("hopping" if self._hop_pending else "running")
        return self.query

    def stop(self, *, failed: bool = False) -> None:
        """Stop the query and the sinks; the status file's last word is `stopped` (with the last
        positions delivered) or `failed`."""
        self.stopping.set()
        try:
            if self.query is not None and self.query.isActive:
                self.query.stop()
        except Exception as exc:  # the JVM went first (a signal to the whole process group)
            if not (failed or self.stop_requested.is_set()):
                raise
            log.info("the query was gone already: %s", exc)
        finally:
            self._stop_listening()
            self.delivery.close()
            for sink in self.sinks:
                sink.close()
            self.tracker.set_phase("failed" if failed else "stopped")
            self.metrics.stop()

    def _stop_listening(self) -> None:
        """Remove the job's progress listener from its Spark session: a session that runs job
        after job (tests, benchmarks) would call every stopped job's listener on each progress
        report of the next ones, through Python, one after another."""
        if self._listening is None:
            return
        spark, listener = self._listening
        self._listening = None
        try:
            spark.streams.removeListener(listener)
        except Exception as exc:  # the JVM went first
            log.info("the progress listener was gone already: %s", exc)

    def run(
        self,
        spark: Any | None = None,
        on_tick: Callable[[ProgressTracker], None] | None = None,
    ) -> ProgressTracker:
        """Start, wait until the query ends, `timeout` passes or SIGTERM/SIGINT asks the job to
        stop, then stop; re-raise a query failure as our typed error when it carries one.
        `on_tick` sees the progress about once a second (a progress bar, say)."""
        with self._stop_signals():
            query = self.start(spark)
            failed = True
            try:
                self._await(query, on_tick)
                failed = False
            except Exception as exc:
                if not self.stop_requested.is_set():
                    raise typed_error(exc) from None
                failed = False  # the JVM got the signal too and ended the query
            finally:
                self.stop(failed=failed)
        return self.tracker

    def _await(self, query: Any, on_tick: Callable[[ProgressTracker], None] | None = None) -> None:
        """Wait in short steps, so a stop request is seen within a second."""
        timeout = self.config.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.stop_requested.is_set():
            step = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if step <= 0 or query.awaitTermination(step):
                return
            if on_tick is not None:
                on_tick(self.tracker)

    @contextlib.contextmanager
    def _stop_signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT ask for a clean stop (the handler only sets `stop_requested`);
        only the main thread can take signals, so elsewhere nothing is installed."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def request_stop(signum: int, _frame: Any) -> None:
            log.warning("%s: stopping the stream", signal.Signals(signum).name)
            self.stop_requested.set()
            self.stopping.set()

        previous = {sig: signal.signal(sig, request_stop) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def uncommitted_batches(checkpoint: Path) -> frozenset[int]:
    """Batch ids whose offsets Spark logged in `checkpoint` but did not commit: an earlier run
    may have written them to the sinks, and Spark runs them again (replays)."""

    def ids(folder: str) -> set[int]:
        path = checkpoint / folder
        return {int(p.name) for p in path.iterdir() if p.name.isdigit()} if path.is_dir() else set()

    committed = ids("commits")
    return frozenset(i for i in ids("offsets") if i > max(committed, default=-1))


FAULT_EXIT_AFTER_SINK_WRITE = "UPDATESTREAM_FAULT_EXIT_AFTER_SINK_WRITE"


def fault_after_sink_write(batch_id: int) -> None:
    """Fault injection for crash tests: with UPDATESTREAM_FAULT_EXIT_AFTER_SINK_WRITE=<batch id>,
    the process dies (exit status 137, like a SIGKILL) once every sink has written that batch and
    before Spark commits its offsets, so a restart from the checkpoint replays the batch."""
    wanted = os.environ.get(FAULT_EXIT_AFTER_SINK_WRITE)
    if wanted is not None and wanted.strip() == str(batch_id):
        log.error("fault injection: exiting after the sinks wrote batch %d", batch_id)
        sys.stderr.flush()
        os._exit(137)


FAULT_EXIT_AFTER_HOP_WRITE = "UPDATESTREAM_FAULT_EXIT_AFTER_HOP_WRITE"


def fault_after_hop_write(batch_id: int) -> None:
    """Fault injection for crash tests: with UPDATESTREAM_FAULT_EXIT_AFTER_HOP_WRITE set, the
    process dies (exit status 137) once the sinks wrote a hop batch, before Spark commits it:
    a restart from the checkpoint replays the hop from its recorded starts and dedup rule."""
    if os.environ.get(FAULT_EXIT_AFTER_HOP_WRITE):
        log.error("fault injection: exiting after the sinks wrote hop batch %d", batch_id)
        sys.stderr.flush()
        os._exit(137)


_TYPED = re.compile(
    r"updatestream(?:_jobs)?\.[\w.]+\.(\w+(?:Error|Purged|Unreachable|Unavailable|Table)): ([^\n]+)"
)


def typed_error(exc: BaseException) -> BaseException:
    """Our own typed error when a Spark failure carries one (raised in a Python worker or the
    source runner, it reaches the driver as text), otherwise the Spark error itself."""
    from updatestream.binlog import errors as source_errors
    from updatestream_jobs.sinks import sink as sink_errors

    for match in _TYPED.finditer(str(exc)):
        name, message = match.groups()
        kind = getattr(source_errors, name, None) or getattr(sink_errors, name, None)
        if isinstance(kind, type) and issubclass(kind, UpdateStreamError):
            try:
                return kind(message.strip())
            except TypeError:  # BinlogPurged needs its fields
                return source_errors.SourceError(message.strip())
    return exc
