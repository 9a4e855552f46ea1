"""The one protocol every way of running a streaming job implements.

Job keys are `namespace/job_id`. `launch` never starts a second job under a key that exists
(the cluster launchers rely on the API server refusing a second object of the same name; the
local launcher on a lock and a pid file). `stop` returns True once the job is gone, False if
it is still terminating (the caller looks again later). `status` also answers for a stopped
job: its last progress report outlives it, since that is where a hop reads its positions.
`publish_keyspace` shows a running job that hops in place the current Keyspace, where that
launcher's jobs watch it (the local launcher's keyspace file; in a cluster the driver reads
the Keyspace object itself, so there is nothing to do).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from updatestream.core.errors import UpdateStreamError
from updatestream.spec import Keyspace
from updatestream_operator import naming
from updatestream_operator.models import JobInfo, JobPhase, JobSpec, JobStatus


class LaunchError(UpdateStreamError):
    """A job could not be started or stopped; the message says which and why."""


@runtime_checkable
class Launcher(Protocol):
    name: str

    def launch(self, job: JobSpec) -> None: ...

    def stop(self, key: str) -> bool: ...

    def list(
        self, namespace: str | None = None, stream_uid: str | None = None
    ) -> list[JobInfo]: ...

    def status(self, key: str) -> JobStatus: ...

    def publish_keyspace(self, job: JobInfo, keyspace: Keyspace) -> None: ...

    def cleanup(self, namespace: str, stream_uid: str) -> None:
        """Remove what outlives a stream's jobs (progress reports) once the stream is deleted."""
        ...


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    if not namespace or not name:
        raise LaunchError(f"job key {key!r} must be namespace/name")
    return namespace, name


def job_info(
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    phase: JobPhase,
    message: str = "",
    created_at: dt.datetime | None = None,
) -> JobInfo | None:
    """A JobInfo from the labels and annotations the operator put on a job (None if missing)."""
    try:
        return JobInfo(
            job_id=name,
            namespace=namespace,
            stream_uid=labels[naming.LABEL_STREAM_UID],
            key_range=annotations[naming.ANNOTATION_KEY_RANGE],
            shard_map=annotations[naming.ANNOTATION_SHARD_MAP],
            spec_hash=annotations.get(naming.ANNOTATION_SPEC_HASH, ""),
            launch_id=int(annotations.get(naming.ANNOTATION_LAUNCH_ID, "0")),
            in_job_hops=annotations.get(naming.ANNOTATION_IN_JOB_HOPS) == "true",
            phase=phase,
            message=message,
            created_at=created_at,
        )
    except (KeyError, ValueError):
        return None


def parse_time(value: object) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, str) and value:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None
