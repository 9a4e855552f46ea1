"""`updatestream run`: run one UpdateStream key range as a Spark streaming job.

This module is imported when the `updatestream` console script starts, so it imports neither
pyspark nor the job: the command loads them when it runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from updatestream import spec
from updatestream.core.errors import UpdateStreamError


def _dedup(text: str | None) -> object:
    if not text:
        return None
    from updatestream.core.dedup import DedupFilter

    path = Path(text)
    data = json.loads(path.read_text(encoding="utf-8") if path.is_file() else text)
    return DedupFilter.from_json(data)


@click.command("run")
@click.option(
    "--stream",
    "stream_path",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="UpdateStream spec (YAML or JSON).",
)
@click.option(
    "--keyspace",
    "keyspace_path",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="Keyspace manifest (YAML/JSON).",
)
@click.option(
    "--secrets-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the Secrets are mounted (<dir>/<secret>/username, password).",
)
@click.option(
    "--checkpoint",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Spark checkpoint directory: restarting with it resumes exactly.",
)
@click.option("--key-range", default=None, help="The key range to serve (default: the only one).")
@click.option("--master", default=None, help="Spark master (default local[*]).")
@click.option(
    "--trigger-seconds", default=2.0, show_default=True, type=float, help="Micro-batch interval."
)
@click.option("--available-now", is_flag=True, help="Read what the shards hold now, then stop.")
@click.option("--timeout", default=None, type=float, help="Stop after this many seconds.")
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
@click.option(
    "--status-file",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write per-shard progress as JSON here after every batch.",
)
@click.option(
    "--trace-file",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where Spark's and Python's diagnostic output goes (appended); the terminal gets the "
    "job's own warnings and one line per error. Default: <checkpoint>.log.",
)
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
@click.option(
    "--hop-started-at",
    default=None,
    type=float,
    help="When that hop began (unix seconds), for the hop duration metric.",
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
    trace_file: Path | None,
    dedup: str | None,
    hop_started_at: float | None,
    source_option: tuple[str, ...],
    keyspace_watch: str | None,
) -> None:
    """Stream one key range of an UpdateStream from the shards' binlogs to its sinks."""
    from updatestream_jobs.job import Job, JobOptions
    from updatestream_jobs.joblog import JobFailed, TraceFile, default_trace_path, first_line

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
    with TraceFile(trace_file or default_trace_path(checkpoint)):
        try:
            tracker = Job(options).run()
        except UpdateStreamError:
            raise
        except Exception as exc:
            raise JobFailed(f"the stream's Spark query failed: {first_line(exc)}") from exc
    for shard, progress in sorted(tracker.shards.items()):
        click.echo(
            f"{shard}: {progress.events} events, position {progress.position}, "
            f"lag {progress.lag_seconds:.1f}s"
        )
