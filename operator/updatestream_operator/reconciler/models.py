"""The operator's own data: jobs as launchers see them, job progress, the Events to post, and
the stream status.

The status models serialise to the camelCase shape of the UpdateStream CRD's status. Everything
here is plain data: no Kubernetes client, no kopf.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.dataclasses import dataclass as typed_dataclass

from updatestream.contract.progress_report import SnapshotReport
from updatestream.core.dedup import DedupFilter
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken
from updatestream.spec import Keyspace, SparkSpec, UpdateStreamSpec
from updatestream.spec_values import DedupValue, KeyRangeValue, ShardMapValue

# the operator's own records, checked like the spec: key ranges and shard maps are values
_TYPED = ConfigDict(arbitrary_types_allowed=True)


# Why a job's driver waits (`JobInfo.reason`) when waiting will not get it past: it cannot run
# until someone fixes the image, the configuration or the crash.
STUCK_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


class JobPhase(enum.StrEnum):
    """What a launcher can tell about one job."""

    PENDING = "Pending"  # created, not running yet (no node, image pulling, JVM starting)
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"  # a streaming job should not end; treated like a failure
    FAILED = "Failed"
    TERMINATING = "Terminating"  # being stopped; still counts as existing
    UNKNOWN = "Unknown"
    ABSENT = "Absent"  # no such job (never launched, or stopped)

    @property
    def is_alive(self) -> bool:
        return self in (JobPhase.PENDING, JobPhase.RUNNING, JobPhase.UNKNOWN)


@dataclass(frozen=True)
class StreamRef:
    """The identity of one UpdateStream object (and of a Keyspace, for the Events on it)."""

    namespace: str
    name: str
    uid: str
    generation: int = 0


@typed_dataclass(frozen=True, config=_TYPED)
class JobInfo:
    """One job that exists, as a launcher lists it (from its labels and annotations)."""

    job_id: str  # unique within the launcher's scope (a driver Pod's name, a local id)
    stream_uid: str
    key_range: KeyRangeValue
    shard_map: ShardMapValue  # the serving shard map the job was launched for
    spec_hash: str  # hash of the configuration the job was launched with
    launch_id: int  # which launch of the key range this is (counts up)
    phase: JobPhase
    message: str = ""
    created_at: dt.datetime | None = None
    namespace: str = ""
    # why the job is in its phase, when something is wrong or it waits: Unschedulable,
    # ImagePullBackOff, CrashLoopBackOff, DriverExited, ... ("" when nothing is to say)
    reason: str = ""
    launcher: str = ""  # which launcher runs it (set when listed)
    # launched watching its Keyspace, so it can hop inside its running query (jobs launched
    # by an operator that did not record this are assumed not to)
    in_job_hops: bool = False

    @property
    def key(self) -> str:
        """`namespace/job_id`: what `Launcher.stop` and `Launcher.status` take."""
        return f"{self.namespace}/{self.job_id}"


@dataclass(frozen=True)
class ShardProgress:
    """What a job reports for one shard: the last delivered token, counts, lag."""

    token: EventToken | None = None
    events: dict[str, int] = field(default_factory=dict)  # op -> count
    lag_seconds: float | None = None


@typed_dataclass(frozen=True, config=_TYPED)
class ReportedHop:
    """A hop a running job made inside its query, as its progress report tells it.

    `from_shards`/`to_shards` are the shards of the job's key range before and after, in key
    order; times are unix seconds. `completed_at` is None while the hop is in flight.
    """

    from_map: ShardMapValue
    to_map: ShardMapValue
    from_shards: tuple[KeyRangeValue, ...]
    to_shards: tuple[KeyRangeValue, ...]
    detected_at: float | None = None
    serving_changed_at: float | None = None  # the Keyspace's newest shardMapHistory entry
    completed_at: float | None = None
    duration_seconds: float | None = None
    duplicates_dropped: int = 0

    @property
    def completed(self) -> bool:
        return self.completed_at is not None


@typed_dataclass(frozen=True, config=_TYPED)
class JobProgress:
    """A job's progress report (the status file, or the progress ConfigMap in a cluster)."""

    launch_id: int | None
    shards: dict[KeyRangeValue, ShardProgress] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)  # cause -> count
    updated_at: float | None = None
    error: str | None = None  # the job's fatal error, one line
    retryable: bool | None = None  # with error: whether a relaunch may get past it
    phase: str | None = None  # the job's own phase: starting, running, hopping, ...
    batches: int = 0  # micro-batches the job finished (this process)
    idle_triggers: int = 0  # its query's triggers that found nothing new to read
    duplicates_delivered: dict[str, int] = field(default_factory=dict)  # sink -> count
    # a job that hops inside its query: the serving map it reads now, and its hops, oldest first
    shard_map: ShardMapValue | None = None
    hops: tuple[ReportedHop, ...] = ()
    snapshot: SnapshotReport | None = None  # a job that snapshots: chunks, rows, rate, ETA
    dedup: DedupFilter | None = None  # the dedup rule the job applies now


