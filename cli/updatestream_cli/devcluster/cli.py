"""`updatestream devcluster ...`: local shards, traffic with a ledger, resharding."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from updatestream.clickopts import json_option, seconds_option
from updatestream_cli.devcluster.cluster import DEFAULT_DIR, DEFAULT_KEYSPACE, DevCluster
from updatestream_cli.devcluster.cluster_status import cluster_status
from updatestream_cli.devcluster.local_server import FLAVORS, ServerFlavor
from updatestream_cli.tool_options import directory_option, ledger_option

if TYPE_CHECKING:
    from updatestream_cli.devcluster.replay import ReplayWindow
    from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficStats

console = Console(stderr=True)
out = Console()

_dir_option = directory_option(
    DEFAULT_DIR, "Cluster directory (manifest, secrets, state, datadirs)."
)


@click.group("devcluster")
def devcluster() -> None:
    """Local MariaDB or MySQL 8 shards, live traffic with a ledger, and Vitess-style
    resharding."""


@devcluster.command()
@click.option("--shards", default=None, help="Serving shards of a new cluster [default: -80,80-].")
@click.option("--keyspace", default=DEFAULT_KEYSPACE, show_default=True)
@click.option(
    "--flavor",
    type=click.Choice(FLAVORS),
    default=None,
    help="Server of a new cluster's shards: mariadb (MariaDB 10.11) or mysql (MySQL 8.0, "
    "installed by `make mysql`) [default: mariadb; an existing cluster keeps its own].",
)
@click.option(
    "--host",
    "bind_address",
    default=None,
    metavar="ADDR",
    help="IPv4 address of this machine the servers of a new cluster listen on and the "
    "manifest names, like the node bridge's for Pods [default: 127.0.0.1].",
)
@_dir_option
def up(
    shards: str | None,
    keyspace: str,
    flavor: ServerFlavor | None,
    bind_address: str | None,
    directory: Path,
) -> None:
    """Start one server per shard and write the Keyspace manifest (idempotent)."""
    cluster = DevCluster(directory, keyspace, flavor=flavor, bind_address=bind_address)
    with console.status("starting shards..."):
        started = cluster.up(shards)
    if started:
        console.print(f"started shard(s) {', '.join(started)}")
    else:
        console.print("all shards already running; nothing changed")
    _print_status(cluster_status(cluster))


@devcluster.command()
@click.option("--purge", is_flag=True, help="Also delete the cluster directory.")
@_dir_option
def down(purge: bool, directory: Path) -> None:
    """Stop the servers this directory started (by recorded pid)."""
    cluster = DevCluster(directory)
    stopped = cluster.down()
    console.print(f"stopped {', '.join(stopped) if stopped else 'nothing'}")
    if purge:
        import shutil

        shutil.rmtree(cluster.dir, ignore_errors=True)
        console.print(f"removed {cluster.dir}")


@devcluster.command()
@json_option("Print JSON instead of a table.")
@_dir_option
def status(as_json: bool, directory: Path) -> None:
    """Serving shard map, and each shard's address, GTID position and binlog files."""
    report = cluster_status(DevCluster(directory))
    if as_json:
        out.print_json(json.dumps(report))
    else:
        _print_status(report)


def _print_status(report: dict[str, Any]) -> None:
    out.print(
        f"keyspace [bold]{report['keyspace']}[/] ({report['flavor']})  serving: "
        f"{','.join(report['serving_shards'])}  manifest: {report['manifest']}"
    )
    table = Table("shard", "serving", "address", "pid", "read_only", "GTID position", "binlogs")
    for shard in report["shards"]:
        binlogs = shard.get("binlog_files", [])
        table.add_row(
            shard["shard"],
            "yes" if shard["serving"] else "no",
            shard["address"],
            str(shard["pid"] or "-") if shard["running"] else "stopped",
            "yes" if shard.get("read_only") else "no",
            shard.get("gtid_position", "-") or "(empty)",
            f"{len(binlogs)} ({binlogs[-1]['name']})" if binlogs else "-",
        )
    out.print(table)


