"""`updatestream run`: run one UpdateStream key range as a Spark streaming job.

This module is imported when the `updatestream` console script starts, so it imports neither
pyspark nor the job: the command loads them when it runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from updatestream import spec
from updatestream.clickopts import (
    DIRECTORY,
    key_range_option,
    manifest_option,
    seconds_option,
    secrets_dir_option,
    status_file_option,
)


def _dedup(text: str | None) -> object:
    if not text:
        return None
    from updatestream.core.dedup import DedupFilter

    path = Path(text)
    data = json.loads(path.read_text(encoding="utf-8") if path.is_file() else text)
    return DedupFilter.from_json(data)


@click.command("run")
@manifest_option("--stream", "stream_path", help="UpdateStream spec (YAML or JSON).")
@manifest_option("--keyspace", "keyspace_path", help="Keyspace manifest (YAML/JSON).")
@secrets_dir_option(
    required=True, help="Where the Secrets are mounted (<dir>/<secret>/username, password)."
)
@click.option(
    "--checkpoint",
    required=True,
    type=DIRECTORY,
    help="Spark checkpoint directory: restarting with it resumes exactly.",
)
@key_range_option(help="The key range to serve (default: the only one).")
@click.option("--master", default=None, help="Spark master (default local[*]).")
@seconds_option("--trigger-seconds", default=2.0, help="Micro-batch interval.")
@click.option("--available-now", is_flag=True, help="Read what the shards hold now, then stop.")
@seconds_option("--timeout", help="Stop after this many seconds.")
@click.option(
    "--metrics-port",
    default=None,
    type=int,
    help="Serve Prometheus metrics on HOST:PORT/metrics (0: any free port).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics endpoint binds (0.0.0.0 in a cluster, for Prometheus).",
)
@status_file_option(help="Write per-shard progress as JSON here after every batch.")
@click.option(
    "--dedup",
    default=None,
    help="The dedup filter of the hop this job starts after (JSON text or file).",
)
@click.option(
    "--source-option",
    "source_option",
    multiple=True,
    metavar="KEY=VALUE",
    help="An extra option of the binlog source, e.g. heartbeatIntervalSeconds=10 (repeatable).",
)
@click.option(
    "--keyspace-watch",
    default=None,
    metavar="PATH|kubernetes:NS/NAME",
    help="Where the running job re-reads its Keyspace to follow serving-map changes and hop "
    "(default: the --keyspace file).",
)
@seconds_option(
    "--hop-started-at", help="When that hop began (unix seconds), for the hop duration metric."
)
def run(
    stream_path: Path,
    keyspace_path: Path,
    secrets_dir: Path,
    checkpoint: Path,
    key_range: str | None,
    master: str | None,
    trigger_seconds: float,
    available_now: bool,
    timeout: float | None,
    metrics_port: int | None,
    metrics_host: str,
    status_file: Path | None,
    dedup: str | None,
    hop_started_at: float | None,
    source_option: tuple[str, ...],
    keyspace_watch: str | None,
) -> None:
    """Stream one key range of an UpdateStream from the shards' binlogs to its sinks."""
    from updatestream_jobs.job import Job, JobOptions

    stream = spec.parse_update_stream(spec.load_manifest(stream_path), source=str(stream_path))
    keyspace = spec.load_keyspace(keyspace_path)
    extra: dict[str, str] = {}
    for item in source_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--source-option")
        extra[key.strip()] = value.strip()
    options = JobOptions(
        stream=stream,
        keyspace=keyspace,
        secrets_dir=secrets_dir,
        checkpoint=checkpoint,
        key_range=key_range,
        master=master,
        trigger_seconds=trigger_seconds,
        available_now=available_now,
        timeout=timeout,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        status_file=status_file,
        dedup=_dedup(dedup),  # type: ignore[arg-type]
        hop_started_at=hop_started_at,
        source_options=extra,
        keyspace_watch=keyspace_watch,
        keyspace_path=keyspace_path,
    )
    job = Job(options)
    tracker = job.run()
    for shard, progress in sorted(tracker.shards.items()):
        click.echo(
            f"{shard}: {progress.events} events, position {progress.position}, "
            f"lag {progress.lag_seconds:.1f}s"
        )
