"""Launching jobs as `SparkApplication`s of the Kubeflow spark-operator (v1beta2).

The SparkApplication is named after the job (a second one of that name is refused), labelled
and annotated like a driver Pod, and owned by the UpdateStream; the spark-operator makes the
driver Pod from it. With a driver Pod template configured, its nodeSelector, tolerations and
affinity are set on the driver and the executors. Used when the operator's `--launcher` or a
stream's `spec.spark.launcher` chooses it and the CRD is served.
"""

from __future__ import annotations

from typing import Any

from updatestream_operator.launchers.cluster_launcher import ClusterLauncher
from updatestream_operator.launchers.driver_state import DriverState
from updatestream_operator.launchers.launcher import LaunchError
from updatestream_operator.launchers.podtemplate import load_base_template, scheduling
from updatestream_operator.launchers.settings import ClusterSettings
from updatestream_operator.reconciler import naming
from updatestream_operator.reconciler.models import JobPhase, JobSpec
from updatestream_operator.storage import KubeStore, owner_reference

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


def application_state(app: dict[str, Any]) -> DriverState:
    if app.get("metadata", {}).get("deletionTimestamp"):
        return DriverState(JobPhase.TERMINATING, "", "being deleted")
    state = (app.get("status") or {}).get("applicationState") or {}
    phase = _STATES.get(str(state.get("state", "")).upper(), JobPhase.UNKNOWN)
    return DriverState(phase, "", str(state.get("errorMessage") or ""))


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


class SparkOperatorLauncher(ClusterLauncher):
    """One SparkApplication per job."""

    name = "spark-operator"
    role = "application"

    def __init__(
        self,
        store: KubeStore,
        settings: ClusterSettings | None = None,
        *,
        stop_timeout: float = 90.0,
    ) -> None:
        super().__init__(store, settings, stop_timeout=stop_timeout)

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
                "arguments": self.driver_arguments(job),
                "sparkVersion": settings.spark_version,
                "restartPolicy": {"type": "Never"},
                "sparkConf": dict(job.spark.conf),
                "volumes": self.job_volumes(job),
                "driver": {
                    "serviceAccount": settings.service_account_for(job),
                    "labels": driver_labels,
                    "annotations": naming.job_annotations(job),
                    "secrets": secrets,
                    "volumeMounts": self.driver_volume_mounts(),
                    "sidecars": [self.publisher_container(job)],
                    "podSecurityContext": self.pod_security_context(),
                    "securityContext": self.container_security_context(),
                    "ports": [self.metrics_port()],
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
        self.write_config_maps(job)
        self.store.create_spark_application(namespace, self.application(job))

    # -- the SparkApplication -----------------------------------------------------------------

    def _find(self, namespace: str, name: str) -> dict[str, Any] | None:
        if not self.store.spark_operator_installed():
            return None
        return self.store.get_spark_application(namespace, name)

    def _objects(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        if not self.store.spark_operator_installed():
            return []
        return self.store.list_spark_applications(namespace, selector)

    def _remove(self, namespace: str, name: str) -> None:
        self.store.delete_spark_application(namespace, name)

    def _state(self, found: dict[str, Any]) -> DriverState:
        return application_state(found)
