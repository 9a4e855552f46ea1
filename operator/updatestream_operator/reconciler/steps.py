"""What one reconcile step looks at and what it gives back (pure data, no Kubernetes client).

`Observed` is the input of `reconcile.reconcile`; a `Decision` is its output: the status to
write first, then the actions to take, the Events to post, and the jobs to show the current
Keyspace to. `Step` is the decision being built.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from updatestream.core.keyrange import KeyRange
from updatestream.spec import Keyspace, UpdateStreamSpec
from updatestream_operator.reconciler import conditions as cond
from updatestream_operator.reconciler.models import (
    JobInfo,
    JobProgress,
    JobSpec,
    KeyRangeStatus,
    Note,
    StreamRef,
    StreamStatus,
)
from updatestream_operator.reconciler.spec_checks import Problem


@dataclass(frozen=True)
class Observed:
    """Everything `reconcile` looks at."""

    stream: StreamRef
    spec: UpdateStreamSpec
    keyspace: Keyspace | None
    status: StreamStatus
    jobs: Sequence[JobInfo]
    progress: Mapping[KeyRange, JobProgress]  # key range -> the latest report of its job
    now: dt.datetime
    keyspace_error: str | None = None  # why the Keyspace object could not be read


@dataclass(frozen=True)
class Settings:
    launcher: str = "spark-submit"
    max_restarts: int = 3  # relaunches of a failed job before the stream is left Degraded
    # seconds before the first relaunch of a failed job, doubled for each further one, at most
    restart_backoff: tuple[float, float] = (10.0, 300.0)
    hops_kept: int = 20  # hop records kept in status.hops (counters keep the totals)
    # Launch jobs watching their Keyspace, and let such a job hop inside its running query
    # when the serving shards change; off: every hop stops the job and relaunches it.
    in_job_hops: bool = True
    # Seconds a job has to report an in-job hop completed before it is stopped and relaunched
    # from planned positions instead.
    in_job_hop_timeout: float = 120.0


@dataclass(frozen=True)
class Launch:
    job: JobSpec


@dataclass(frozen=True)
class Stop:
    job: JobInfo
    reason: str


Action = Launch | Stop


@dataclass(frozen=True)
class Decision:
    status: StreamStatus
    actions: tuple[Action, ...] = ()
    notes: tuple[Note, ...] = ()
    # running jobs that watch their Keyspace through the launcher (a file the local launcher
    # rewrites): show them the observed Keyspace once the status is written
    keyspace_watchers: tuple[JobInfo, ...] = ()


@dataclass
class Step:
    """The decision being built for one stream."""

    obs: Observed
    settings: Settings
    status: StreamStatus
    actions: list[Action] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    degraded: list[Problem] = field(default_factory=list)

    @property
    def now_text(self) -> str:
        return cond.rfc3339(self.obs.now)

    def note(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.notes.append(Note(type_, reason, message))

    def stop(self, job: JobInfo, reason: str) -> None:
        self.actions.append(Stop(job, reason))

    def stopping(self, job: JobInfo) -> bool:
        return any(isinstance(a, Stop) and a.job.job_id == job.job_id for a in self.actions)

    def report(self, entry: KeyRangeStatus) -> JobProgress | None:
        """The latest progress report of the entry's launch (None: none, or another's)."""
        progress = self.obs.progress.get(entry.key_range)
        if progress is None or progress.launch_id != entry.launch_id:
            return None
        return progress
