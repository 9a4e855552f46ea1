"""Memory footprint: the operator with many UpdateStreams, and a job streaming a large transaction.

**Operator.** A real test API server (etcd + kube-apiserver, as the operator tests start it),
the CRDs, RBAC and the operator's ServiceAccount identity. `updatestream operator --launcher
spark-submit` runs as its own process, so each UpdateStream's job is submitted by spark-submit
in cluster mode and becomes a driver Pod that stays Pending (no node runs here), as in the
operator tests; no driver JVM starts. The spark-submit processes (one per launch, ending once
its Pod exists) are the operator's children and are not counted in its RSS. After it is idle,
``--streams`` UpdateStreams are created in one request; the bench waits until every one has its
driver Pod and is Ready, then keeps the operator running for ``--settle-seconds`` (timer folds
every 10 s, the default). The operator's RSS is sampled from /proc every 0.2 s the whole time;
the peak also takes the kernel's own high-water mark (VmHWM).

**Job driver.** One local MariaDB shard, and `updatestream run` (Spark `local[2]`, trigger
0.5 s, one CDCv2 sink) as its own process, started at the shard's current position. Once it
idles, one 100k-row transaction is committed; the bench samples the driver's Python process,
its JVM (which in local mode also runs the executor) and the Python workers every 0.1 s until
the job has delivered the transaction. The Python worker's peak while reading such a
transaction is `make bench-source`'s `source_large_tx_worker_peak_rss_mb`; this run's value is
kept in the result file only.

Both parts run ``--rounds`` times (3); the table gives each figure's median.
Writes `bench/results/footprint.json`, prints a table and merges `operator_rss_mb_100_streams`
(for the default 100 streams), `operator_rss_mb_idle`, `driver_jvm_peak_rss_mb` and
`driver_python_peak_rss_mb` into `bench/results/summary.json`. Run with ``make
bench-footprint`` or ``python -m bench.footprint_bench [--streams N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from updatestream_cli.manifests import update_stream
from updatestream_operator.reconciler.naming import LABEL_ROLE

from bench.report import console, machine, median, print_table, say_load, write_result
from bench.rss import PeakSampler, spark_processes
from bench.source_bench import commit_large_transaction, prepare, with_big_table
from bench.summary import SUMMARY, merge_summary
from harness.kube import ensure_kube_tools, free_port, start_kube_api
from harness.operator import (
    apply,
    keyspace_manifest,
    prepare_operator,
    stream_manifest,
)
from harness.stream_job import CLI

NS = "footprint"
LAUNCHER = "spark-submit"
DRIVER_SELECTOR = f"{LABEL_ROLE}=driver"


def wait_until(check: Callable[[], bool], what: str, timeout: float) -> float:
    """Poll `check` every half second; returns the seconds it took."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)
    return time.monotonic() - began


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Signal the process's own group (it was started in a new session), then wait; kill the
    group if it does not end."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, sig)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def healthz(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_logged(
    command: list[str], log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `command` in a session of its own (so `stop_process` ends its whole group), its
    output appended to `log_path`."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
            start_new_session=True,
        )  # fmt: skip


