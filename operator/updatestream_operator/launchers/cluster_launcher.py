"""What a launcher whose jobs run in the cluster does besides making the job's object.

`ClusterLauncher` is the base of the spark-submit launcher: each job is one object in the
cluster (the driver Pod) named after it and labelled with its stream; listing, status, stopping
and cleaning up go through that object, and the subclass says only which object it is and how
to make it. Its settings are `settings.ClusterSettings`.

Per job, two ConfigMaps owned by the UpdateStream: `<job>-config` (the job's configuration,
mounted into the driver) and `<job>-progress`, which the driver's `progress-publisher` sidecar
fills from the job's status file and the operator reads. The progress ConfigMap outlives the
driver Pod, so a hop finds the final positions after stopping it; it is reset on each launch
and carries the launch id, so a report is never taken for another launch's.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from updatestream.contract.job_config import SNAPSHOT_REQUESTS_FILE, JobConfig
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.spec import Keyspace
from updatestream_operator.launchers.driver_state import DriverState
from updatestream_operator.launchers.launcher import split_key
from updatestream_operator.launchers.settings import ClusterSettings
from updatestream_operator.reconciler import naming
from updatestream_operator.reconciler.launch_config import (
    config_files,
    job_config,
    kubernetes_watch,
    run_options,
)
from updatestream_operator.reconciler.models import (
    JobInfo,
    JobPhase,
    JobProgress,
    JobSpec,
    JobStatus,
)
from updatestream_operator.reconciler.progress_reader import loads_progress
from updatestream_operator.storage import KubeStore

PROGRESS_KEY = "status.json"
DRIVER_CONTAINER = "spark-kubernetes-driver"
PUBLISHER_CONTAINER = "progress-publisher"
CONFIG_VOLUME = "job-config"
STATUS_VOLUME = "job-status"
SCRATCH_VOLUME = "tmp"
STATE_VOLUME = "job-state"
SCRATCH_MOUNT = "/tmp"
METRICS_PORT_NAME = "metrics"


def read_progress(store: KubeStore, namespace: str, job_id: str) -> JobProgress | None:
    name = naming.progress_map_name(job_id)
    found = store.get_config_map(namespace, name)
    if found is None:
        return None
    annotations = found.get("metadata", {}).get("annotations") or {}
    try:
        launch_id = int(annotations.get(naming.ANNOTATION_LAUNCH_ID, ""))
    except ValueError:
        launch_id = None
    text = (found.get("data") or {}).get(PROGRESS_KEY)
    if not text:
        return JobProgress(launch_id=launch_id)
    return loads_progress(text, launch_id=launch_id, source=f"ConfigMap {namespace}/{name}")


def job_info(
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    state: DriverState,
    created_at: dt.datetime | None = None,
) -> JobInfo | None:
    """A JobInfo from the labels and annotations the operator put on a job (None if missing)."""
    try:
        return JobInfo(
            job_id=name,
            namespace=namespace,
            stream_uid=labels[naming.LABEL_STREAM_UID],
            key_range=KeyRange.parse(annotations[naming.ANNOTATION_KEY_RANGE]),
            shard_map=ShardMap.parse(annotations[naming.ANNOTATION_SHARD_MAP]),
            spec_hash=annotations.get(naming.ANNOTATION_SPEC_HASH, ""),
            launch_id=int(annotations.get(naming.ANNOTATION_LAUNCH_ID, "0")),
            in_job_hops=annotations.get(naming.ANNOTATION_IN_JOB_HOPS) == "true",
            phase=state.phase,
            message=state.message,
            reason=state.reason,
            created_at=created_at,
        )
    except (KeyError, ValueError, UpdateStreamError):
        return None  # not one of ours, or damaged: never taken for a stream's job


def parse_time(value: object) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, str) and value:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None


class ClusterLauncher(ABC):
    """One object in the cluster per job; a subclass says which (`role`, `_find`, `_objects`,
    `_remove`, `_state`) and how to launch it."""

    name: str
    role: str  # the `updatestream.io/role` label of the job's object

    def __init__(
        self, store: KubeStore, settings: ClusterSettings | None = None, *, stop_timeout: float
    ) -> None:
        self.store = store
        self.settings = settings or ClusterSettings()
        self.stop_timeout = stop_timeout

    # -- what differs -------------------------------------------------------------------------

    @abstractmethod
    def launch(self, job: JobSpec) -> None:
        """Create the job's object (never a second one under the job's name)."""

    @abstractmethod
    def _find(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The job's object; None when it does not exist."""

    @abstractmethod
    def _objects(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        """The jobs' objects that `selector` matches, in one namespace or all."""

    @abstractmethod
    def _remove(self, namespace: str, name: str) -> None:
        """Delete the job's object (and what it made), if it exists."""

    @abstractmethod
    def _state(self, found: dict[str, Any]) -> DriverState:
        """The job's phase, and why when there is something to say."""

    # -- what the job's object is made of ----------------------------------------------------

    def write_config_maps(self, job: JobSpec) -> None:
        """The job's configuration, and an empty progress report for this launch."""
        namespace = job.stream.namespace
        annotations = naming.job_annotations(job)
        self.store.put_config_map(
            namespace,
            naming.config_map_name(job.job_id),
            config_files(self.driver_config(job)),
            labels=naming.job_labels(job.stream, job.key_range, role="config"),
            annotations=annotations,
            owner=job.stream,
        )
        self.store.put_config_map(
            namespace,
            naming.progress_map_name(job.job_id),
            {},
            labels=naming.job_labels(job.stream, job.key_range, role="progress"),
            annotations=annotations,
            owner=job.stream,
        )

    def driver_config(self, job: JobSpec) -> JobConfig:
        """The job's configuration inside the driver Pod: its mounts, and the Keyspace object
        to watch (the driver's Role may get keyspaces, nothing more)."""
        root, namespace = self.settings.checkpoint_root, job.stream.namespace
        return job_config(
            job,
            secrets_dir=naming.SECRETS_MOUNT,
            checkpoint=f"{root}/{namespace}/{job.job_id}/{self._checkpoint_name(job)}",
            metrics_port=self.settings.driver_metrics_port,
            status_file=naming.STATUS_FILE,
            keyspace_watch=kubernetes_watch(job),
            snapshot_requests=f"{naming.CONFIG_MOUNT}/{SNAPSHOT_REQUESTS_FILE}",
        ).model_copy(update={"metrics_host": "0.0.0.0"})  # Prometheus scrapes the Pod

    @staticmethod
    def _checkpoint_name(job: JobSpec) -> str:
        """A job that hops in place keeps one checkpoint for its key range: on the checkpoint
        claim, a driver Pod that was deleted or evicted is relaunched from it and resumes
        exactly where it stopped (its sinks see the next batch, not batch 0 again). A job that
        does not hop in place is relaunched after a hop from planned positions, so each of its
        launches starts afresh."""
        return "checkpoint" if job.in_job_hops else f"launch-{job.launch_id}"

    def driver_arguments(self, job: JobSpec) -> list[str]:
        """The Spark main file's arguments: it is `updatestream run` itself, so they are that
        command's options (`--config` on the ConfigMap mounted into the driver)."""
        return run_options(naming.CONFIG_MOUNT)

    def metrics_port(self) -> dict[str, Any]:
        """The driver's metrics endpoint as a named container port, which the chart's
        PodMonitor selects."""
        return {
            "name": METRICS_PORT_NAME,
            "containerPort": self.settings.driver_metrics_port,
            "protocol": "TCP",
        }

    def publisher_container(self, job: JobSpec) -> dict[str, Any]:
        """The sidecar copying the job's status file into the progress ConfigMap."""
        return {
            "name": PUBLISHER_CONTAINER,
            "image": self.settings.image_for(job),
            "command": [
                "updatestream",
                "publish-progress",
                "--status-file",
                naming.STATUS_FILE,
                "--namespace",
                job.stream.namespace,
                "--config-map",
                naming.progress_map_name(job.job_id),
                "--launch-id",
                str(job.launch_id),
                "--interval",
                str(self.settings.publish_interval_seconds),
            ],
            "volumeMounts": [
                {"name": STATUS_VOLUME, "mountPath": naming.STATUS_MOUNT},
                {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT},
            ],
            "securityContext": self.container_security_context(),
            "resources": {
                "requests": {"cpu": "10m", "memory": "64Mi"},
                "limits": {"memory": "128Mi"},
            },
        }

    def job_volumes(self, job: JobSpec) -> list[dict[str, Any]]:
        """The driver Pod's volumes: the job's configuration, and emptyDirs for everything it
        writes (the root filesystem is read-only); the checkpoints on the configured
        PersistentVolumeClaim, which outlives the Pod, when there is one."""
        claim = self.settings.checkpoint_claim
        state: dict[str, Any] = (
            {"persistentVolumeClaim": {"claimName": claim}} if claim else {"emptyDir": {}}
        )
        return [
            {"name": CONFIG_VOLUME, "configMap": {"name": naming.config_map_name(job.job_id)}},
            {"name": STATUS_VOLUME, "emptyDir": {}},
            {"name": SCRATCH_VOLUME, "emptyDir": {}},
            {"name": STATE_VOLUME, **state},
        ]

    def driver_volume_mounts(self) -> list[dict[str, Any]]:
        return [
            {"name": CONFIG_VOLUME, "mountPath": naming.CONFIG_MOUNT, "readOnly": True},
            {"name": STATUS_VOLUME, "mountPath": naming.STATUS_MOUNT},
            {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT},
            # on the checkpoint claim when there is one, so a relaunched driver resumes
            {"name": STATE_VOLUME, "mountPath": self.settings.checkpoint_root},
        ]

    def pod_security_context(self) -> dict[str, Any]:
        """The Pod-level half of Pod Security `restricted`: a fixed non-root user."""
        uid = self.settings.run_as_user
        return {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        }

    @staticmethod
    def container_security_context() -> dict[str, Any]:
        """The container-level half: no privilege escalation, no capabilities, read-only root."""
        return {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }

    # -- what the launchers do alike ---------------------------------------------------------

    def stop(self, key: str) -> bool:
        namespace, name = split_key(key)
        self._remove(namespace, name)
        self.store.delete_config_map(namespace, naming.config_map_name(name))
        deadline = time.monotonic() + self.stop_timeout
        while self._find(namespace, name) is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def list(self, namespace: str | None = None, stream_uid: str | None = None) -> list[JobInfo]:
        selector = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY},{naming.LABEL_ROLE}={self.role}"
        if stream_uid:
            selector += f",{naming.stream_selector(stream_uid)}"
        jobs = []
        for found in self._objects(namespace, selector):
            metadata = found["metadata"]
            info = job_info(
                name=metadata["name"],
                namespace=metadata["namespace"],
                labels=metadata.get("labels") or {},
                annotations=metadata.get("annotations") or {},
                state=self._state(found),
                created_at=parse_time(metadata.get("creationTimestamp")),
            )
            if info is not None:
                jobs.append(info)
        return jobs

    def status(self, key: str) -> JobStatus:
        namespace, name = split_key(key)
        found = self._find(namespace, name)
        state = self._state(found) if found is not None else DriverState(JobPhase.ABSENT)
        progress = read_progress(self.store, namespace, name)
        return JobStatus(name, state.phase, state.message, progress, state.reason)

    def publish_keyspace(self, job: JobInfo, keyspace: Keyspace) -> None:
        """Nothing to do: a driver watching its Keyspace reads the object from the API."""
        return None

    def publish_snapshot_requests(self, job: JobInfo, text: str) -> None:
        """Update the requests file in the job's configuration ConfigMap when it differs; the
        kubelet refreshes the mounted file and the driver reads it at a later batch."""
        name = naming.config_map_name(job.job_id)
        found = self.store.get_config_map(job.namespace, name)
        if found is None or (found.get("data") or {}).get(SNAPSHOT_REQUESTS_FILE) == text:
            return
        self.store.patch_config_map_data(job.namespace, name, {SNAPSHOT_REQUESTS_FILE: text})
        logging.getLogger(__name__).info("showed job %s the stream's snapshot requests", job.key)

    def cleanup(self, namespace: str, stream_uid: str) -> None:
        """Delete the ConfigMaps of every job of a stream (configuration and progress)."""
        for item in self.store.list_config_maps(namespace, naming.stream_selector(stream_uid)):
            self.store.delete_config_map(namespace, item["metadata"]["name"])
