"""The one protocol every way of running a streaming job implements.

Job keys are `namespace/job_id`. `launch` never starts a second job under a key that exists
(the spark-submit launcher relies on the API server refusing a second driver Pod of the same
name; the local launcher on a lock and a pid file). `stop` returns True once the job is gone,
False if it is still terminating (the caller looks again later). `status` also answers for a stopped
job: its last progress report outlives it, since that is where a hop reads its positions.
`publish_keyspace` shows a running job that hops in place the current Keyspace, where that
launcher's jobs watch it (the local launcher's keyspace file; in a cluster the driver reads
the Keyspace object itself, so there is nothing to do).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from updatestream.core.errors import UpdateStreamError
from updatestream.spec import Keyspace
from updatestream_operator.reconciler.models import JobInfo, JobSpec, JobStatus


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

    def publish_snapshot_requests(self, job: JobInfo, text: str) -> None:
        """Show a running job the stream's snapshot requests (JSON lines) when they changed."""
        ...

    def cleanup(self, namespace: str, stream_uid: str) -> None:
        """Remove what outlives a stream's jobs (progress reports) once the stream is deleted."""
        ...


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    if not namespace or not name:
        raise LaunchError(f"job key {key!r} must be namespace/name")
    return namespace, name
