"""`updatestream devcluster <command> [--engine devcluster|vitess]`: one set of commands for the
development cluster's own shards and for a real local Vitess v24.

Each engine keeps its commands in its own module (`devcluster.cli`, `vitess.cli`, which
`updatestream vitess ...` also serves). This module, above both, gives `up`, `down`, `status`,
`traffic` and `reshard` an `--engine` option and hands each call to that engine's command. An
option only the other engine has is refused by name rather than ignored. Without `--engine`, a
cluster directory that holds a Vitess cluster is run by the Vitess engine, any other by the
development cluster's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from updatestream.clickopts import DIRECTORY
from updatestream_cli.devcluster import cli as own_cli
from updatestream_cli.devcluster.cluster import DEFAULT_DIR as OWN_DIR
from updatestream_cli.devcluster.cluster_directory import ClusterDirectory
from updatestream_cli.vitess import cli as vitess_cli
from updatestream_cli.vitess.cluster import DEFAULT_DIR as VITESS_DIR
from updatestream_cli.vitess.cluster import holds_vitess_cluster

ENGINES = ("devcluster", "vitess")
_SHARED = ("up", "down", "status", "traffic", "reshard")

_ENGINE = click.Option(
    ["--engine"],
    type=click.Choice(ENGINES),
    default=None,
    help="devcluster: MariaDB or MySQL 8 shards resharded by this tool; vitess: a real local "
    "Vitess v24 (etcd, vtctld, vtgate, a tablet on MySQL 8 per shard; `make vitess-tools`), "
    "resharded by Vitess's Reshard [default: vitess if the cluster directory holds a Vitess "
    "cluster, else devcluster].",
)
_DIRECTORY = click.Option(
    ["--dir", "directory"],
    type=DIRECTORY,
    default=None,
    help=f"Cluster directory (manifest, secrets, state, data) [default: {OWN_DIR}, or "
    f"{VITESS_DIR} with --engine vitess].",
)


def _engine(chosen: str | None, directory: Path | None) -> str:
    """`--engine` if given; else vitess for a directory that holds a Vitess cluster (without
    `--dir`: when only the Vitess engine's default directory holds a cluster)."""
    if chosen is not None:
        return chosen
    if directory is None:
        alone = not ClusterDirectory(OWN_DIR).exists() and holds_vitess_cluster(VITESS_DIR)
        return "vitess" if alone else "devcluster"
    return "vitess" if holds_vitess_cluster(directory) else "devcluster"


def _refuse_foreign(ctx: click.Context, engine: str, command: click.Command) -> None:
    """A usage error for an option given on the command line that `engine` does not have."""
    accepted = {param.name for param in command.params}
    for param in ctx.command.params:
        if param.name in accepted or param.name in ("engine", "directory"):
            continue
        if ctx.get_parameter_source(param.name or "") in (ParameterSource.DEFAULT, None):
            continue
        if engine == "vitess" and param.name == "flavor" and ctx.params["flavor"] == "mysql":
            continue  # Vitess v24 serves its shards from MySQL 8 anyway
        other = "devcluster" if engine == "vitess" else "vitess"
        raise click.UsageError(
            f"{param.opts[0]} does not apply to --engine {engine}; drop it, or use --engine "
            f"{other}",
            ctx,
        )


def _dispatching(name: str, own: click.Command, vitess: click.Command) -> click.Command:
    names = {param.name for param in own.params}
    params: list[click.Parameter] = [p for p in own.params if p.name != "directory"]
    params += [p for p in vitess.params if p.name not in names]
    params += [_DIRECTORY, _ENGINE]

    def callback(engine: str | None, directory: Path | None, **values: Any) -> Any:
        ctx = click.get_current_context()
        engine = _engine(engine, directory)
        command = vitess if engine == "vitess" else own
        _refuse_foreign(ctx, engine, command)
        default_dir = VITESS_DIR if engine == "vitess" else OWN_DIR
        accepted = {param.name for param in command.params}
        values = {key: value for key, value in values.items() if key in accepted}
        assert command.callback is not None
        return ctx.invoke(command.callback, directory=directory or default_dir, **values)

    helps = (own.help or "", f"With --engine vitess: {vitess.help or ''}")
    return click.Command(name, callback=callback, params=params, help="\n\n".join(helps))


def _own_only(name: str, own: click.Command) -> click.Command:
    """`own` as it is, refusing a cluster directory that holds a Vitess cluster by name."""
    assert own.callback is not None
    run = own.callback

    def callback(**values: Any) -> Any:
        directory = values.get("directory")
        if directory is not None and holds_vitess_cluster(directory):
            raise click.UsageError(
                f"`devcluster {name}` works on the development cluster's own shards, and "
                f"{directory} holds a Vitess cluster (`devcluster reshard` there completes a "
                "Reshard and removes the old shards itself)"
            )
        return click.get_current_context().invoke(run, **values)

    return click.Command(name, callback=callback, params=own.params, help=own.help)


def _group() -> click.Group:
    own, vitess = own_cli.devcluster, vitess_cli.vitess
    group = click.Group(
        "devcluster",
        help=f"{own.help}\n\nWith --engine vitess: a real local Vitess v24 on MySQL 8, traffic "
        "through vtgate with the same ledger, and Vitess's Reshard.",
    )
    for name, command in own.commands.items():
        if name in _SHARED:
            command = _dispatching(name, command, vitess.commands[name])
        else:
            command = _own_only(name, command)
        group.add_command(command, name)
    return group


devcluster = _group()
