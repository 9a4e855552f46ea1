"""`updatestream operator` (runs the kopf operator) and `updatestream publish-progress`."""

from __future__ import annotations

import os
import signal
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import click

from updatestream.clickopts import FILE, seconds_option, secrets_dir_option, status_file_option
from updatestream.spec import REMOVED_LAUNCHERS
from updatestream_operator.config import (
    LAUNCHERS,
    ClusterSettings,
    OperatorConfig,
    WebhookSettings,
)


def _check_launcher(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """One of LAUNCHERS; a removed launcher is refused saying what to use instead."""
    if value is None or value in LAUNCHERS:
        return value
    if value in REMOVED_LAUNCHERS:
        raise click.BadParameter(REMOVED_LAUNCHERS[value], ctx=ctx, param=param)
    raise click.BadParameter(
        f"{value!r} is not a launcher; choose one of {', '.join(LAUNCHERS)}", ctx=ctx, param=param
    )


def _check_liveness(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """kopf serves its health endpoint over plain HTTP at the URL's host, port and path."""
    if value is None:
        return None
    parts = urllib.parse.urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or not parts.path:
        raise click.BadParameter(
            f"{value!r} is not an http://HOST:PORT/PATH URL; "
            "give one like http://0.0.0.0:8081/healthz",
            ctx=ctx,
            param=param,
        )
    return value


def _check_pod_template(path: Path) -> None:
    """Refuse to start with a driver Pod template that every launch would fail on."""
    from updatestream_operator.launchers.launcher import LaunchError
    from updatestream_operator.launchers.podtemplate import load_base_template

    try:
        load_base_template(path)
    except LaunchError as exc:
        raise click.BadParameter(str(exc), param_hint="--driver-pod-template") from None


def _webhook_settings(
    port: int | None, address: str, cert_dir: Path | None
) -> WebhookSettings | None:
    """The webhook's settings; refuse to start without a readable certificate and key."""
    if port is None:
        if cert_dir is not None:
            raise click.BadParameter(
                "--webhook-cert-dir needs --webhook-port", param_hint="--webhook-cert-dir"
            )
        return None
    if cert_dir is None:
        raise click.BadParameter(
            "the webhook needs its TLS certificate: give --webhook-cert-dir with tls.crt and "
            "tls.key",
            param_hint="--webhook-port",
        )
    files = [cert_dir / "tls.crt", cert_dir / "tls.key"]
    missing = [str(f) for f in files if not os.access(f, os.R_OK)]
    if missing:
        raise click.BadParameter(
            f"cannot read {', '.join(missing)}; mount the webhook's TLS Secret there",
            param_hint="--webhook-cert-dir",
        )
    return WebhookSettings(
        port=port, address=address, cert_file=files[0].absolute(), key_file=files[1].absolute()
    )


@click.command("operator")
@click.option(
    "--namespace", "-n", default=None, help="Watch only this namespace (default: every one)."
)
@click.option(
    "--launcher",
    metavar="[" + "|".join(LAUNCHERS) + "]",
    default=None,
    callback=_check_launcher,
    help="How to run jobs (default: spark-submit in a cluster, local outside one).",
)
@click.option("--metrics-port", type=int, default=8080, show_default=True, help="0: none.")
@click.option("--metrics-address", default="0.0.0.0", show_default=True)
@seconds_option("--interval", default=10.0, help="Seconds between progress folds per stream.")
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=Path(".updatestream") / "operator",
    show_default=True,
    help="Local launcher: where job directories and pid files live.",
)
@secrets_dir_option(
    help="Local launcher: Secrets as <dir>/<name>/<key> files (default: read from the API)."
)
@click.option(
    "--in-job-hops/--no-in-job-hops",
    default=True,
    show_default=True,
    help="Launch jobs watching their Keyspace, so that they hop inside the running query when "
    "its serving shards change (otherwise every hop stops and relaunches the job).",
)
@seconds_option(
    "--in-job-hop-timeout",
    default=120.0,
    minimum=1,
    help="Seconds a job has to report an in-job hop before it is stopped and relaunched from "
    "planned positions.",
)
@click.option("--image", default=None, help="Container image of the Spark driver and executors.")
@click.option("--service-account", default=None, help="ServiceAccount of the Spark drivers.")
@click.option(
    "--driver-pod-template",
    type=FILE,
    default=None,
    help="spark-submit launcher: a driver Pod template (the chart's) to build the driver Pods "
    "on, keeping its nodeSelector, tolerations, affinity, pull secrets and annotations.",
)
@click.option(
    "--driver-master",
    default=None,
    metavar="URL",
    help="spark-submit launcher: the API server's address as driver Pods reach it "
    "(spark.kubernetes.driver.master), e.g. https://10.0.0.1:6443; default: Spark's own.",
)
@click.option(
    "--spark-core-request",
    default=None,
    metavar="CPU",
    help="spark-submit launcher: CPU each driver and executor Pod requests, e.g. 500m "
    "(a stream's spec.spark coreRequest wins); default: Spark's own.",
)
@click.option(
    "--checkpoint-claim",
    default=None,
    metavar="PVC",
    help="spark-submit launcher: a PersistentVolumeClaim in the job's namespace for the "
    "drivers' checkpoints, so they outlive the driver Pod; default: an emptyDir.",
)
@click.option("--kubeconfig", default=None, help="Default: in-cluster, else $KUBECONFIG.")
@click.option(
    "--liveness",
    default=None,
    callback=_check_liveness,
    metavar="URL",
    help="Serve kopf's health endpoint here, e.g. http://0.0.0.0:8081/healthz (default: none).",
)
@click.option(
    "--webhook-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve the validating admission webhook over HTTPS on this port (default: none).",
)
@click.option("--webhook-address", default="0.0.0.0", show_default=True)
@click.option(
    "--webhook-cert-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="With --webhook-port: a directory holding the webhook's tls.crt and tls.key (PEM), "
    "as a mounted kubernetes.io/tls Secret has them.",
)
@click.option("--verbose", is_flag=True)
def operator_command(
    namespace: str | None,
    launcher: Any,
    metrics_port: int,
    metrics_address: str,
    interval: float,
    state_dir: Path,
    secrets_dir: Path | None,
    in_job_hops: bool,
    in_job_hop_timeout: float,
    image: str | None,
    service_account: str | None,
    driver_pod_template: Path | None,
    driver_master: str | None,
    spark_core_request: str | None,
    checkpoint_claim: str | None,
    kubeconfig: str | None,
    liveness: str | None,
    webhook_port: int | None,
    webhook_address: str,
    webhook_cert_dir: Path | None,
    verbose: bool,
) -> None:
    """Run the UpdateStream operator (kopf) until interrupted."""
    webhook = _webhook_settings(webhook_port, webhook_address, webhook_cert_dir)
    _check_endpoints(liveness, metrics_port, driver_pod_template)
    cfg = OperatorConfig(
        namespace=namespace,
        launcher=launcher,
        metrics_port=metrics_port,
        metrics_address=metrics_address,
        timer_interval=interval,
        state_dir=state_dir.absolute(),
        secrets_dir=secrets_dir.absolute() if secrets_dir else None,
        kubeconfig=kubeconfig,
        in_job_hops=in_job_hops,
        in_job_hop_timeout=in_job_hop_timeout,
        webhook=webhook,
    )
    cfg.cluster = ClusterSettings(
        image=image or cfg.cluster.image,
        service_account=service_account or cfg.cluster.service_account,
        driver_pod_template=driver_pod_template.absolute() if driver_pod_template else None,
        driver_master=driver_master,
        core_request=spark_core_request,
        checkpoint_claim=checkpoint_claim,
    )
    _run(cfg, liveness=liveness, verbose=verbose)


def _run(cfg: OperatorConfig, *, liveness: str | None, verbose: bool) -> None:
    """kopf, with the handlers registered and configured, until interrupted."""
    import kopf

    from updatestream_operator import config, handlers, kopfext  # noqa: F401 - handlers register

    if cfg.kubeconfig:
        os.environ["KUBECONFIG"] = cfg.kubeconfig  # kopf's own login reads it too
    config.configure(cfg)
    kopf.configure(verbose=verbose)
    kopfext.quiet_logging(verbose)
    kopf.run(
        clusterwide=cfg.namespace is None,
        namespaces=[cfg.namespace] if cfg.namespace else [],
        standalone=True,
        liveness_endpoint=liveness,
    )


def _check_endpoints(
    liveness: str | None, metrics_port: int, driver_pod_template: Path | None
) -> None:
    """Refuse a liveness endpoint on the metrics port, and a driver template that is bad."""
    if liveness and metrics_port and urllib.parse.urlsplit(liveness).port == metrics_port:
        raise click.BadParameter(
            f"{liveness!r} uses port {metrics_port}, which --metrics-port serves; "
            "give them different ports",
            param_hint="--liveness",
        )
    if driver_pod_template is not None:
        _check_pod_template(driver_pod_template)


@click.command("publish-progress")
@status_file_option(required=True, help="The job's status file, written after every batch.")
@click.option("--namespace", required=True)
@click.option("--config-map", required=True)
@click.option("--launch-id", type=int, required=True)
@seconds_option("--interval", default=5.0, help="Seconds between copies.")
def publish_progress(
    status_file: Path, namespace: str, config_map: str, launch_id: int, interval: float
) -> None:
    """Copy a job's status file into its progress ConfigMap (the driver's sidecar)."""
    from updatestream_operator import publisher
    from updatestream_operator.storage import KubeStore

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    publisher.run(
        KubeStore.connect(),
        status_file=status_file,
        namespace=namespace,
        config_map=config_map,
        launch_id=launch_id,
        interval=interval,
        stop=stop,
    )
