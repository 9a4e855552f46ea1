"""Our stream beside a plain VStream client and Debezium's Vitess connector, on real Vitess v24.

One local Vitess (etcd, vtctld, vtgate, one primary tablet on MySQL 8.0 per shard, `-80,80-`),
traffic through vtgate with a ledger, and three readers of the keyspace attached to the same
reshards in one run:

- **ours**: the UpdateStream job (`updatestream run`, Spark local mode) into memcached, a Version
  Stream, CDCv2 files and a mirror, exactly as `tests/vitess/test_stream_reshard.py` runs it
  (`harness.vitess_stream`), checked by `updatestream verify`;
- **vstream**: `vstream-client` (`make vitess-tools`), saving its VGTID after each transaction;
- **debezium**: Debezium's Vitess connector 3.5.0 on its embedded engine (`make
  debezium-vitess-peer`), offsets in a file.

After a warm-up, three cases (`bench.vitess_cases`), each a split `-80 -> -40,40-80` and a merge
back under traffic: (a) running through SwitchTraffic; (b) stopped before SwitchTraffic,
started after; (c) stopped, SwitchTraffic, `Reshard complete`, started. Per reader and case:
each start resumed or failed (its error), changes lost and duplicates delivered against the
ledger. Then lag at one fixed rate through vtgate, all three at once (`bench.vitess_lag`).
Writes `bench/results/vitess_peers.json`. Run with ``make bench-vitess-peers``.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.vitess import runtime
from updatestream_cli.vitess.cluster import VitessCluster

from bench import vitess_lag
from bench.report import console, load_average, machine, print_table, say_load, write_result
from bench.vitess_cases import CASES, OURS, Cases, Peer, wait_until
from bench.vitess_readers import DEBEZIUM_VITESS, DebeziumVitessReader, VStreamReader
from harness.accounts import ALL_PRIVILEGES
from harness.vitess_stream import ReshardRun, empty_keyspace, reachable_dir, vitess_stream_job


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--debezium-dir", type=Path, required=True,
                        help="the harness built with the Vitess connector")  # fmt: skip
    parser.add_argument("--rate", type=float, default=120.0,
                        help="row changes/s through vtgate during the cases")  # fmt: skip
    parser.add_argument(
        "--lag-rate", type=float, default=100.0, help="row changes/s of the lag run"
    )
    parser.add_argument("--lag-seconds", type=float, default=60.0)
    parser.add_argument("--trigger-seconds", type=float, default=0.1,
                        help="our job's trigger in the lag run")  # fmt: skip
    parser.add_argument("--skip-lag", action="store_true")
    return parser.parse_args(argv)


def peers_for(cluster: VitessCluster, workdir: Path, debezium_dir: Path) -> list[Peer]:
    workdir.mkdir(parents=True, exist_ok=True)
    vstream = VStreamReader(runtime.vitess_bin_dir() / "vstream-client",
                            cluster.vtgate.grpc_address, cluster.keyspace, workdir)  # fmt: skip
    debezium = DebeziumVitessReader(debezium_dir, "127.0.0.1", cluster.vtgate.grpc_port,
                                    cluster.keyspace, workdir)  # fmt: skip
    return [vstream, debezium]


def start_all(run: ReshardRun, peers: list[Peer]) -> None:
    """Every reader from the current position, then a warm-up each must deliver."""
    run.job.start()
    for peer in peers:
        peer.start()
    run.job.wait_first_batch()
    for peer in peers:
        wait_until(f"{peer.name} streaming", lambda p=peer: p.streaming())
    run.start_traffic(seed=30)
    time.sleep(5)
    run.stop_traffic()
    for peer in peers:
        wait_until(f"{peer.name} warm-up", lambda p=peer: bool(p.deliveries()), 300)


def play_cases(
    cluster: VitessCluster,
    root: Path,
    args: argparse.Namespace,
    sink: tuple[str, int],
    account: tuple[str, str],
    memcached: str,
) -> dict[str, Any]:
    empty_keyspace(cluster)
    (root / "ours").mkdir()
    job = vitess_stream_job(cluster, root / "ours", sink, account, memcached)
    run = ReshardRun(cluster, job, root / "ledger.jsonl", args.rate)
    peers = peers_for(cluster, root / "peers", args.debezium_dir)
    cases = Cases(run, peers)
    error = None
    try:
        start_all(run, peers)
        cases.baseline()
        for seed, name in enumerate(CASES, start=31):
            console.print(f"case {name}: {CASES[name]}")
            try:
                cases.play(name, seed)
            except Exception as exc:  # the cases before it still count; this one is reported
                console.print_exception()
                error = f"case {name} did not finish: {exc}"
                break
            print_case(name, cases.results()[name])
    finally:
        if run.traffic is not None:
            run.stop_traffic()
        job.stop()
        for peer in peers:
            peer.stop()
        if error is None:
            run.restore()  # the lag run reads `-80,80-`; after a failure the cluster is dropped
    return {"cases": cases.results(), "error": error}


def print_case(name: str, case: dict[str, Any]) -> None:
    rows = []
    for reader, r in case["readers"].items():
        starts = "; ".join(s[:160] for s in r["starts"]) or "—"
        rows.append([reader, starts, r["committed"], r["lost"], r["duplicates"],
                     r.get("unmatched", 0)])  # fmt: skip
    header = ["reader", "starts", "committed", "lost", "duplicates", "unmatched"]
    print_table(f"case {name}: {case['what']}", header, rows)


def print_lag(lag: dict[str, Any]) -> None:
    rows = [[reader, r["events"], r["missing"], r["p50_s"], r["p99_s"], r["max_s"]]
            for reader, r in lag["readers"].items()]  # fmt: skip
    print_table(f"lag at {lag['rate_rows_per_s']:g} row changes/s through vtgate, "
                f"{lag['seconds']:g} s", ["reader", "changes", "missing", "p50", "p99", "max"],
                rows)  # fmt: skip
    console.print(f"goal, our p99 <= VStream's p99 + micro-batch cycle: {lag['goal']}")


def bench(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        cluster = VitessCluster(root / "cluster")
        stack.callback(cluster.down, purge=True)
        cluster.up("-80,80-")
        sinks = MariaDBServer(base_dir=root / "sinks", server_id=4343)
        stack.callback(sinks.stop)
        sinks.start()
        account = ("bench", secrets.token_urlsafe(16))
        sinks.create_account(*account, [ALL_PRIVILEGES])
        memcached = MemcachedServer(memory_mb=64).start()
        stack.callback(memcached.stop)
        sink = ("127.0.0.1", int(sinks.port or 0))
        played = play_cases(cluster, root, args, sink, account, memcached.address)
        loads = [load_average()]
        lag = None
        if not args.skip_lag and played["error"] is None:
            peers = peers_for(cluster, root / "lag-peers", args.debezium_dir)
            try:
                lag = vitess_lag.measure(cluster, root, peers, args.lag_rate, args.lag_seconds,
                                         args.trigger_seconds)  # fmt: skip
            except (Exception, SystemExit) as exc:  # the cases' figures are kept and written
                console.print_exception()
                played["error"] = f"the lag run did not finish: {exc}"
            else:
                print_lag(lag)
    return {**played, "lag": lag, "load_average_between": loads[0]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    before = say_load()
    root = reachable_dir("updatestream-vitess-peers-")
    try:
        measured = bench(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    after = say_load()
    result = {
        "machine": machine(),
        "load_average_before": before,
        "load_average_after": after,
        "rate_rows_per_s": args.rate,
        "readers": {
            OURS: "updatestream run, Spark local[2]",
            "vstream": "vstream-client",
            "debezium": DEBEZIUM_VITESS,
        },
        **measured,
    }
    write_result("vitess_peers", result)


if __name__ == "__main__":
    main()
