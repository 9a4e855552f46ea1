"""What every sink implements.

A sink receives the events of one micro-batch in stream order (per shard: GTID order, and row
order within a transaction) together with the batch id. Writing the same batch id twice, or an
event twice, must change nothing: Spark replays the last batch after a crash between the sink
write and the checkpoint commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from updatestream.binlog.events import ChangeEvent
from updatestream.core.errors import UpdateStreamError


class SinkError(UpdateStreamError):
    """A sink could not take a batch. The message names the sink and its address; the batch is
    not acknowledged, so Spark retries it and nothing is lost."""


class SinkUnavailable(SinkError):
    """A sink's server does not answer (refused, reset, gone away): nothing the batch holds is
    wrong, so the job writes the same batch again once the server is back (see
    `updatestream_jobs.sink_retry`). `kind` and `address` say which sink (`mirror`,
    `127.0.0.1:3306`), `cause` what the client saw; none of them carries a credential."""

    def __init__(self, message: str, *, kind: str = "", address: str = "", cause: str = "") -> None:
        super().__init__(message)
        self.kind = kind or "sink"
        self.address = address
        self.cause = cause or message


class MirrorSinkSchemaError(SinkError):
    """A mirror table does not fit its source table (a dropped or retyped column, another
    primary key): the message names the table and the column and says what to do."""


@dataclass(frozen=True, slots=True)
class BatchContext:
    stream: str  # UpdateStream name
    key_range: str  # the key range this job serves
    batch_id: int
    # True when an earlier run may have written this batch already: Spark logged its offsets
    # but had not committed it when this job started from the checkpoint (a replay after a
    # crash). What a replay repeats is expected, not a delivered duplicate.
    replay: bool = False


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What a sink is built with besides its spec."""

    keyspace: str  # the Keyspace the stream reads (cache keys carry it)
    secrets_dir: Path  # where Secrets are mounted: <dir>/<secret>/<key>
    # the Keyspace itself (its shards' endpoints), for sinks that read the source's schema
    keyspace_spec: Any = None  # updatestream.spec.Keyspace | None
    # the job's Prometheus registry, for sinks with metrics of their own (None: their own)
    registry: Any = None


@dataclass(frozen=True, slots=True)
class SinkResult:
    written: int  # events that changed the sink
    skipped: int  # events the sink already had (replays, duplicates) or dropped by its rules
    late: int = 0  # events written at a later time than their own (CDCv2: time had completed)
    # events that reached the sink although it already had them from an earlier batch (or
    # earlier in this one), not through a replay: the stream delivered a duplicate. The sink
    # kept its state right; `updatestream_duplicates_delivered_total` and its alert count these.
    duplicates_delivered: int = 0


class ReplayGuard:
    """Tells a sink whether a batch may repeat what it holds: a replay after a restart
    (`BatchContext.replay`) or a batch id it already wrote in this process."""

    def __init__(self) -> None:
        self.last_written: int | None = None

    def may_repeat(self, ctx: BatchContext) -> bool:
        return ctx.replay or (self.last_written is not None and ctx.batch_id <= self.last_written)

    def written(self, ctx: BatchContext) -> None:
        self.last_written = max(ctx.batch_id, self.last_written or ctx.batch_id)


class Sink(Protocol):
    name: str  # e.g. "memcached(127.0.0.1:11211)"; never includes credentials

    def open(self) -> None: ...

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult: ...

    def close(self) -> None: ...
