"""Launching jobs as `SparkApplication`s of the Kubeflow spark-operator (v1beta2).

The SparkApplication is named after the job (a second one of that name is refused), labelled
and annotated like a driver Pod, and owned by the UpdateStream; the spark-operator makes the
driver Pod from it. With a driver Pod template configured, its nodeSelector, tolerations and
affinity are set on the driver and the executors. Used when the operator's `--launcher` or a
stream's `spec.spark.launcher` chooses it and the CRD is served.
"""

from __future__ import annotations

import time
from typing import Any

from updatestream.spec import Keyspace
from updatestream_operator import naming
from updatestream_operator.config import ClusterSettings
from updatestream_operator.launchers.base import LaunchError, job_info, parse_time, split_key
from updatestream_operator.launchers.cluster import (
    container_security_context,
    driver_arguments,
    driver_volume_mounts,
    job_volumes,
    pod_security_context,
    publish_keyspace,
    publisher_container,
    read_progress,
    remove_stream_objects,
    write_config_maps,
)
from updatestream_operator.launchers.podtemplate import load_base_template, scheduling
from updatestream_operator.models import JobInfo, JobPhase, JobSpec, JobStatus
from updatestream_operator.storage import KubeStore, owner_reference

_SELECTOR = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY},{naming.LABEL_ROLE}=application"

_STATES = {
    "": JobPhase.PENDING,
    "SUBMITTED": JobPhase.PENDING,
    "PENDING_RERUN": JobPhase.PENDING,
    "RUNNING": JobPhase.RUNNING,
    "SUCCEEDING": JobPhase.RUNNING,
    "FAILING": JobPhase.RUNNING,
    "COMPLETED": JobPhase.SUCCEEDED,
    "FAILED": JobPhase.FAILED,
    "SUBMISSION_FAILED": JobPhase.FAILED,
    "INVALIDATING": JobPhase.TERMINATING,
    "UNKNOWN": JobPhase.UNKNOWN,
}


def application_phase(app: dict[str, Any]) -> tuple[JobPhase, str]:
    if app.get("metadata", {}).get("deletionTimestamp"):
        return JobPhase.TERMINATING, "being deleted"
    state = (app.get("status") or {}).get("applicationState") or {}
    phase = _STATES.get(str(state.get("state", "")).upper(), JobPhase.UNKNOWN)
    return phase, str(state.get("errorMessage") or "")


def _resources(values: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "cores" in values:
        out["cores"] = int(values["cores"])
    if "memory" in values:
        out["memory"] = values["memory"]
    if "coreLimit" in values:
        out["coreLimit"] = values["coreLimit"]
    if "instances" in values:
        out["instances"] = int(values["instances"])
    return out


class SparkOperatorLauncher:
    """One SparkApplication per job."""

    name = "spark-operator"

    def __init__(
        self,
        store: KubeStore,
        settings: ClusterSettings | None = None,
        *,
        stop_timeout: float = 90.0,
    ) -> None:
        self.store = store
        self.settings = settings or ClusterSettings()
        self.stop_timeout = stop_timeout

    def application(self, job: JobSpec) -> dict[str, Any]:
        settings = self.settings
        path = settings.driver_pod_template
        placement = scheduling(load_base_template(path) if path is not None else None)
        secrets = [
            {"name": s, "path": f"{naming.SECRETS_MOUNT}/{s}", "secretType": "Generic"}
            for s in job.secret_names
        ]
        driver_labels = naming.job_labels(job.stream, job.key_range, role="driver")
        executor_labels = naming.job_labels(job.stream, job.key_range, role="executor")
        return {
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "SparkApplication",
            "metadata": {
                "name": job.job_id,
                "namespace": job.stream.namespace,
                "labels": naming.job_labels(job.stream, job.key_range, role="application"),
                "annotations": naming.job_annotations(job),
                "ownerReferences": [owner_reference(job.stream)],
            },
            "spec": {
                "type": "Python",
                "pythonVersion": "3",
                "mode": "cluster",
                "image": settings.image_for(job),
                "mainApplicationFile": settings.app_resource,
                "arguments": driver_arguments(job, settings),
                "sparkVersion": settings.spark_version,
                "restartPolicy": {"type": "Never"},
                "sparkConf": dict(job.spark.conf),
                "volumes": job_volumes(job),
                "driver": {
                    "serviceAccount": settings.service_account_for(job),
                    "labels": driver_labels,
                    "annotations": naming.job_annotations(job),
                    "secrets": secrets,
                    "volumeMounts": driver_volume_mounts(settings),
                    "sidecars": [publisher_container(job, settings)],
                    "podSecurityContext": pod_security_context(settings),
                    "securityContext": container_security_context(),
                    **placement,
                    **({"cores": 1, "memory": "1g"} | _resources(job.spark.driver)),
                },
                "executor": {
                    "labels": executor_labels,
                    "secrets": secrets,
                    **placement,
                    **(
                        {"instances": 1, "cores": 1, "memory": "1g"}
                        | _resources(job.spark.executor)
                    ),
                },
            },
        }

    def launch(self, job: JobSpec) -> None:
        namespace = job.stream.namespace
        if self.store.get_spark_application(namespace, job.job_id) is not None:
            return
        if not self.store.spark_operator_installed():
            raise LaunchError(
                "the spark-operator launcher is chosen but the SparkApplication CRD "
                "(sparkoperator.k8s.io/v1beta2) is not served; install the Kubeflow "
                "spark-operator or run the operator with --launcher spark-submit"
            )
        write_config_maps(self.store, job, self.settings)
        self.store.create_spark_application(namespace, self.application(job))

    def stop(self, key: str) -> bool:
        namespace, name = split_key(key)
        self.store.delete_spark_application(namespace, name)
        self.store.delete_config_map(namespace, naming.config_map_name(name))
        deadline = time.monotonic() + self.stop_timeout
        while self.store.get_spark_application(namespace, name) is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def list(self, namespace: str | None = None, stream_uid: str | None = None) -> list[JobInfo]:
        selector = _SELECTOR
        if stream_uid:
            selector += f",{naming.stream_selector(stream_uid)}"
        if not self.store.spark_operator_installed():
            return []
        jobs = []
        for app in self.store.list_spark_applications(namespace, selector):
            metadata = app["metadata"]
            phase, message = application_phase(app)
            info = job_info(
                name=metadata["name"],
                namespace=metadata["namespace"],
                labels=metadata.get("labels") or {},
                annotations=metadata.get("annotations") or {},
                phase=phase,
                message=message,
                created_at=parse_time(metadata.get("creationTimestamp")),
            )
            if info is not None:
                jobs.append(info)
        return jobs

    def status(self, key: str) -> JobStatus:
        namespace, name = split_key(key)
        app = (
            self.store.get_spark_application(namespace, name)
            if self.store.spark_operator_installed()
            else None
        )
        phase, message = application_phase(app) if app is not None else (JobPhase.ABSENT, "")
        return JobStatus(name, phase, message, read_progress(self.store, namespace, name))

    def publish_keyspace(self, job: JobInfo, keyspace: Keyspace) -> None:
        publish_keyspace(job, keyspace)

    def cleanup(self, namespace: str, stream_uid: str) -> None:
        remove_stream_objects(self.store, namespace, stream_uid)
