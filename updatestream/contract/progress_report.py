"""`ProgressReport`: what a running job reports after every micro-batch (its status file).

The job's `ProgressTracker` is the one writer (`write()`, atomically, so a reader never sees
half a report); the operator (from the file, or in a cluster from the progress ConfigMap a
sidecar copies it into), the demo, the harnesses and the benchmarks read it with `read()` or
`loads()`. Fields:

- `stream`, `keyRange`, `batchId` (the last finished micro-batch), `batches`, `idleTriggers`
  (triggers that found nothing new to read: the query runs, caught up), `updatedAt`
  (unix seconds), `phase` (`starting`, `running`, `hopping`, `waiting`: a sink's server does
  not answer and the job writes the batch again, `stopped`, `failed`), `error` (a failed job's
  fatal error, or what a waiting job waits for; one line without Secret values) and `retryable`
  (whether relaunching the job may get past it: false for a configuration the job will meet
  again);
- `shards`: per shard the last delivered Event Token and its GTID `position`, change `events`
  and counts by op (`byOp`, heartbeats included), the timestamps of the last change and the last
  heartbeat, the latest position Spark knows, and `lagSeconds`;
- `duplicates`: events the hop dedup rule classified, by cause (`hop`: dropped, `unknown`:
  delivered); `sinks`: per sink what its batches `written`, `skipped`, wrote `late`, and the
  `duplicatesDelivered` it detected;
- `shardMap` and `hops`: the serving shard map the stream reads and the hops it made inside
  its running query, oldest first (`completedAt` is null while a hop is in flight);
- `dedup`: the dedup rule the stream applies now (`watermarks`, `overlap_until`: the rule it
  was started with, merged with those of the hops it made), null when it has none; a
  relaunch after a hop starts with it;
- `snapshot` (streams that snapshot): chunks done of the estimated total, rows delivered, the
  rate, an ETA, and whether it has `finished` (null before the first batch);
- `lastBatch`: where the last micro-batch's time went, in seconds: `readSeconds` (reading it
  back from Spark before the first sink), `sinkSeconds` per sink, `totalSeconds` (the batch
  function), and `sparkSeconds`, Spark's own split of the last micro-batch it reported
  (`durationMs`: `latestOffset`, `walCommit`, `addBatch`, `commitOffsets`, ...) as of
  `sparkBatchId` (null before the first batch).

Unknown fields are ignored, so a reader does not break when the job reports more. A report that
cannot be read raises `ProgressError` naming the field.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
)

from updatestream.core.errors import UpdateStreamError
from updatestream.core.token import EventToken, TokenError
from updatestream.spec import describe_validation_error
from updatestream.spec_values import DedupValue, KeyRangeValue, ShardMapValue

# the phase of a job whose sink's server does not answer: it writes the same batch again
WAITING = "waiting"


class ProgressError(UpdateStreamError):
    """A job's progress report is malformed; the message names the field."""


def _token(value: Any) -> EventToken:
    if isinstance(value, EventToken):
        return value
    try:
        if isinstance(value, str):
            return EventToken.loads(value)
        if isinstance(value, dict):
            return EventToken.from_json(value)
    except TokenError as exc:
        raise ValueError(f"not an Event Token: {exc}") from None
    raise ValueError(f"an Event Token must be an object or its JSON text, got {value!r}")


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number of seconds")
    return value


Token = Annotated[
    EventToken,
    PlainValidator(_token),
    PlainSerializer(lambda token: token.to_json(), return_type=dict),
]
Seconds = Annotated[float | None, AfterValidator(_finite)]
Count = Annotated[int, Field(ge=0, strict=True)]


