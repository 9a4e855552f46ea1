"""`updatestream demo`: run the demo (see `run.py`) with live progress, then its verdict."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from updatestream.clickopts import json_option, seconds_option
from updatestream.core.errors import UpdateStreamError
from updatestream_cli.demo.engines import ENGINES, Engine
from updatestream_cli.devcluster.local_server import FLAVORS, ServerFlavor
from updatestream_cli.tool_options import directory_option

DEFAULT_DIR = Path(".updatestream") / "demo"
CHECKS = (
    "committed",
    "delivered",
    "lost",
    "duplicates_delivered",
    "duplicates_dropped",
    "out_of_order_keys",
    "stale_keys",
    "progress_violations",
    "source_rows",
    "mirror_rows",
    "missing",
    "extra",
    "different",
)


class RichReporter:
    """One progress row per step: a spinner and live figures while it runs, a tick after."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: TaskID | None = None

    def begin(self, text: str) -> None:
        if self.task is not None:
            self.end(self.progress.tasks[-1].description)
        self.task = self.progress.add_task(text, total=1)

    def update(self, text: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=text)

    def end(self, text: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=text, completed=1)
            self.task = None

    def line(self, text: str) -> None:
        self.progress.console.print(f"  {text}", highlight=False, markup=False)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _print_result(console: Console, result: Any, directory: Path) -> None:
    table = Table(
        title="updatestream verify: the ledger against each sink, the mirror against the shards"
    )
    table.add_column("check")
    for sink in result.sinks:
        table.add_column(sink, justify="right")
    for check in CHECKS:
        table.add_row(check, *(_cell(report.get(check)) for report in result.sinks.values()))
    table.add_row(
        "verdict",
        *(
            "[green]clean[/]" if code == 0 else "[red]FAILED[/]"
            for code in result.exit_codes.values()
        ),
    )
    console.print(table)
    hops = Table(title="hops")
    for column in ("from", "to", "duration (s)", "duplicates dropped"):
        hops.add_column(column, justify="right" if column[0] == "d" else "left")
    for hop in result.hops:
        hops.add_row(
            ",".join(hop["from"]),
            ",".join(hop["to"]),
            f"{hop['duration_s']:.2f}" if hop["duration_s"] is not None else "-",
            _cell(hop["duplicates_dropped"]),
        )
    console.print(hops)
    console.print(
        f"{result.rows:,} row changes committed, {result.events:,} change events delivered, "
        f"{result.elapsed_s:.0f}s in all; files in {directory}",
        highlight=False,
    )
    if result.ok:
        console.print(
            "[green]OK[/]: every sink holds every change once, nothing is stale, and the "
            "mirror equals the shards"
        )
    else:
        console.print(
            "[red]FAILED[/]: see lost / duplicates_delivered / stale_keys / "
            "progress_violations above"
        )


def _shard_flavor(engine: Engine, flavor: ServerFlavor | None) -> ServerFlavor:
    if engine != "vitess":
        return flavor or "mariadb"
    if flavor == "mariadb":
        raise click.BadParameter(
            "Vitess v24 serves its shards on MySQL 8 only: drop --flavor or give --flavor mysql "
            "(the Version Stream's server can still be MariaDB: --sink-flavor mariadb)",
            param_hint="--flavor",
        )
    return "mysql"


@click.command("demo")
@directory_option(
    DEFAULT_DIR, "Where the demo keeps its servers, job, ledger and sink files (emptied first)."
)
@click.option(
    "--rate", type=click.FloatRange(min=1), default=200.0, show_default=True,
    help="Traffic: row changes per second.",
)  # fmt: skip
@seconds_option(
    "--seconds", default=30.0, minimum=1,
    help="Traffic: how long it runs (at least until a few seconds after the hop).",
)  # fmt: skip
@seconds_option(
    "--split-after", default=8.0, minimum=0,
    help="Seconds of traffic before the live split of -80 starts.",
)  # fmt: skip
@click.option("--seed", type=int, default=None, help="Seed of the traffic generator.")
@click.option(
    "--engine", type=click.Choice(ENGINES), default="devcluster", show_default=True,
    help="The keyspace: the development cluster, or a real local Vitess v24 (needs `make "
    "vitess-tools`; traffic through vtgate, split by Vitess's Reshard).",
)  # fmt: skip
@click.option(
    "--flavor", type=click.Choice(FLAVORS), default=None,
    help="The shards' server: MariaDB 10.11 or MySQL 8.0 [default: mariadb; with --engine "
    "vitess, mysql only].",
)  # fmt: skip
@click.option(
    "--sink-flavor", type=click.Choice(FLAVORS), default=None,
    help="The Version Stream's and the mirror's server (default: the shards' flavor).",
)  # fmt: skip
@click.option("--keep", is_flag=True, help="Leave everything running at the end.")
@json_option("Print one JSON object at the end.")
@click.option("--down", is_flag=True, help="Only stop what a demo run with --keep left running.")
def demo(
    directory: Path,
    rate: float,
    seconds: float,
    split_after: float,
    seed: int | None,
    engine: Engine,
    flavor: ServerFlavor | None,
    sink_flavor: ServerFlavor | None,
    keep: bool,
    as_json: bool,
    down: bool,
) -> None:
    """Local MariaDB or MySQL 8 shards (or a local Vitess), memcached and a Version Stream
    server; live traffic with a ledger; one UpdateStream into all four sinks, launched by the
    operator's local launcher; a live split of -80 and the hop inside the running job; then the
    verifier on every sink.

    Exits 1 when a verifier finds a lost change, a delivered duplicate or a stale cache entry.
    """
    from updatestream_cli.demo.run import Demo, DemoOptions
    from updatestream_cli.demo.servers import stop_recorded

    console = Console(stderr=as_json)
    if down:
        stopped = stop_recorded(directory)
        console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
        return
    options = DemoOptions(
        directory=directory, rate=rate, seconds=seconds, split_after=split_after, keep=keep,
        seed=seed, flavor=_shard_flavor(engine, flavor), sink_flavor=sink_flavor, engine=engine,
    )  # fmt: skip
    columns = (
        SpinnerColumn(finished_text="[green]✓[/]"),
        TextColumn("{task.description}", table_column=Column(overflow="fold")),
        TimeElapsedColumn(table_column=Column(min_width=7, no_wrap=True)),
    )
    try:
        with Progress(*columns, console=console) as progress:
            result = Demo(options, RichReporter(progress)).run()
    except UpdateStreamError as exc:
        if as_json:
            click.echo(json.dumps({"error": str(exc)}))
        raise
    if as_json:
        click.echo(json.dumps(result.to_json()))
    else:
        _print_result(console, result, directory.absolute())
    if keep:
        console.print(
            f"left running (the job's metrics: {result.metrics_url}); stop it all with "
            f"`updatestream demo --down --dir {directory}`",
            highlight=False,
        )
    if not result.ok:
        sys.exit(1)
