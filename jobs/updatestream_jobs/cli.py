"""`updatestream run`: run one UpdateStream key range as a Spark streaming job.

The job is started from one `JobConfig`: read from `--config` (the file the operator writes),
or built from the flags for a local run. This module is imported when the `updatestream`
console script starts, so it imports neither pyspark nor the job: the command loads them when
it runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from updatestream import spec, validation
from updatestream.clickopts import (
    DIRECTORY,
    key_range_option,
    manifest_option,
    seconds_option,
    secrets_dir_option,
    status_file_option,
)
from updatestream.contract.job_config import JobConfig
from updatestream.core.errors import UpdateStreamError


def _dedup(text: str | None) -> object:
    if not text:
        return None
    path = Path(text)
    return json.loads(path.read_text(encoding="utf-8") if path.is_file() else text)


def _pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=option)
        found[key.strip()] = value.strip()
    return found


def _flags_config(
    stream_path: Path | None, keyspace_path: Path | None, flags: dict[str, Any]
) -> JobConfig:
    """The JobConfig of a run started with flags instead of --config."""
    missing = [
        name
        for name, value in (
            ("--stream", stream_path),
            ("--keyspace", keyspace_path),
            ("--secrets-dir", flags["secrets_dir"]),
            ("--checkpoint", flags["checkpoint"]),
        )
        if value is None
    ]
    if missing:
        raise click.UsageError(f"give --config, or {', '.join(missing)}")
    assert stream_path is not None and keyspace_path is not None
    stream = spec.parse_update_stream(spec.load_manifest(stream_path), source=str(stream_path))
    data = {
        "stream": stream,
        "keyspace": spec.load_keyspace(keyspace_path),
        **flags,
        "dedup": _dedup(flags["dedup"]),
        "source_options": _pairs(flags["source_options"], "--source-option"),
        # a local run follows its Keyspace file unless told otherwise
        "keyspace_watch": flags["keyspace_watch"] or str(keyspace_path),
    }
    return JobConfig.parse(
        {key: value for key, value in data.items() if value is not None}, source="the flags"
    )


def _checked_run(config: JobConfig, sources: tuple[str, str], trace_file: Path | None) -> Any:
    """The checks the operator's reconcile and admission webhook run (refuse what they refuse),
    what only the servers can tell (`preflight`), then the job until it ends."""
    from updatestream_jobs import preflight
    from updatestream_jobs.job import Job
    from updatestream_jobs.joblog import JobFailed, TraceFile, default_trace_path, first_line
    from updatestream_jobs.snapshotbar import SnapshotBar

    stream_source, keyspace_source = sources
    validation.check_keyspace(config.keyspace, source=keyspace_source)
    validation.check_update_stream(config.stream, config.keyspace, source=stream_source)
    preflight.check(config, config.serving_key_range())
    with TraceFile(trace_file or default_trace_path(config.checkpoint)):
        bar = SnapshotBar() if sys.stderr.isatty() else None
        try:
            return Job(config).run(on_tick=bar)
        except UpdateStreamError:
            raise
        except Exception as exc:
            raise JobFailed(f"the stream's Spark query failed: {first_line(exc)}") from exc
        finally:
            if bar is not None:
                bar.close()


@click.command("run")
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The job configuration the operator writes (job.yaml); replaces the flags below.",
)
@manifest_option(
    "--stream", "stream_path", required=False, help="UpdateStream spec (YAML or JSON)."
)
@manifest_option("--keyspace", "keyspace_path", required=False, help="Keyspace manifest.")
@secrets_dir_option(help="Where the Secrets are mounted (<dir>/<secret>/username, password).")
@click.option(
    "--checkpoint",
    default=None,
    type=DIRECTORY,
    help="Spark checkpoint directory: restarting with it resumes exactly.",
)
@key_range_option(help="The key range to serve (default: the only one).")
@click.option("--master", default=None, help="Spark master (default local[*]).")
@seconds_option("--trigger-seconds", default=0.1, help="Micro-batch interval.")
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
    "source_options",
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
@click.option(
    "--snapshot-requests",
    default=None,
    type=click.Path(dir_okay=False),
    help="A file of snapshot-on-demand requests the running job polls (JSON lines; "
    "'updatestream snapshot-request FILE' appends one).",
)
def run(
    config_path: Path | None,
    stream_path: Path | None,
    keyspace_path: Path | None,
    trace_file: Path | None,
    **flags: Any,
) -> None:
    """Stream one key range of an UpdateStream from the shards' binlogs to its sinks."""
    from updatestream_jobs import fatal_error

    if config_path is not None:
        config = JobConfig.load(config_path)
    else:
        config = _flags_config(stream_path, keyspace_path, flags)
    try:
        sources = (str(config_path or stream_path), str(config_path or keyspace_path))
        tracker = _checked_run(config, sources, trace_file)
    except UpdateStreamError as exc:
        fatal_error.record(config, exc)  # the operator reads why the job ended
        raise
    for shard, progress in sorted(tracker.shards.items()):
        click.echo(
            f"{shard}: {progress.events} events, position {progress.position}, "
            f"lag {progress.lag_seconds:.1f}s"
        )