class _Report(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class ShardReport(_Report):
    token: Token | None = None  # the last token delivered (change event or heartbeat)
    position: str | None = None  # its GTID position
    events: Count = 0  # change events, heartbeats not counted
    by_op: dict[str, Count] = Field(default_factory=dict, alias="byOp")
    last_event_timestamp: int | None = Field(None, alias="lastEventTimestamp")
    heartbeat_timestamp: int | None = Field(None, alias="heartbeatTimestamp")
    latest_position: str | None = Field(None, alias="latestPosition")  # known to Spark
    lag_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(0.0, alias="lagSeconds")

    @property
    def changes(self) -> dict[str, int]:
        """Counts by op without heartbeats (progress markers, not changes)."""
        return {op: n for op, n in self.by_op.items() if op != "heartbeat"}


class SinkReport(_Report):
    written: Count = 0  # events that changed the sink
    skipped: Count = 0  # events it already had or dropped by its rules
    late: Count = 0  # CDCv2: written at a later time than their own
    duplicates_delivered: Count = Field(0, alias="duplicatesDelivered")


class HopReport(_Report):
    number: int | None = None
    from_map: ShardMapValue = Field(alias="fromMap")
    to_map: ShardMapValue = Field(alias="toMap")
    from_shards: list[KeyRangeValue] = Field(default_factory=list, alias="from")
    to_shards: list[KeyRangeValue] = Field(default_factory=list, alias="to")
    serving_changed_at: Seconds = Field(None, alias="servingChangedAt")
    detected_at: Seconds = Field(None, alias="detectedAt")
    completed_at: Seconds = Field(None, alias="completedAt")  # None while in flight
    duration_seconds: Seconds = Field(None, alias="durationSeconds")
    duplicates_dropped: Count = Field(0, alias="duplicatesDropped")


class SnapshotReport(_Report):
    chunks_done: Count = Field(0, alias="chunksDone")
    chunks_total: Count = Field(0, alias="chunksTotal")  # an estimate until finished
    ranges_done: Count = Field(0, alias="rangesDone")
    ranges_total: Count = Field(0, alias="rangesTotal")
    rows: Count = 0
    rows_per_second: float = Field(0.0, alias="rowsPerSecond")
    eta_seconds: Seconds = Field(None, alias="etaSeconds")
    elapsed_seconds: Seconds = Field(None, alias="elapsedSeconds")
    finished: bool = False


class BatchReport(_Report):
    batch_id: int | None = Field(None, alias="batchId")
    read_seconds: float = Field(0.0, alias="readSeconds")
    sink_seconds: dict[str, float] = Field(default_factory=dict, alias="sinkSeconds")
    total_seconds: float = Field(0.0, alias="totalSeconds")
    spark_batch_id: int | None = Field(None, alias="sparkBatchId")
    spark_seconds: dict[str, float] = Field(default_factory=dict, alias="sparkSeconds")


class ProgressReport(_Report):
    stream: str = ""
    key_range: KeyRangeValue | None = Field(None, alias="keyRange")
    batch_id: int | None = Field(None, alias="batchId")
    batches: Count = 0
    # triggers of the query that found nothing new to read: it runs and is caught up
    idle_triggers: Count = Field(0, alias="idleTriggers")
    updated_at: Seconds = Field(None, alias="updatedAt")
    phase: str | None = None
    error: str | None = None  # the job's fatal error, one line
    retryable: bool | None = None  # with `error`: whether a relaunch may get past it
    shard_map: ShardMapValue | None = Field(None, alias="shardMap")
    hops: list[HopReport] = Field(default_factory=list)
    # the dedup rule the stream applies now (after the hops it started after and made)
    dedup: DedupValue | None = None
    duplicates: dict[str, Count] = Field(default_factory=dict)
    sinks: dict[str, SinkReport] = Field(default_factory=dict)
    shards: dict[str, ShardReport] = Field(default_factory=dict)
    snapshot: SnapshotReport | None = None
    last_batch: BatchReport | None = Field(None, alias="lastBatch")

    def dumps(self) -> str:
        data = self.model_dump(mode="json", by_alias=True)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def parse(cls, data: Any) -> ProgressReport:
        if not isinstance(data, dict):
            raise ProgressError(
                f"a progress report must be a JSON object, got {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ProgressError(describe_validation_error(exc)) from None

    @classmethod
    def loads(cls, text: str, *, source: str) -> ProgressReport:
        """Parse a report's text; errors name `source` (a file or a ConfigMap)."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ProgressError(f"progress report {source} is not JSON: {exc}") from None
        try:
            return cls.parse(data)
        except ProgressError as exc:
            raise ProgressError(f"progress report {source}: {exc}") from None

    @classmethod
    def read(cls, path: Path) -> ProgressReport:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProgressError(f"cannot read progress report {path}: {exc.strerror}") from None
        return cls.loads(text, source=str(path))

    def write(self, path: Path) -> None:
        """Replace `path` atomically (a reader sees the old report or the new, never half)."""
        # one temp file per writer: two threads of one process must not share it
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(self.dumps(), encoding="utf-8")
        tmp.replace(path)
