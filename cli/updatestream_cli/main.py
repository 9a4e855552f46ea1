"""The `updatestream` console script.

Each area registers its own commands from its own module; this module only assembles them and
turns typed errors into a one-line message and a non-zero exit.
"""

from __future__ import annotations

import importlib
import sys

import click

from updatestream import __version__
from updatestream.core.errors import UpdateStreamError

# (module, attribute): click commands or groups added to the top-level group.
# Add one line per command; keep the list sorted by module.
_COMMANDS: tuple[tuple[str, str], ...] = (
    ("updatestream_cli.keyspace_id_commands", "keyspace_id"),
    ("updatestream_cli.keyspace_id_commands", "shard_for"),
    ("updatestream_cli.demo.cli", "demo"),
    ("updatestream_cli.engine_commands", "devcluster"),
    ("updatestream_cli.snapshot_request", "snapshot_request"),
    ("updatestream_cli.verify.cli", "verify"),
    ("updatestream_cli.vitess.cli", "vitess"),
    ("updatestream_jobs.cli", "run"),
    ("updatestream_operator.cli", "operator_command"),
    ("updatestream_operator.cli", "publish_progress"),
)


@click.group()
@click.version_option(__version__, prog_name="updatestream")
def cli() -> None:
    """Resharding-aware change stream for sharded MySQL/MariaDB keyspaces."""


def _register() -> None:
    for module_name, attribute in _COMMANDS:
        module = importlib.import_module(module_name)
        cli.add_command(getattr(module, attribute))


_register()


def main() -> None:
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except UpdateStreamError as exc:
        click.echo(f"error: {exc}", err=True)
        for note in getattr(exc, "__notes__", ()):  # e.g. where a job's full trace is
            click.echo(note, err=True)
        sys.exit(1)
