"""The configuration a streaming job is started with, and its command line.

Each launch gets one `JobConfig` (`updatestream.contract.job_config`): the UpdateStream with
`spec.start` rewritten by the operator to where this launch starts (the user's start on the
first launch, the recorded positions afterwards), its Keyspace, the key range, the dedup filter
of the hops it starts after, and the launch's paths. It is written as `job.yaml`: in a cluster a
key of one ConfigMap mounted into the driver, locally a file of the job's state directory. The
job is started with `updatestream run --config <dir>/job.yaml`.

A job launched for in-job hops also watches its Keyspace: the local launcher's `keyspace.yaml`,
which the operator rewrites when the Keyspace changes, or in a cluster the Keyspace object
itself (`kubernetes:<namespace>/<name>`, read with the driver's ServiceAccount).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from updatestream.contract.job_config import JOB_FILE, SNAPSHOT_REQUESTS_FILE, JobConfig
from updatestream.spec import Keyspace, ObjectMeta, UpdateStream, dump_keyspace
from updatestream_operator.reconciler.models import JobSpec

KEYSPACE_FILE = "keyspace.yaml"  # what a local job watches for serving-map changes


def keyspace_document(keyspace: Keyspace) -> str:
    """The Keyspace as a job reads it (its spec; the status is the operator's)."""
    return dump_keyspace(keyspace.model_copy(update={"status": None}))


def kubernetes_watch(job: JobSpec) -> str:
    """The watch source of a driver in a cluster: the Keyspace object, through the API."""
    return f"kubernetes:{job.stream.namespace}/{job.spec.keyspace}"


def job_config(
    job: JobSpec,
    *,
    secrets_dir: str,
    checkpoint: str,
    metrics_port: int,
    status_file: str,
    keyspace_watch: str | None = None,
    snapshot_requests: str | None = None,
) -> JobConfig:
    """The configuration of one launch; `keyspace_watch` where a job launched for in-job hops
    re-reads its Keyspace to hop when the serving shards change."""
    return JobConfig(
        stream=UpdateStream(
            metadata=ObjectMeta(name=job.stream.name, namespace=job.stream.namespace),
            spec=job.spec,
        ),
        keyspace=job.keyspace.model_copy(update={"status": None}),
        key_range=job.key_range,
        secrets_dir=Path(secrets_dir),
        checkpoint=Path(checkpoint),
        metrics_port=metrics_port,
        status_file=Path(status_file),
        dedup=job.dedup,
        hop_started_at=job.hop_started_at,
        keyspace_watch=keyspace_watch if job.in_job_hops else None,
        snapshot_requests=snapshot_requests,
    )


def config_files(config: JobConfig) -> dict[str, str]:
    """File name -> content, for the ConfigMap or the local state directory."""
    return {
        JOB_FILE: config.dump(),
        KEYSPACE_FILE: keyspace_document(config.keyspace),
        SNAPSHOT_REQUESTS_FILE: config.stream.spec.snapshot_requests_text(),
    }


def run_options(config_dir: str) -> list[str]:
    """The options of `updatestream run`: what the Spark main file (which is that command)
    takes, and what follows `run` on a command line."""
    return ["--config", f"{config_dir}/{JOB_FILE}"]


def spark_resource_conf(prefix: str, resources: dict[str, str]) -> dict[str, str]:
    """`spec.spark.driver`/`executor` (cores, memory, coreLimit, instances, ...) as Spark conf."""
    known = {
        "cores": f"spark.{prefix}.cores",
        "memory": f"spark.{prefix}.memory",
        "memoryOverhead": f"spark.{prefix}.memoryOverhead",
        "coreRequest": f"spark.kubernetes.{prefix}.request.cores",
        "coreLimit": f"spark.kubernetes.{prefix}.limit.cores",
        "instances": f"spark.{prefix}.instances",
    }
    return {known.get(key, f"spark.{prefix}.{key}"): value for key, value in resources.items()}


def conf_arguments(conf: dict[str, str]) -> Sequence[str]:
    args: list[str] = []
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return args
