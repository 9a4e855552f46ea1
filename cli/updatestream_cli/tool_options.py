"""Click options of the tools (`devcluster`, `demo`, `verify`); shared ones live in
`updatestream.clickopts`, below the job's and the operator's command lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from updatestream.clickopts import DIRECTORY, FILE, Decorator


def directory_option(default: Path, help: str) -> Decorator[Any]:
    """`--dir`: the folder a tool keeps its servers, files and state in (as `directory`)."""
    return click.option(
        "--dir", "directory", type=DIRECTORY, default=default, show_default=True, help=help
    )


def ledger_option(*, help: str, required: bool = False, exists: bool = False) -> Decorator[Any]:
    """`--ledger`: the JSON-lines ledger of committed changes that `devcluster traffic` writes."""
    kind = click.Path(dir_okay=False, exists=True, path_type=Path) if exists else FILE
    return click.option("--ledger", type=kind, default=None, required=required, help=help)
