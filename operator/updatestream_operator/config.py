"""The operator's own settings (from `updatestream operator` options), and what they build."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from updatestream_operator.launchers.base import Launcher
from updatestream_operator.models import JobSpec

LauncherName = Literal["local", "spark-submit", "spark-operator"]
LAUNCHERS: tuple[LauncherName, ...] = ("local", "spark-submit", "spark-operator")


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


@dataclass(frozen=True)
class ClusterSettings:
    """How drivers run in the cluster (operator settings; `spec.spark` overrides some)."""

    image: str = "ghcr.io/updatestream/updatestream:0.1.0"
    service_account: str = "updatestream-spark"
    app_resource: str = "local:///opt/updatestream/jobs/updatestream_jobs/main.py"
    checkpoint_root: str = "/var/lib/updatestream/checkpoints"
    driver_metrics_port: int = 9090
    publish_interval_seconds: float = 5.0
    spark_version: str = "4.3.0"
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


@dataclass
class OperatorConfig:
    namespace: str | None = None  # None: every namespace
    launcher: LauncherName | None = None  # None: spark-submit in a cluster, local outside
    metrics_port: int = 8080  # 0: no metrics endpoint
    metrics_address: str = "0.0.0.0"
    timer_interval: float = 10.0  # seconds between progress folds per stream
    state_dir: Path = field(default_factory=lambda: Path(".updatestream") / "operator")
    secrets_dir: Path | None = None  # local launcher: mounted Secrets; else read from the API
    local_command: list[str] | None = None  # local launcher: the `updatestream` program
    spark_submit: str | None = None
    kubeconfig: str | None = None
    max_restarts: int = 3
    in_job_hops: bool = True  # launch jobs that hop inside their running query
    in_job_hop_timeout: float = 120.0  # seconds before such a hop falls back to a relaunch
    cluster: ClusterSettings = field(default_factory=ClusterSettings)

    @property
    def default_launcher(self) -> LauncherName:
        if self.launcher is not None:
            return self.launcher
        return "spark-submit" if in_cluster() else "local"


_current: OperatorConfig | None = None


def configure(config: OperatorConfig) -> None:
    """Set the configuration the kopf startup handler builds the operator from."""
    global _current
    _current = config


def current() -> OperatorConfig:
    return _current or OperatorConfig()


def build_launchers(config: OperatorConfig, store: object) -> dict[str, Launcher]:
    """Every launcher the operator can use (a stream may choose one with spec.spark.launcher)."""
    from updatestream_operator.launchers.local import LocalLauncher
    from updatestream_operator.launchers.spark_operator import SparkOperatorLauncher
    from updatestream_operator.launchers.spark_submit import SparkSubmitLauncher
    from updatestream_operator.storage import KubeStore

    assert isinstance(store, KubeStore)
    return {
        "spark-submit": SparkSubmitLauncher(
            store, config.cluster, spark_submit=config.spark_submit
        ),
        "spark-operator": SparkOperatorLauncher(store, config.cluster),
        "local": LocalLauncher(
            config.state_dir,
            command=config.local_command,
            secrets_dir=config.secrets_dir,
            secret_reader=store.read_secret,
        ),
    }