@dataclass(frozen=True)
class JobStatus:
    """`Launcher.status(job_id)`: the job's phase (ABSENT once gone) and its last progress."""

    job_id: str
    phase: JobPhase
    message: str = ""
    progress: JobProgress | None = None
    reason: str = ""  # as JobInfo.reason


@dataclass(frozen=True)
class Note:
    """A Kubernetes Event to post on the UpdateStream."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@typed_dataclass(frozen=True, config=_TYPED)
class JobSpec:
    """Everything a launcher needs to start one streaming job for one key range."""

    job_id: str
    stream: StreamRef
    key_range: KeyRangeValue
    shard_map: ShardMapValue
    spec_hash: str
    launch_id: int
    spec: UpdateStreamSpec  # with `start` rewritten to where this launch starts
    keyspace: Keyspace
    secret_names: tuple[str, ...]
    # after a hop: the dedup rule the job starts with and when the hop began (unix seconds)
    dedup: DedupFilter | None = None
    hop_started_at: float | None = None
    # watch the Keyspace and hop inside the running query when its serving shards change
    in_job_hops: bool = False

    @property
    def spark(self) -> SparkSpec:
        return self.spec.spark

    @property
    def key(self) -> str:
        return f"{self.stream.namespace}/{self.job_id}"


# -- status -------------------------------------------------------------------------------------


class _Status(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Condition(_Status):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str = Field("", alias="lastTransitionTime")
    observed_generation: int | None = Field(None, alias="observedGeneration")


class ShardPosition(_Status):
    """Where the stream is on one shard it reads: the last delivered token, or where it starts.

    `token` (the last delivered Event Token, JSON) wins; without one, the shard starts at
    `gtid` or at `startTimestamp` (seconds). Positions are what suspend, restart and hops keep.
    """

    name: KeyRangeValue  # the shard
    token: dict[str, Any] | None = None
    start_timestamp: int | None = Field(None, alias="startTimestamp")
    gtid: str | None = None
    lag_seconds: float | None = Field(None, alias="lagSeconds")
    events: dict[str, int] = Field(default_factory=dict)


class HopRecord(_Status):
    """One hop of one key range from the shards of one serving map to those of the next.

    `method` says how: `InJob` (the running job hopped inside its query; phase `InJob` while
    it does, times and duplicates are the job's own) or `Relaunch` (the job was stopped and
    relaunched from planned positions: phases `Stopping`, `Launching`).
    """

    key_range: KeyRangeValue = Field(alias="keyRange")
    from_map: ShardMapValue = Field(alias="fromShardMap")
    to_map: ShardMapValue = Field(alias="toShardMap")
    from_shards: list[KeyRangeValue] = Field(default_factory=list, alias="fromShards")
    to_shards: list[KeyRangeValue] = Field(default_factory=list, alias="toShards")
    method: Literal["Relaunch", "InJob"] = "Relaunch"
    phase: Literal["InJob", "Stopping", "Launching", "Completed"] = "Stopping"
    started_at: str = Field(alias="startedAt")
    completed_at: str | None = Field(None, alias="completedAt")
    duration_seconds: float | None = Field(None, alias="durationSeconds")
    launch_id: int | None = Field(None, alias="launchId")
    # destination shard -> start timestamp; source shard -> watermark (GTID position)
    destinations: dict[str, int] = Field(default_factory=dict)
    watermarks: dict[str, str] = Field(default_factory=dict)
    # the plan's inputs, so that the relaunched job can rebuild the same plan
    last_delivered: dict[str, dict[str, Any]] = Field(default_factory=dict, alias="lastDelivered")
    duplicates_dropped: int = Field(0, alias="duplicatesDropped")
    # an in-job hop: when the job noticed it (unix seconds, as the job reports it: this
    # identifies the job's hop) and when the serving shards changed (the Keyspace's history)
    detected_at: float | None = Field(None, alias="detectedAt")
    serving_changed_at: str | None = Field(None, alias="servingChangedAt")


def _as_key_range(name: KeyRange | str) -> KeyRange:
    return KeyRange.parse(name) if isinstance(name, str) else name


class KeyRangeStatus(_Status):
    key_range: KeyRangeValue = Field(alias="keyRange")
    job: str | None = None
    launcher: str | None = None
    phase: str = "Pending"
    shard_map: ShardMapValue | None = Field(None, alias="shardMap")
    spec_hash: str | None = Field(None, alias="specHash")
    launch_id: int = Field(0, alias="launchId")
    launched_at: str | None = Field(None, alias="launchedAt")
    start_mode: str | None = Field(None, alias="startMode")
    shards: list[ShardPosition] = Field(default_factory=list)
    duplicates: dict[str, int] = Field(default_factory=dict)
    duplicates_dropped: int = Field(0, alias="duplicatesDropped")
    restarts: int = 0
    message: str | None = None  # what is wrong with the key range's job, for Degraded
    failed_at: str | None = Field(None, alias="failedAt")  # when its job was seen ended
    # the job's last report: when (RFC 3339; the first launch's time until a job reports, so
    # the lag of a key range whose jobs never report grows from there), its batches, the
    # duplicates its sinks recognised
    reported_at: str | None = Field(None, alias="reportedAt")
    batches: int = 0
    duplicates_delivered: dict[str, int] = Field(default_factory=dict, alias="duplicatesDelivered")
    hop: HopRecord | None = None  # the hop in progress, if any
    # the dedup rule the launch applies: what it started with, then what its job reports
    dedup: DedupValue | None = None

    def shard(self, name: KeyRange | str) -> ShardPosition | None:
        wanted = _as_key_range(name)
        return next((position for position in self.shards if position.name == wanted), None)


class StreamStatus(_Status):
    observed_generation: int | None = Field(None, alias="observedGeneration")
    shards: str | None = None  # the shards streamed, for the printer column
    max_lag_seconds: float | None = Field(None, alias="maxLagSeconds")
    key_ranges: list[KeyRangeStatus] = Field(default_factory=list, alias="keyRanges")
    hops: list[HopRecord] = Field(default_factory=list)
    hop_count: int = Field(0, alias="hopCount")
    hop_seconds_total: float = Field(0.0, alias="hopSecondsTotal")
    conditions: list[Condition] = Field(default_factory=list)

    def key_range(self, name: KeyRange | str) -> KeyRangeStatus | None:
        wanted = _as_key_range(name)
        return next((entry for entry in self.key_ranges if entry.key_range == wanted), None)

    def condition(self, type_: str) -> Condition | None:
        return next((condition for condition in self.conditions if condition.type == type_), None)

    @classmethod
    def parse(cls, data: Any) -> StreamStatus:
        """The status of an object as read from the API (unknown keys, e.g. kopf's, ignored)."""
        return cls.model_validate(data or {})
