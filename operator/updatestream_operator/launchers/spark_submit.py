"""Launching jobs with `spark-submit --master k8s://... --deploy-mode cluster`.

spark-submit creates the driver Pod (named after the job, so a second submission of the same
job is refused by the API server) from a Pod template that carries the operator's labels,
annotations and an owner reference to the UpdateStream, mounts the job's ConfigMap and adds
the progress-publisher sidecar, built on the deployment's driver template when one is
configured (`podtemplate`). `waitAppCompletion=false`: spark-submit returns once the Pod
exists. The Keyspace's Secrets are mounted with `spark.kubernetes.driver.secrets.*`: the
operator never reads them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from updatestream_operator.launchers.cluster_launcher import DRIVER_CONTAINER, ClusterLauncher
from updatestream_operator.launchers.driver_state import DriverState, driver_state
from updatestream_operator.launchers.launcher import LaunchError
from updatestream_operator.launchers.podtemplate import load_base_template, merge_driver_template
from updatestream_operator.launchers.settings import ClusterSettings
from updatestream_operator.reconciler import naming
from updatestream_operator.reconciler.launch_config import conf_arguments, spark_resource_conf
from updatestream_operator.reconciler.models import JobSpec
from updatestream_operator.scrub import SCRUBBER
from updatestream_operator.storage import KubeStore, owner_reference

log = logging.getLogger(__name__)


def spark_home() -> str:
    """The Spark distribution bundled with pyspark (spark-submit needs SPARK_HOME)."""
    configured = os.environ.get("SPARK_HOME")
    if configured:
        return configured
    found = importlib.util.find_spec("pyspark")  # found, not imported: no Spark in the operator
    if found is None or not found.submodule_search_locations:
        raise LaunchError("pyspark is not installed: spark-submit comes with it; set SPARK_HOME")
    return str(Path(next(iter(found.submodule_search_locations))))


def default_spark_submit() -> str:
    return str(Path(spark_home()) / "bin" / "spark-submit")


class SparkSubmitLauncher(ClusterLauncher):
    """One driver Pod per job, created by spark-submit in cluster mode."""

    name = "spark-submit"
    role = "driver"

    def __init__(
        self,
        store: KubeStore,
        settings: ClusterSettings | None = None,
        *,
        spark_submit: str | None = None,
        master: str | None = None,
        submit_timeout: float = 300.0,
        stop_timeout: float = 90.0,
    ) -> None:
        super().__init__(store, settings, stop_timeout=stop_timeout)
        self.spark_submit = spark_submit or default_spark_submit()
        self.master = master or f"k8s://{store.server}"
        self.submit_timeout = submit_timeout

    # -- launch -----------------------------------------------------------------------------

    def pod_template(self, job: JobSpec) -> dict[str, Any]:
        """The driver Pod template: the operator's, built on the configured base template."""
        path = self.settings.driver_pod_template
        base = load_base_template(path) if path is not None else None
        return merge_driver_template(base, self._own_template(job), DRIVER_CONTAINER)

    def _own_template(self, job: JobSpec) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "labels": naming.job_labels(job.stream, job.key_range, role="driver"),
                "annotations": naming.job_annotations(job),
                "ownerReferences": [owner_reference(job.stream)],
            },
            "spec": {
                # meets Pod Security `restricted`: Spark keeps these when it builds the Pod
                "securityContext": self.pod_security_context(),
                "containers": [
                    {
                        "name": DRIVER_CONTAINER,
                        "securityContext": self.container_security_context(),
                        "volumeMounts": self.driver_volume_mounts(),
                        "ports": [self.metrics_port()],
                    },
                    self.publisher_container(job),
                ],
                "volumes": self.job_volumes(job),
            },
        }

    def spark_conf(self, job: JobSpec, template: Path) -> dict[str, str]:
        conf: dict[str, str] = {"spark.executor.instances": "1"} | self.cluster_conf()
        conf |= spark_resource_conf("driver", job.spark.driver)
        conf |= spark_resource_conf("executor", job.spark.executor)
        conf |= job.spark.conf
        # what makes the job this job: not overridable by spec.spark.conf
        conf |= {
            "spark.app.name": job.job_id,
            "spark.kubernetes.namespace": job.stream.namespace,
            "spark.kubernetes.driver.pod.name": job.job_id,
            "spark.kubernetes.container.image": self.settings.image_for(job),
            "spark.kubernetes.submission.waitAppCompletion": "false",
            "spark.kubernetes.authenticate.driver.serviceAccountName": (
                self.settings.service_account_for(job)
            ),
            "spark.kubernetes.driver.podTemplateFile": str(template),
            "spark.kubernetes.driver.podTemplateContainerName": DRIVER_CONTAINER,
        }
        for key, value in naming.job_labels(job.stream, job.key_range, role="executor").items():
            conf[f"spark.kubernetes.executor.label.{key}"] = value
        for secret in job.secret_names:
            path = f"{naming.SECRETS_MOUNT}/{secret}"
            conf[f"spark.kubernetes.driver.secrets.{secret}"] = path
            conf[f"spark.kubernetes.executor.secrets.{secret}"] = path
        return conf

    def cluster_conf(self) -> dict[str, str]:
        """What Spark needs on a cluster without DNS or kube-proxy in the Pods' way: executors
        dial the driver Pod's IP, the driver calls the API server where Pods reach it."""
        conf = {"spark.kubernetes.executor.useDriverPodIP": "true"}
        if self.settings.driver_master:
            conf["spark.kubernetes.driver.master"] = self.settings.driver_master
        if self.settings.core_request:
            for role in ("driver", "executor"):
                conf[f"spark.kubernetes.{role}.request.cores"] = self.settings.core_request
        return conf

    def command(self, job: JobSpec, template: Path) -> list[str]:
        return [
            self.spark_submit,
            "--master",
            job.spark.master or self.master,
            "--deploy-mode",
            "cluster",
            "--name",
            job.job_id,
            *conf_arguments(self.spark_conf(job, template)),
            self.settings.app_resource,
            *self.driver_arguments(job),
        ]

    def launch(self, job: JobSpec) -> None:
        namespace = job.stream.namespace
        if self.store.get_pod(namespace, job.job_id) is not None:
            log.info("driver Pod %s/%s exists already; not submitting again", namespace, job.job_id)
            return
        self.write_config_maps(job)
        with tempfile.TemporaryDirectory(prefix="updatestream-submit-") as workdir:
            template = Path(workdir) / "driver-pod-template.yaml"
            template.write_text(yaml.safe_dump(self.pod_template(job)))
            env = {**os.environ, "SPARK_HOME": spark_home()}
            started = time.monotonic()
            try:
                result = subprocess.run(
                    self.command(job, template),
                    capture_output=True,
                    text=True,
                    timeout=self.submit_timeout,
                    env=env,
                    cwd=workdir,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                raise LaunchError(
                    f"spark-submit for job {namespace}/{job.job_id} did not return within "
                    f"{self.submit_timeout:.0f}s; check that the API server is reachable"
                ) from None
        log.info(
            "spark-submit for %s/%s exited %s after %.1fs",
            namespace,
            job.job_id,
            result.returncode,
            time.monotonic() - started,
        )
        if result.returncode != 0:
            existing = self.store.get_pod(namespace, job.job_id)
            if existing is not None:
                # A concurrent submission (e.g. by an operator killed meanwhile) created the
                # driver: still exactly one. Its launch's reports are the ones to read.
                annotations = existing["metadata"].get("annotations") or {}
                self.store.annotate_config_map(
                    namespace,
                    naming.progress_map_name(job.job_id),
                    {naming.ANNOTATION_LAUNCH_ID: annotations.get(naming.ANNOTATION_LAUNCH_ID, "")},
                )
                return
            raise LaunchError(
                f"spark-submit for job {namespace}/{job.job_id} failed with exit "
                f"{result.returncode}: {_error_lines(result.stderr)}"
            )

    # -- the driver Pod -----------------------------------------------------------------------

    def _find(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get_pod(namespace, name)

    def _objects(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        return self.store.list_pods(namespace, selector)

    def _remove(self, namespace: str, name: str) -> None:
        pod = self.store.get_pod(namespace, name)
        if pod is not None:
            self.store.delete_pod(namespace, name)
            self.store.delete_owned(namespace, pod["metadata"]["uid"])

    def _state(self, found: dict[str, Any]) -> DriverState:
        return driver_state(found, DRIVER_CONTAINER)


def _error_lines(stderr: str) -> str:
    """The lines of spark-submit's output that say what went wrong (scrubbed)."""
    lines = [
        line.strip()
        for line in stderr.splitlines()
        if ("Exception" in line or "ERROR" in line or "Error" in line)
        and not line.strip().startswith("at ")
    ]
    text = " | ".join(lines[-4:]) or stderr.strip()[-600:]
    return SCRUBBER.scrub(text)[:1200]
