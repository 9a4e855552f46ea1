"""The configuration files a streaming job is started with, and its command line.

A job reads two manifests: the UpdateStream (with `spec.start` rewritten by the operator to
where this launch starts: the user's start on the first launch, the recorded positions
afterwards) and its Keyspace; after a hop also the hop's dedup filter. In a cluster they are
keys of one ConfigMap mounted into the driver; the local launcher writes them as files.

A job launched for in-job hops also watches its Keyspace (`--keyspace-watch`): the local
launcher's keyspace file, which the operator rewrites when the Keyspace changes, or in a
cluster the Keyspace object itself (`kubernetes:<namespace>/<name>`, read with the driver's
ServiceAccount).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import yaml

from updatestream.spec import API_VERSION, Keyspace, dump_keyspace
from updatestream_operator.models import JobSpec

STREAM_FILE = "stream.yaml"
KEYSPACE_FILE = "keyspace.yaml"
DEDUP_FILE = "dedup.json"  # the dedup filter of the hops the job starts after


def stream_manifest(job: JobSpec) -> str:
    document = {
        "apiVersion": API_VERSION,
        "kind": "UpdateStream",
        "metadata": {"name": job.stream.name, "namespace": job.stream.namespace},
        "spec": job.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    return yaml.safe_dump(document, sort_keys=False)


def keyspace_manifest(job: JobSpec) -> str:
    return keyspace_document(job.keyspace)


def keyspace_document(keyspace: Keyspace) -> str:
    """The Keyspace as a job reads it (its spec; the status is the operator's)."""
    return dump_keyspace(keyspace.model_copy(update={"status": None}))


def kubernetes_watch(job: JobSpec) -> str:
    """The watch source of a driver in a cluster: the Keyspace object, through the API."""
    return f"kubernetes:{job.stream.namespace}/{job.spec.keyspace}"


def config_files(job: JobSpec) -> dict[str, str]:
    """File name -> content, for the ConfigMap or the local state directory."""
    files = {STREAM_FILE: stream_manifest(job), KEYSPACE_FILE: keyspace_manifest(job)}
    if job.dedup is not None:
        files[DEDUP_FILE] = json.dumps(job.dedup, sort_keys=True)
    return files


def run_arguments(
    job: JobSpec,
    *,
    config_dir: str,
    secrets_dir: str,
    checkpoint: str,
    metrics_port: int,
    status_file: str,
    keyspace_watch: str | None = None,
) -> list[str]:
    """Arguments of `updatestream run` (after the program or the Spark main file);
    `keyspace_watch` where a job launched for in-job hops re-reads its Keyspace."""
    arguments = [
        "run",
        "--stream",
        f"{config_dir}/{STREAM_FILE}",
        "--keyspace",
        f"{config_dir}/{KEYSPACE_FILE}",
        "--key-range",
        job.key_range,
        "--secrets-dir",
        secrets_dir,
        "--checkpoint",
        checkpoint,
        "--metrics-port",
        str(metrics_port),
        "--status-file",
        status_file,
    ]
    if job.dedup is not None:
        arguments += ["--dedup", f"{config_dir}/{DEDUP_FILE}"]
    if job.hop_started_at is not None:
        arguments += ["--hop-started-at", f"{job.hop_started_at:.3f}"]
    if job.in_job_hops and keyspace_watch is not None:
        arguments += ["--keyspace-watch", keyspace_watch]
    return arguments


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
