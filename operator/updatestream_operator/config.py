"""The operator's own settings (from `updatestream operator` options), and what they build.

The settings of the cluster launcher (`ClusterSettings`) live beside it in
`launchers.settings`: the launchers never import this module, which builds them (lazily: the
console script loads this module for its options, and should not load the Kubernetes client).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from updatestream_operator.launchers.launcher import Launcher
from updatestream_operator.launchers.settings import ClusterSettings

if TYPE_CHECKING:
    from updatestream_operator.storage import KubeStore

__all__ = [
    "LAUNCHERS",
    "ClusterSettings",
    "LauncherName",
    "OperatorConfig",
    "build_launchers",
    "configure",
    "current",
    "in_cluster",
]

LauncherName = Literal["local", "spark-submit"]
LAUNCHERS: tuple[LauncherName, ...] = ("local", "spark-submit")


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


@dataclass(frozen=True)
class WebhookSettings:
    """Where the validating admission webhook listens, and its TLS certificate and key (PEM).

    The chart makes the certificate (signed by a CA whose bundle it puts in the
    ValidatingWebhookConfiguration) and mounts it from a Secret.
    """

    port: int
    cert_file: Path
    key_file: Path
    address: str = "0.0.0.0"


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
    webhook: WebhookSettings | None = None  # None: no admission webhook served

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


def build_launchers(config: OperatorConfig, store: KubeStore) -> dict[str, Launcher]:
    """Every launcher the operator can use (a stream may choose one with spec.spark.launcher)."""
    from updatestream_operator.launchers.local import LocalLauncher
    from updatestream_operator.launchers.spark_submit import SparkSubmitLauncher

    return {
        "spark-submit": SparkSubmitLauncher(
            store, config.cluster, spark_submit=config.spark_submit
        ),
        "local": LocalLauncher(
            config.state_dir,
            command=config.local_command,
            secrets_dir=config.secrets_dir,
            secret_reader=store.read_secret,
        ),
    }
