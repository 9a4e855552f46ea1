"""How drivers run in the cluster: the operator's settings for its cluster launcher.

A module of its own, light to import: the operator's configuration holds these settings and
builds the launchers, so the launchers must not import the configuration, and the console
script must not load the Kubernetes client just to parse its options.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from updatestream_operator.reconciler.models import JobSpec


@dataclass(frozen=True)
class ClusterSettings:
    """How drivers run in the cluster (operator settings; `spec.spark` overrides some)."""

    image: str = "ghcr.io/updatestream/updatestream:0.1.0"
    service_account: str = "updatestream-spark"
    app_resource: str = "local:///opt/updatestream/jobs/updatestream_jobs/main.py"
    checkpoint_root: str = "/var/lib/updatestream/checkpoints"
    driver_metrics_port: int = 9090
    publish_interval_seconds: float = 5.0
    # UID and GID of the driver Pods (the image's user); Pod Security `restricted` needs non-zero
    run_as_user: int = 10001
    # a Pod template (the chart's) the spark-submit driver template is built on, so its
    # scheduling, pull secrets and annotations reach the driver Pods; None: the operator's alone
    driver_pod_template: Path | None = None
    # the API server's address as the driver Pods reach it (spark.kubernetes.driver.master);
    # None: Spark's default, kubernetes.default.svc (needs cluster DNS)
    driver_master: str | None = None
    # CPU each driver and executor requests (spark.kubernetes.*.request.cores); a stream's
    # spec.spark.driver/executor coreRequest wins. None: Spark's default (the cores setting)
    core_request: str | None = None
    # a PersistentVolumeClaim for the drivers' checkpoints, so they outlive the driver Pod;
    # None: an emptyDir per Pod
    checkpoint_claim: str | None = None

    def image_for(self, job: JobSpec) -> str:
        return job.spark.image or self.image

    def service_account_for(self, job: JobSpec) -> str:
        return job.spark.service_account or self.service_account
