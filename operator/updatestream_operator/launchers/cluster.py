"""What the two cluster launchers (spark-submit, spark-operator) share.

Per job, two ConfigMaps owned by the UpdateStream: `<job>-config` (the job's configuration,
mounted into the driver) and `<job>-progress`, which the driver's `progress-publisher` sidecar
fills from the job's status file and the operator reads. The progress ConfigMap outlives the
driver Pod, so a hop finds the final positions after stopping it; it is reset on each launch
and carries the launch id, so a report is never taken for another launch's.
"""

from __future__ import annotations

from typing import Any

from updatestream.spec import Keyspace
from updatestream_operator import naming
from updatestream_operator.config import ClusterSettings
from updatestream_operator.jobconfig import config_files, kubernetes_watch, run_arguments
from updatestream_operator.models import JobInfo, JobProgress, JobSpec
from updatestream_operator.progress import loads_progress
from updatestream_operator.storage import KubeStore

PROGRESS_KEY = "status.json"
DRIVER_CONTAINER = "spark-kubernetes-driver"
PUBLISHER_CONTAINER = "progress-publisher"
CONFIG_VOLUME = "job-config"
STATUS_VOLUME = "job-status"
SCRATCH_VOLUME = "tmp"
STATE_VOLUME = "job-state"
SCRATCH_MOUNT = "/tmp"


def write_config_maps(store: KubeStore, job: JobSpec) -> None:
    """The job's configuration, and an empty progress report for this launch."""
    namespace = job.stream.namespace
    annotations = naming.job_annotations(job)
    store.put_config_map(
        namespace,
        naming.config_map_name(job.job_id),
        config_files(job),
        labels=naming.job_labels(job.stream, job.key_range, role="config"),
        annotations=annotations,
        owner=job.stream,
    )
    store.put_config_map(
        namespace,
        naming.progress_map_name(job.job_id),
        {},
        labels=naming.job_labels(job.stream, job.key_range, role="progress"),
        annotations=annotations,
        owner=job.stream,
    )


def driver_arguments(job: JobSpec, settings: ClusterSettings) -> list[str]:
    """The Spark main file's arguments: it is `updatestream run` itself, so they are that
    command's options without the subcommand's name."""
    checkpoint = (
        f"{settings.checkpoint_root}/{job.stream.namespace}/{job.job_id}/launch-{job.launch_id}"
    )
    command, *options = run_arguments(
        job,
        config_dir=naming.CONFIG_MOUNT,
        secrets_dir=naming.SECRETS_MOUNT,
        checkpoint=checkpoint,
        metrics_port=settings.driver_metrics_port,
        status_file=naming.STATUS_FILE,
        # the driver reads the Keyspace object (its Role may get keyspaces, nothing more)
        keyspace_watch=kubernetes_watch(job),
    )
    assert command == "run"
    return options


def publish_keyspace(job: JobInfo, keyspace: Keyspace) -> None:
    """Nothing to do: a driver watching its Keyspace reads the object from the API."""
    return None


def publisher_container(job: JobSpec, settings: ClusterSettings) -> dict[str, Any]:
    """The sidecar copying the job's status file into the progress ConfigMap."""
    return {
        "name": PUBLISHER_CONTAINER,
        "image": settings.image_for(job),
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
            str(settings.publish_interval_seconds),
        ],
        "volumeMounts": [
            {"name": STATUS_VOLUME, "mountPath": naming.STATUS_MOUNT},
            {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT},
        ],
        "securityContext": container_security_context(),
        "resources": {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"memory": "128Mi"},
        },
    }


def job_volumes(job: JobSpec, checkpoint_claim: str | None = None) -> list[dict[str, Any]]:
    """The driver Pod's volumes: the job's configuration, and emptyDirs for everything it
    writes (the root filesystem is read-only); the checkpoints on `checkpoint_claim` (a
    PersistentVolumeClaim, which outlives the Pod) when one is configured."""
    state: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": checkpoint_claim}}
        if checkpoint_claim
        else {"emptyDir": {}}
    )
    return [
        {"name": CONFIG_VOLUME, "configMap": {"name": naming.config_map_name(job.job_id)}},
        {"name": STATUS_VOLUME, "emptyDir": {}},
        {"name": SCRATCH_VOLUME, "emptyDir": {}},
        {"name": STATE_VOLUME, **state},
    ]


def driver_volume_mounts(settings: ClusterSettings) -> list[dict[str, Any]]:
    return [
        {"name": CONFIG_VOLUME, "mountPath": naming.CONFIG_MOUNT, "readOnly": True},
        {"name": STATUS_VOLUME, "mountPath": naming.STATUS_MOUNT},
        {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT},
        # each launch checkpoints afresh (positions in status are the truth): scratch suffices
        {"name": STATE_VOLUME, "mountPath": settings.checkpoint_root},
    ]


def pod_security_context(settings: ClusterSettings) -> dict[str, Any]:
    """The Pod-level half of Pod Security `restricted`: a fixed non-root user."""
    uid = settings.run_as_user
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """The container-level half: no privilege escalation, no capabilities, read-only root."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


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


def remove_stream_objects(store: KubeStore, namespace: str, stream_uid: str) -> None:
    """Delete the ConfigMaps of every job of a stream (configuration and progress)."""
    for item in store.list_config_maps(namespace, naming.stream_selector(stream_uid)):
        store.delete_config_map(namespace, item["metadata"]["name"])
