"""The mirror sink: a MySQL/MariaDB database kept up to date, only ever moving forward.

Each batch is collapsed to the newest change per key and applied with guarded multi-row
upserts (:mod:`updatestream.mirror`): a replayed batch, a hop duplicate or a late older change
leaves a row as it is; deletes are tombstones, purged every ``purgeEveryBatches`` batches once
older than ``tombstoneHorizonSeconds``. The source's column types are read from a serving shard
of the Keyspace (``information_schema``) with the shard's own Secret.

A change the mirror already holds at an equal token, in a batch that is no replay, is reported
as a duplicate delivered (a snapshot or re-read row read again at the position of the row it
holds is not: cause ``unchanged``).

With ``writeFrom: executors`` the batch is not brought to the driver: each Spark task applies its
partition's rows (`MirrorTask`, one connection per Python worker) at the same time as the others,
and the driver adds up what they applied (`write_frame`). Two tasks may hold changes of the same
key (a shard's backlog cut in parts, a hop): the guarded upserts keep the newest whichever task
commits last, and a deadlock between their transactions is retried. Metrics (the job's registry):
``updatestream_mirror_rows_applied_total``,
``updatestream_mirror_rows_ignored_total{cause}`` (older, equal, superseded, unchanged),
``updatestream_mirror_unknown_order_total``, ``updatestream_mirror_tombstones_written_total``,
``updatestream_mirror_tombstones_purged_total``, all labelled ``stream`` and ``sink``.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pymysql
from prometheus_client import CollectorRegistry, Counter

from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream.core.errors import UpdateStreamError
from updatestream.mirror import (
    ApplyResult,
    MirrorSchemaError,
    MirrorWriter,
    SourceSchemas,
    collapse,
)
from updatestream.mysql_connections import connection_arguments, describe_error
from updatestream_jobs.sinks.executor_tasks import (
    kept_events,
    run_partitions,
    task_failure,
    worker_sink,
)
from updatestream_jobs.sinks.server_outage import sink_failure
from updatestream_jobs.sinks.sink import (
    BatchContext,
    MirrorSinkSchemaError,
    ReplayGuard,
    SinkContext,
    SinkError,
    SinkResult,
)

IGNORE_CAUSES = ("older", "equal", "superseded", "unchanged")
_FAILURES = (pymysql.err.MySQLError, OSError, UpdateStreamError, ValueError)


class MirrorMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        labels = ["stream", "sink"]
        self.applied = Counter(
            "updatestream_mirror_rows_applied_total",
            "Rows the mirror sink wrote (upserts and tombstones)",
            labels,
            registry=registry,
        )
        self.ignored = Counter(
            "updatestream_mirror_rows_ignored_total",
            "Changes the mirror sink did not apply, by cause (older, equal, superseded)",
            [*labels, "cause"],
            registry=registry,
        )
        self.unknown = Counter(
            "updatestream_mirror_unknown_order_total",
            "Changes applied over a row of the same second from another shard (arrival order)",
            labels,
            registry=registry,
        )
        self.tombstones = Counter(
            "updatestream_mirror_tombstones_written_total",
            "Tombstones the mirror sink wrote for deleted rows",
            labels,
            registry=registry,
        )
        self.purged = Counter(
            "updatestream_mirror_tombstones_purged_total",
            "Tombstones older than the horizon the mirror sink deleted",
            labels,
            registry=registry,
        )

    def start(self, stream: str, sink: str) -> None:
        """Every series at 0, so increase() sees the first increment."""
        for counter in (self.applied, self.unknown, self.tombstones, self.purged):
            counter.labels(stream, sink)
        for cause in IGNORE_CAUSES:
            self.ignored.labels(stream, sink, cause)

    def record(self, stream: str, sink: str, result: ApplyResult) -> None:
        self.applied.labels(stream, sink).inc(result.applied)
        self.unknown.labels(stream, sink).inc(result.unknown)
        self.tombstones.labels(stream, sink).inc(result.tombstones)
        for cause, count in result.ignored.items():
            self.ignored.labels(stream, sink, cause).inc(count)


class MirrorSink:
    """Keeps ``<database>.<tablePrefix><table>`` up to date (see the module)."""

    @classmethod
    def from_spec(cls, config: spec.MirrorSink, context: SinkContext) -> MirrorSink:
        return cls(
            config,
            secrets_dir=context.secrets_dir,
            keyspace=context.keyspace_spec,
            registry=context.registry,
        )

    def __init__(
        self,
        config: spec.MirrorSink,
        *,
        secrets_dir: Path,
        keyspace: spec.Keyspace | None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.secrets_dir = secrets_dir
        self.keyspace = keyspace
        endpoint = config.mysql
        self.address = f"{endpoint.host}:{endpoint.port}"
        self.name = f"mirror({self.address}/{config.database})"
        self.metrics = MirrorMetrics(registry)
        self._writer: MirrorWriter | None = None
        self._replays = ReplayGuard()
        self._batches = 0
        self._started: set[str] = set()
        self.most_tasks = 0  # the most Spark tasks a batch was applied by (writeFrom: executors)
        self._task: MirrorTask | None = None

    def _connect(self) -> Any:
        settings = connection_arguments(
            self.config.mysql, self.secrets_dir, self.config.credentials_secret, autocommit=False
        )
        return pymysql.connect(**settings)

    def _sources(self) -> SourceSchemas:
        if self.keyspace is None:
            raise SinkError(f"{self.name}: needs the Keyspace to read the source tables' columns")
        keyspace = self.keyspace
        shards = []
        for name in keyspace.spec.serving_shards:
            shard = keyspace.spec.shard(name)
            settings = connection_arguments(
                shard.mysql, self.secrets_dir, shard.credentials_secret, read_timeout=30
            )
            shards.append((name, lambda s=settings: pymysql.connect(**s)))
        database = self.config.source_database or keyspace.metadata.name
        flavor = keyspace.spec.shards[0].flavor if keyspace.spec.shards else "mariadb"
        return SourceSchemas(shards, database, flavor)

    @property
    def writer(self) -> MirrorWriter:
        if self._writer is None:
            self._writer = MirrorWriter(
                self._connect,
                self._sources(),
                database=self.config.database,
                prefix=self.config.table_prefix,
                where=self.name,
            )
        return self._writer

    def open(self) -> None:
        try:
            self.writer.create_database()
        except _FAILURES as exc:
            self._drop_connection()
            raise self._failure(exc, "cannot create the database") from None

    def _start_metrics(self, ctx: BatchContext) -> None:
        if ctx.stream not in self._started:
            self.metrics.start(ctx.stream, self.name)
            self._started.add(ctx.stream)

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult:
        self._start_metrics(ctx)
        keys = 0
        try:
            batch = collapse(events)
            keys = len(batch.changes)
            result = self.writer.apply(batch)
            purged = self._maybe_purge()
        except MirrorSchemaError as exc:  # the library's: the sink's typed error
            raise MirrorSinkSchemaError(str(exc)) from None
        except _FAILURES as exc:
            self._drop_connection()
            raise self._failure(
                exc,
                f"cannot apply batch {ctx.batch_id} ({keys} keys); it is retried (tables "
                "committed already hold only what is newer)",
            ) from None
        return self._finish(result, purged, ctx)

    def _finish(self, result: ApplyResult, purged: int, ctx: BatchContext) -> SinkResult:
        self.metrics.record(ctx.stream, self.name, result)
        self.metrics.purged.labels(ctx.stream, self.name).inc(purged)
        equal = result.ignored.get("equal", 0)
        delivered = 0 if self._replays.may_repeat(ctx) else equal
        self._replays.written(ctx)
        skipped = sum(result.ignored.values())
        return SinkResult(written=result.applied, skipped=skipped, duplicates_delivered=delivered)

    @property
    def writes_from_executors(self) -> bool:
        return self.config.write_from == "executors"

    def write_frame(self, frame: Any, ctx: BatchContext) -> SinkResult:
        """``writeFrom: executors``: every Spark task of the batch `frame` applies its own rows
        (collapsed per partition) at the same time as the others; the driver adds up what they
        applied and purges tombstones every ``purgeEveryBatches`` batches."""
        self._start_metrics(ctx)
        if self._task is None:  # the specs as text, once: every batch ships the same task
            keyspace = self.keyspace
            shards = keyspace.model_dump_json(by_alias=True, exclude_none=True) if keyspace else ""
            config = self.config.model_dump_json(by_alias=True)
            self._task = MirrorTask(config, shards, str(self.secrets_dir))
        result = ApplyResult()
        reports = run_partitions(frame, self._task)
        for report in reports:
            result.add(applied_of(report))
        self.most_tasks = max(self.most_tasks, len(reports))
        try:
            purged = self._maybe_purge()
        except _FAILURES as exc:
            self._drop_connection()
            raise self._failure(exc, "cannot purge old tombstones; it is retried") from None
        return self._finish(result, purged, ctx)

    def apply_events(self, events: Iterable[ChangeEvent]) -> dict[str, Any]:
        """Apply one task's events (see `MirrorTask`); a deadlock with another task's
        transaction is retried, a failure raised as the sink's typed error in a task's form."""
        keys = 0
        try:
            batch = collapse(events)
            keys = len(batch.changes)
            result = with_deadlock_retry(lambda: self.writer.apply(batch))
        except MirrorSchemaError as exc:
            raise task_failure(MirrorSinkSchemaError(str(exc))) from None
        except _FAILURES as exc:
            self._drop_connection()
            what = f"cannot apply a partition of the batch ({keys} keys); the batch is retried"
            raise task_failure(self._failure(exc, what)) from None
        return {
            "applied": result.applied,
            "tombstones": result.tombstones,
            "unknown": result.unknown,
            "ignored": dict(result.ignored),
        }

    def _failure(self, exc: BaseException, what: str) -> SinkError:
        return sink_failure(
            exc,
            what,
            name=self.name,
            kind="mirror",
            address=self.address,
            cause=describe_error(exc),
        )

    def _maybe_purge(self) -> int:
        self._batches += 1
        if self._batches % self.config.purge_every:
            return 0
        return self.writer.purge(self.config.tombstone_horizon)

    def purge(self) -> int:
        """Purge tombstones older than the horizon now (the sink does it every N batches)."""
        return self.writer.purge(self.config.tombstone_horizon)

    def _drop_connection(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def close(self) -> None:
        self._drop_connection()


# InnoDB's deadlock and lock wait timeout: two tasks' transactions took the same keys' locks
_LOCK_CONFLICTS = {1213, 1205}
LOCK_RETRIES = 5


def with_deadlock_retry(apply: Callable[[], ApplyResult]) -> ApplyResult:
    """`apply()`, again (up to `LOCK_RETRIES` attempts in all) when InnoDB chose it as a
    deadlock's victim: the writer rolled back its transaction, and guarded upserts make a retry
    safe."""
    for attempt in range(1, LOCK_RETRIES):
        try:
            return apply()
        except pymysql.err.OperationalError as exc:
            if not (exc.args and exc.args[0] in _LOCK_CONFLICTS):
                raise
            time.sleep(0.01 * attempt)
    return apply()


def applied_of(report: dict[str, Any]) -> ApplyResult:
    return ApplyResult(
        applied=report["applied"],
        tombstones=report["tombstones"],
        unknown=report["unknown"],
        ignored=collections.Counter(report["ignored"]),
    )


class MirrorTask:
    """What one Spark task runs for its partition of a batch: the sink made from its spec (once
    per Python worker, with the worker's own connection) applies the partition's events, and
    the task reports what it applied. Holds only text, so Spark ships it to the executors."""

    def __init__(self, config: str, keyspace: str, secrets_dir: str) -> None:
        self.config, self.keyspace, self.secrets_dir = config, keyspace, secrets_dir

    def sink(self) -> MirrorSink:
        return worker_sink((self.config, self.keyspace, self.secrets_dir), self._make)

    def _make(self) -> MirrorSink:
        keyspace = spec.parse_keyspace(json.loads(self.keyspace)) if self.keyspace else None
        config = spec.MirrorSink.model_validate_json(self.config)
        return MirrorSink(config, secrets_dir=Path(self.secrets_dir), keyspace=keyspace)

    def __call__(self, rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        yield self.sink().apply_events(kept_events(rows))
