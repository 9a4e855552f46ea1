"""Click options that several command lines share: the tools', the job's and the operator's.

Each factory returns a decorator, so a command reads as one line per option; the help text
stays with the command, since the same option means something a little different to each
(`--status-file` is written by the job and read by the verifier and the progress publisher).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

# A file (not a directory) and a directory (not a file), given as pathlib.Path.
FILE = click.Path(dir_okay=False, path_type=Path)
DIRECTORY = click.Path(file_okay=False, path_type=Path)


def seconds_option(
    name: str,
    *,
    default: float | None = None,
    minimum: float | None = None,
    help: str | None = None,
    hidden: bool = False,
) -> Decorator[Any]:
    """A duration or a rate in seconds (a float), shown with its default when it has one."""
    kind = click.FLOAT if minimum is None else click.FloatRange(min=minimum)
    return click.option(
        name,
        type=kind,
        default=default,
        show_default=default is not None,
        help=help,
        hidden=hidden,
    )


def manifest_option(name: str, dest: str, *, help: str, required: bool = True) -> Decorator[Any]:
    """A Kubernetes-style manifest (YAML or JSON) that must exist, as a Path."""
    kind = click.Path(exists=True, dir_okay=False, path_type=Path)
    return click.option(name, dest, required=required, type=kind, help=help)


def secrets_dir_option(*, help: str, required: bool = False) -> Decorator[Any]:
    """`--secrets-dir`: Secrets as files, `<dir>/<secret>/<key>` (username, password, ...)."""
    return click.option("--secrets-dir", type=DIRECTORY, required=required, help=help)


def status_file_option(*, help: str, required: bool = False) -> Decorator[Any]:
    """`--status-file`: the job's progress report (JSON)."""
    return click.option("--status-file", type=FILE, required=required, help=help)


def key_range_option(*, help: str, default: str | None = None) -> Decorator[Any]:
    """`--key-range`: a key range written like a shard name (`-80`, `40-80`, `-`)."""
    return click.option("--key-range", default=default, show_default=default is not None, help=help)


def json_option(help: str = "Print JSON instead of tables.") -> Decorator[Any]:
    """`--json`: machine-readable output, passed to the command as `as_json`."""
    return click.option("--json", "as_json", is_flag=True, help=help)
