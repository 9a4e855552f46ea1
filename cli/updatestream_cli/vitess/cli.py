"""`updatestream vitess ...`: a local Vitess v24 cluster and real Reshard workflows."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from updatestream.clickopts import json_option, seconds_option
from updatestream_cli.tool_options import directory_option, ledger_option
from updatestream_cli.vitess.cluster import DEFAULT_DIR, DEFAULT_KEYSPACE, VitessCluster
from updatestream_cli.vitess.cluster_status import cluster_status
from updatestream_cli.vitess.reshard import StreamStatus, VitessReshard, plan_reshard

console = Console(stderr=True)
out = Console()

_dir_option = directory_option(DEFAULT_DIR, "Cluster directory (manifest, secrets, state, data).")


def _running_cluster(directory: Path) -> VitessCluster:
    """The cluster `vitess up` made in `directory`; a usage error when there is none."""
    cluster = VitessCluster(directory)
    if not cluster.exists():
        raise click.ClickException(
            f"no Vitess cluster in {cluster.dir}; run `updatestream vitess up`"
        )
    return cluster


@click.group("vitess")
def vitess() -> None:
    """A local Vitess v24 cluster on MySQL 8 (etcd, vtctld, vtgate, tablets) and Reshard."""


@vitess.command()
@click.option("--shards", default=None, help="Serving shards of a new cluster [default: -80,80-].")
@click.option("--keyspace", default=DEFAULT_KEYSPACE, show_default=True)
@_dir_option
def up(shards: str | None, keyspace: str, directory: Path) -> None:
    """Start the cluster (or restart a stopped one) and write the Keyspace manifest."""
    cluster = VitessCluster(directory, keyspace)
    began = time.monotonic()
    with console.status("starting etcd, vtctld, tablets and vtgate..."):
        cluster.up(shards)
    phases = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in cluster.timings.items())
    console.print(f"up in {time.monotonic() - began:.1f}s ({phases})", highlight=False)
    _print_status(cluster_status(cluster))


@vitess.command()
@click.option("--purge", is_flag=True, help="Also delete the cluster directory.")
@_dir_option
def down(purge: bool, directory: Path) -> None:
    """Stop every process this directory started, by recorded pid."""
    cluster = VitessCluster(directory)
    stopped = cluster.down(purge=purge)
    console.print(f"stopped {', '.join(stopped) if stopped else 'nothing'}")
    if purge:
        console.print(f"removed {cluster.dir}")


@vitess.command()
@json_option("Print JSON instead of a table.")
@_dir_option
def status(as_json: bool, directory: Path) -> None:
    """Processes, vtgate's address, and each tablet's mysqld, GTID set and binlogs."""
    cluster = _running_cluster(directory)
    report = cluster_status(cluster)
    if as_json:
        out.print_json(json.dumps(report))
    else:
        _print_status(report)


def _print_status(report: dict[str, Any]) -> None:
    vtgate = report["vtgate"]
    out.print(
        f"keyspace [bold]{report['keyspace']}[/]  serving: {','.join(report['serving_shards'])}"
        f"  vtgate: {vtgate['mysql']} ({'running' if vtgate['running'] else 'stopped'})"
        f"  manifest: {report['manifest']}",
        highlight=False,
    )
    table = Table("tablet", "shard", "mysqld", "vttablet", "GTID set", "binlogs")
    for tablet in report["tablets"]:
        binlogs = tablet.get("binlog_files", [])
        table.add_row(
            tablet["alias"],
            tablet["shard"],
            tablet["mysql"] + ("" if tablet["mysqld_running"] else " (stopped)"),
            "running" if tablet["vttablet_running"] else "stopped",
            tablet.get("gtid_executed", "-") or "(empty)",
            f"{len(binlogs)} ({binlogs[-1]['name']})" if binlogs else "-",
        )
    out.print(table)
    if report.get("workflows"):
        out.print(f"workflows: {', '.join(report['workflows'])}")


class _Progress:
    """Prints phases, and the streams' state at most every five seconds."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.last = 0.0

    def _stamp(self) -> str:
        return f"[{time.monotonic() - self.began:6.1f}s]"

    def phase(self, name: str, detail: str) -> None:
        console.print(f"{self._stamp()} {name}: {detail}", highlight=False)

    def streams(self, streams: Sequence[StreamStatus]) -> None:
        now = time.monotonic()
        if now - self.last < 5.0:
            return
        self.last = now
        for stream in streams:
            console.print(f"{self._stamp()}   {stream.describe()}", highlight=False)


@vitess.command()
@click.option("--from", "sources", required=True, help="Source shards, e.g. -80.")
@click.option("--to", "targets", required=True, help="Target shards, e.g. -40,40-80.")
@click.option("--workflow", default=None, help="Workflow name [default: from the shards].")
@click.option(
    "--no-complete",
    is_flag=True,
    help="Stop after SwitchTraffic: keep the source shards and reverse replication.",
)
@click.option(
    "--max-lag", default=10.0, show_default=True, help="Seconds of lag allowed before switching."
)
@_dir_option
def reshard(
    sources: str,
    targets: str,
    workflow: str | None,
    no_complete: bool,
    max_lag: float,
    directory: Path,
) -> None:
    """Split or merge shards with a real Vitess Reshard (rerun the same command to resume)."""
    cluster = _running_cluster(directory)
    plan = plan_reshard(cluster.serving_shards_recorded(), sources, targets, workflow)
    progress = _Progress()
    runner = VitessReshard(cluster, plan, progress, max_lag_seconds=max_lag)
    runner.run(complete=not no_complete)
    phases = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in runner.timings.items())
    console.print(f"{plan.kind} {plan.workflow} done ({phases})", highlight=False)


@vitess.command()
@click.option("--rate", type=float, default=100.0, show_default=True, help="Row changes/second.")
@seconds_option("--duration", help="Seconds to run [default: until Ctrl-C].")
@ledger_option(help="JSON-lines ledger of committed changes.")
@click.option("--seed", type=int, default=None)
@click.option("--preload", type=int, default=0, help="First insert this many rows in batches.")
@_dir_option
def traffic(
    rate: float,
    duration: float | None,
    ledger: Path | None,
    seed: int | None,
    preload: int,
    directory: Path,
) -> None:
    """Write the sample traffic through vtgate, with the development cluster's ledger."""
    from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
    from updatestream_cli.vitess.gateway import VtgateGateway

    cluster = _running_cluster(directory)
    gateway = VtgateGateway(
        "127.0.0.1", cluster.vtgate.mysql_port, cluster.manifest_path, cluster.secrets_dir
    )
    options = TrafficOptions(rate=rate, duration=duration, seed=seed)
    gen = TrafficGenerator(
        cluster.manifest_path, cluster.secrets_dir, ledger, options, gateway=gateway
    )
    signal.signal(signal.SIGTERM, lambda *_: gen._stop.set())
    began = time.monotonic()
    try:
        adopted = gen.adopt_existing_rows()
        console.print(
            f"writing through vtgate 127.0.0.1:{cluster.vtgate.mysql_port}; {adopted} rows known"
        )
        if preload:
            gen.preload(preload)
        gen.run()
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        gen.close()
        gateway.close()
    stats = gen.stats
    console.print(
        f"committed {stats.transactions} transactions, {stats.rows} row changes ({stats.by_op}) "
        f"in {time.monotonic() - began:.1f}s; per shard {stats.by_shard}"
        + (f"; ledger {ledger}" if ledger else ""),
        highlight=False,
    )
