"""`updatestream snapshot-request`: ask a running local job for a snapshot on demand.

The job was started with `--snapshot-requests FILE` (the operator passes the same file from the
UpdateStream's `snapshotRequests`); this appends one request to it, and the job reads it at its
next batch and re-reads the table (or part of its key range) while it streams on.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
from pydantic import ValidationError

from updatestream import spec


@click.command("snapshot-request")
@click.argument("requests_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--table", default=None, help="The table to re-read (default: every table).")
@click.option("--key-range", default=None, help="The key range to re-read (default: all).")
@click.option("--id", "ident", default=None, help="The request's id (default: from the time).")
def snapshot_request(
    requests_file: Path, table: str | None, key_range: str | None, ident: str | None
) -> None:
    """Append a snapshot-on-demand request to a running job's REQUESTS_FILE."""
    data = {"id": ident or f"cli-{time.time_ns()}", "table": table, "keyRange": key_range}
    try:
        request = spec.SnapshotRequest.model_validate(data)
    except ValidationError as exc:
        raise click.BadParameter(spec.describe_validation_error(exc)) from None
    with requests_file.open("a", encoding="utf-8") as out:
        out.write(request.line() + "\n")
    click.echo(f"requested snapshot {request.id} in {requests_file}")