def _start_operator(api: Any, root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The operator with the spark-submit launcher against `api`; the process and its health
    URL."""
    kubeconfig = prepare_operator(api, root, NS)
    apply(api, NS, keyspace_manifest("commerce"))
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    command = [
        CLI, "operator", "--namespace", NS, "--launcher", LAUNCHER,
        "--metrics-port", str(free_port()), "--metrics-address", "127.0.0.1",
        "--kubeconfig", str(kubeconfig), "--liveness", liveness,
        "--state-dir", str(root / "state"),
    ]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return start_logged(command, root / "operator.log", env), liveness


def _all_ready(api: Any, streams: int) -> bool:
    """Every UpdateStream is Ready and has its driver Pod."""
    listed = api.kubectl("get", "-n", NS, "updatestreams", "-o", "json")
    ready = sum(
        any(c["type"] == "Ready" and c["status"] == "True"
            for c in (s.get("status") or {}).get("conditions", []))
        for s in json.loads(listed.stdout)["items"]
    )  # fmt: skip
    drivers = api.kubectl("get", "-n", NS, "pods", "-l", DRIVER_SELECTOR, "-o", "name")
    return ready == streams and len(drivers.stdout.split()) == streams


def operator_footprint(root: Path, streams: int, settle: float) -> dict[str, Any]:
    ensure_kube_tools(echo=console.print)
    api = start_kube_api()
    try:
        process, liveness = _start_operator(api, root)
        try:
            operator = psutil.Process(process.pid)
            sampler = PeakSampler(lambda: {"operator": [operator]}, interval=0.2)
            with sampler:
                wait_until(lambda: healthz(liveness), "the operator's health endpoint", 120)
                time.sleep(5)
                idle = sampler.sample()["operator"]
                console.print(f"operator idle: {idle:.0f} MB; creating {streams} UpdateStreams")
                manifests = [stream_manifest(f"stream-{i:03d}", "commerce") for i in range(streams)]
                began = time.monotonic()
                apply(api, NS, {"apiVersion": "v1", "kind": "List", "items": manifests})
                wait_until(
                    lambda: _all_ready(api, streams),
                    f"{streams} Ready streams and driver Pods",
                    1800,  # one spark-submit JVM per stream, on a loaded machine
                )
                reconciled = time.monotonic() - began
                console.print(f"all {streams} streams Ready after {reconciled:.1f}s")
                time.sleep(settle)
                steady = sampler.sample()["operator"]
        finally:
            stop_process(process)
    finally:
        api.stop()
    return {
        "streams": streams,
        "launcher": LAUNCHER,
        "idle_mb": round(idle),
        "peak_mb": round(sampler.largest_mb("operator")),
        "steady_mb": round(steady),
        "reconciled_s": round(reconciled, 1),
        "settle_s": settle,
    }


def _start_job(root: Path, options: dict[str, Any], position: str) -> subprocess.Popen[bytes]:
    """`updatestream run` of the bench keyspace from `position` into CDCv2 files, its progress
    in `root/status.json`."""
    keyspace = root / "keyspace.json"
    keyspace.write_text(with_big_table(options["keyspace"]))
    stream = root / "stream.json"
    start = {"mode": "gtid", "gtid": {"-": position}}
    sinks = [{"type": "cdcv2", "path": str(root / "cdc")}]
    stream.write_text(json.dumps(update_stream("footprint", "bench", start, sinks)))
    command = [
        CLI, "run", "--stream", str(stream), "--keyspace", str(keyspace),
        "--secrets-dir", options["secretsDir"], "--checkpoint", str(root / "checkpoint"),
        "--status-file", str(root / "status.json"), "--trigger-seconds", "0.5",
        "--master", "local[2]",
    ]  # fmt: skip
    return start_logged(command, root / "job.log")


def driver_footprint(root: Path) -> dict[str, Any]:
    server, options, _, _ = prepare(root, 1000)
    try:
        position = server.gtid_position()
        process = _start_job(root, options, position)
        status = root / "status.json"
        try:
            driver = psutil.Process(process.pid)
            sampler = PeakSampler(lambda: spark_processes(driver), interval=0.1)

            def delivered(position: str) -> bool:
                if process.poll() is not None:
                    raise SystemExit(f"the job exited with {process.returncode}; see its log")
                if not status.exists():
                    return False
                shard = json.loads(status.read_text()).get("shards", {}).get("-", {})
                return bool(shard.get("position") == position)

            wait_until(lambda: delivered(position), "the job's first batch", 300)
            with sampler:
                time.sleep(5)
                idle = sampler.sample()
                _, end = commit_large_transaction(server)
                took = wait_until(lambda: delivered(end), "the 100k-row transaction", 600)
                time.sleep(2)
            console.print(f"job delivered the 100k-row transaction in {took:.1f}s")
        finally:
            stop_process(process, signal.SIGINT)
    finally:
        server.stop()
    peaks = sampler.peaks
    return {
        "transaction_rows": 100_000,
        "sink": "cdcv2",
        "delivered_s": round(took, 1),
        "idle_mb": {group: round(mb) for group, mb in idle.items()},
        "peak_mb": {group: round(peak.largest_mb) for group, peak in peaks.items()},
        "python_workers_seen": peaks["python_workers"].processes,
        "python_workers_peak_total_mb": round(peaks["python_workers"].total_mb),
    }


def median_of(runs: list[dict[str, Any]], *path: str) -> int:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value[key]
        values.append(value)
    return round(median(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--settle-seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3, help="report the median round")
    args = parser.parse_args()
    loads = [say_load()]
    operators, drivers = [], []
    for round_no in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="footprint-bench-") as tmp:
            (Path(tmp) / "operator").mkdir()
            (Path(tmp) / "job").mkdir()
            operators.append(
                operator_footprint(Path(tmp) / "operator", args.streams, args.settle_seconds)
            )
            loads.append(say_load())
            drivers.append(driver_footprint(Path(tmp) / "job"))
            loads.append(say_load())
        console.print(f"round {round_no + 1}: {operators[-1]} {drivers[-1]}")
    operator = {key: median_of(operators, key) for key in ("idle_mb", "peak_mb", "steady_mb")}
    groups = ("driver_jvm", "driver_python", "python_workers")
    idle = {group: median_of(drivers, "idle_mb", group) for group in groups}
    peak = {group: median_of(drivers, "peak_mb", group) for group in groups}
    summary = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else {}
    worker = summary.get("source_large_tx_worker_peak_rss_mb")
    print_table(
        f"Peak RSS (MB), median of {args.rounds} rounds",
        ["process", "idle", "peak"],
        [
            [f"operator, {args.streams} UpdateStreams ({LAUNCHER} launcher)",
             operator["idle_mb"], operator["peak_mb"]],
            ["job driver JVM (local[2]), streaming a 100k-row transaction",
             idle["driver_jvm"], peak["driver_jvm"]],
            ["job driver Python, same", idle["driver_python"], peak["driver_python"]],
            ["largest Python worker, same", idle["python_workers"], peak["python_workers"]],
            ["Python worker, 100k-row read (make bench-source)", None, worker],
        ],
    )  # fmt: skip
    write_result(
        "footprint",
        {
            "machine": machine(),
            "load_averages": loads,
            "rounds": args.rounds,
            "operator": {"median": operator, "runs": operators},
            "driver": {"median": {"idle_mb": idle, "peak_mb": peak}, "runs": drivers},
        },
    )
    figures: dict[str, Any] = {
        "machine": machine(),
        "operator_rss_mb_idle": operator["idle_mb"],
        "driver_jvm_peak_rss_mb": peak["driver_jvm"],
        "driver_python_peak_rss_mb": peak["driver_python"],
    }
    figures[f"operator_rss_mb_{args.streams}_streams"] = operator["peak_mb"]
    merge_summary(figures)


if __name__ == "__main__":
    main()