class _TrafficProgress:
    """Prints the traffic's running figures at most once a second."""

    def __init__(self, began: float) -> None:
        self.began = began
        self.last = 0.0

    def __call__(self, stats: TrafficStats) -> None:
        now = time.monotonic()
        if now - self.last < 1.0:
            return
        self.last = now
        shards = " ".join(f"{k}={v}" for k, v in sorted(stats.by_shard.items()))
        console.print(
            f"[{now - self.began:6.1f}s] tx={stats.transactions} rows={stats.rows} "
            f"frozen-retries={stats.frozen_waits} {shards}",
            highlight=False,
        )


def _start_traffic(gen: TrafficGenerator, preload: int, began: float) -> None:
    with console.status("reading the rows already on the serving shards..."):
        adopted = gen.adopt_existing_rows()
    if adopted:
        console.print(f"found {adopted} existing rows to update and delete")
    if preload:
        with console.status(f"preloading {preload} rows..."):
            gen.preload(preload)
        console.print(f"preloaded {gen.stats.rows} rows in {time.monotonic() - began:.1f}s")


@devcluster.command()
@click.option(
    "--rate",
    type=float,
    default=100.0,
    show_default=True,
    help="Row changes per second (0: unthrottled).",
)
@seconds_option("--duration", help="Seconds to run [default: until Ctrl-C].")
@ledger_option(help="JSON-lines ledger of committed changes.")
@click.option("--seed", type=int, default=None)
@click.option("--preload", type=int, default=0, help="First insert this many rows in batches.")
@click.option("--max-tx-rows", type=int, default=5, show_default=True)
@click.option(
    "--large-tx-rows",
    type=int,
    default=0,
    show_default=True,
    help="Rows of an occasional large transaction (0: none).",
)
@seconds_option("--large-tx-every", default=30.0, help="Seconds between large transactions.")
@_dir_option
def traffic(ledger: Path | None, preload: int, directory: Path, **options: Any) -> None:
    """Write inserts, updates and deletes through the vindex and the serving shard map."""
    from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

    cluster = DevCluster(directory)
    gen = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, ledger, TrafficOptions(**options)
    )
    signal.signal(signal.SIGTERM, lambda *_: gen._stop.set())
    began = time.monotonic()
    try:
        _start_traffic(gen, preload, began)
        gen.run(_TrafficProgress(began))
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        gen.close()
    stats = gen.stats
    elapsed = time.monotonic() - began
    console.print(
        f"committed {stats.transactions} transactions, {stats.rows} row changes "
        f"({stats.by_op}) in {elapsed:.1f}s; per shard {stats.by_shard}; "
        f"retries after a frozen shard: {stats.frozen_waits}"
        + (f"; ledger {ledger}" if ledger else "")
    )


class _RichReporter:
    """Phases as lines, copy progress and replication lag as live progress rows."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.began = time.monotonic()
        self.phase_began = self.began
        self.copy_tasks: dict[tuple[str, str], Any] = {}
        self.lag_task: Any = None

    def phase(self, name: str, detail: str = "") -> None:
        now = time.monotonic()
        self.progress.console.print(
            f"[bold]{name}[/] {detail}  (+{now - self.began:.1f}s)", highlight=False
        )
        self.phase_began = now

    def copied(self, source: str, target: str, rows: int) -> None:
        key = (source, target)
        if key not in self.copy_tasks:
            self.copy_tasks[key] = self.progress.add_task(f"copy {source} -> {target}", total=None)
        self.progress.update(self.copy_tasks[key], completed=rows)

    def lag(self, report: list[dict[str, Any]]) -> None:
        text = "  ".join(
            f"{r['source']}->{r['destination']}: {r['transactions_behind']} tx, "
            f"{r['seconds_behind']:.1f}s behind"
            + (f", {r['replayed']} replayed" if r.get("replayed") else "")
            for r in report
        )
        if self.lag_task is None:
            self.lag_task = self.progress.add_task("", total=None)
        self.progress.update(self.lag_task, description=f"replication lag  {text}")

    def replay(self, window: ReplayWindow) -> None:
        since = window.since if window.oldest_time is None else window.oldest_time
        if window.oldest_time is not None:
            self.progress.console.print(
                f"[yellow]the binlog of {window.source} reaches back only to "
                f"{_clock(window.oldest_time)}, not to {_clock(window.since)}: replaying from "
                f"its oldest position {window.start_pos or '(empty)'}[/]",
                highlight=False,
            )
        self.progress.console.print(
            f"replay {window.source}: {window.transactions} source transactions committed "
            f"since {_clock(since)} ({window.snapshot_time - since}s before the snapshot), "
            f"positions {window.start_pos or '(empty)'} .. {window.snapshot_pos}",
            highlight=False,
        )


def _clock(timestamp: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


@devcluster.command()
@click.option("--from", "sources", required=True, help="Source shards, like -80 or 40-80,80-c0.")
@click.option("--to", "targets", required=True, help="Target shards, like -40,40-80 or 40-c0.")
@click.option("--copy-batch-size", type=int, default=1000, show_default=True)
@seconds_option("--copy-throttle", default=0.0, hidden=True)
@seconds_option(
    "--min-replicate-seconds",
    default=0.0,
    help="Keep filtered replication running at least this long before switching.",
)
@seconds_option("--catchup-seconds", default=2.0)
@seconds_option("--hold-after-freeze", default=0.0, hidden=True)
@seconds_option(
    "--replay-seconds",
    default=0.0,
    help="Start filtered replication this many seconds of source binlog before the copy's "
    "snapshot, so the destination binlogs also cover that window (0: from the snapshot).",
)
@_dir_option
def reshard(sources: str, targets: str, directory: Path, **settings: Any) -> None:
    """Split or merge shards: create, copy, filtered replication, switch reads then writes."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from updatestream_cli.devcluster.reshard import ReshardOptions, ReshardWorkflow, plan_reshard

    options = ReshardOptions(**settings)
    cluster = DevCluster(directory)
    plan = plan_reshard(cluster, sources, targets)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.completed:>9.0f} rows"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        progress.console.print(
            f"reshard {','.join(plan.sources)} -> {','.join(plan.targets)} (workflow {plan.name})"
        )
        workflow = ReshardWorkflow(cluster, plan, options, _RichReporter(progress))
        state = workflow.run()
    for phase, span in state["timings"].items():
        if "start" in span and "end" in span:
            console.print(f"  {phase:<14} {span['end'] - span['start']:8.2f}s", highlight=False)
    console.print(f"serving shards now: {','.join(cluster.keyspace().spec.serving_shards)}")


@devcluster.command()
@click.option("--shards", required=True, help="Non-serving shards to stop and drop, like -80.")
@_dir_option
def retire(shards: str, directory: Path) -> None:
    """Stop old source shards and remove them from the manifest (its history stays)."""
    cluster = DevCluster(directory)
    names = [s.strip() for s in shards.split(",") if s.strip()]
    cluster.retire(names)
    console.print(f"retired {', '.join(names)}")


@devcluster.command("check")
@ledger_option(required=True, exists=True, help="The ledger that `devcluster traffic` wrote.")
@_dir_option
def check(ledger: Path, directory: Path) -> None:
    """Compare a traffic ledger with the serving shards' rows; check every row's shard."""
    from updatestream_cli.devcluster.errors import DevClusterError
    from updatestream_cli.devcluster.verify import check_ledger

    with console.status("reading every row of the serving shards..."):
        result = check_ledger(DevCluster(directory), ledger)
    console.print(
        f"ledger rows alive: {result.ledger_rows}  database rows: {result.database_rows}  "
        f"missing: {len(result.missing)}  unexpected: {len(result.unexpected)}  "
        f"different: {len(result.different)}  on two shards: {len(result.duplicated)}  "
        f"on the wrong shard: {result.misplaced}",
        highlight=False,
    )
    if not result.ok:
        raise DevClusterError(f"the database does not match the ledger {ledger}")
    console.print("OK: the serving shards hold exactly the ledger's rows, each on its shard")
