"""The streaming job's ceiling and its end-to-end lag per sink, on a 2-shard cluster.

The rig (`bench.lag_rig`): two `mariadbd` shards (`-80,80-`), the C load generator
(`bench/loadgen`, the sample keyspace's traffic, a ledger with each change's commit clock), and
the job (`Job`, Spark `local[2]`, trigger ``--trigger-seconds``, default 0.1 s) reading both
shards into four sinks, written at the same time: Version Stream and mirror (one `mariadbd` with
durable commits; the mirror from the executors, `writeFrom: executors`), memcached, CDCv2. A
change's lag at a sink is when that sink's write returned for its batch minus its commit time in
the ledger.

1. The generator alone, unthrottled, before the job starts (``--rounds`` runs of 10 s); then
   the last run's binlog on one shard decoded alone by the source's reader (`bench.lag_decode`).
2. A probe: unthrottled traffic for ``--probe-seconds`` with the job streaming. Its rows over
   the time from the first commit to the last sink write is the job's throughput with the
   generator at full speed beside it; the rows committed per second are the generator's rate
   beside the job.
3. The search for the highest sustainable rate: fixed-rate loads of ``--duration`` seconds,
   starting at the probe's throughput, up by 25% while sustainable, down by 20% until it is,
   then one step halfway. A rate is sustainable when the generator committed at least 90% of
   it, the mirror's lag did not grow over the load (the p50 of the changes committed in its last
   third within 1 s of the first third's) and the last change reached every sink within 5 s of
   its commit.
4. ``--rounds`` rounds at that rate and at each of ``--loads`` (fractions of it): per sink the
   median over rounds of lag p50, p99 and max, with the load average after each run.

Writes `bench/results/lag.json` and merges `max_rate_rows_per_s`, `max_rate_lag_p50_s`,
`max_rate_lag_p99_s` (mirror, every sink written), `lag_p50_s`, `lag_p99_s`, `lag_max_s` (50%
load, Version Stream), `loadgen_rows_per_s`, `loadgen_beside_job_rows_per_s` and
`lag_trigger_s` into `bench/results/summary.json`. Run with ``make bench-lag``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from updatestream_cli.devcluster.ledger import LedgerEntry
from updatestream_jobs.sinks.cdcv2_sink import stream_directory
from updatestream_jobs.sinks.sink import BatchContext

from bench.lag_decode import decode_alone
from bench.lag_rig import (
    SHARDS,
    SINK_LABELS,
    STREAM,
    Rig,
    connect_ms,
    connections_per_batch,
    cpu_per_row,
    cpu_seconds,
    spark_durations,
)
from bench.lagtools import BatchRecord, TimedSink, cdcv2_complete_times, event_lags, summarize
from bench.report import (
    console,
    load_average,
    machine,
    median,
    print_table,
    say_load,
    write_result,
)
from bench.summary import merge_summary

TAIL_SECONDS = 3.0  # left out of "cdcv2 complete" at the end of each load
GROWTH_S = 1.0  # a sustainable load's lag grows by less than this from its first third to its last
CATCH_UP_S = 5.0  # and its last change reaches every sink within this of its commit


def lags_of(rig: Rig, ledger: list[LedgerEntry]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label, sink in zip(SINK_LABELS, rig.sinks, strict=True):
        out[label] = summarize(*event_lags(ledger, sink.delivered_at())).as_dict()
    cdcv2 = rig.sinks[SINK_LABELS.index("cdcv2")]
    directory = stream_directory(rig.cdc, BatchContext(STREAM, "-", 0))
    end = max(e.commit_time for e in ledger) - TAIL_SECONDS
    steady = [e for e in ledger if e.commit_time <= end]
    out["cdcv2 complete"] = summarize(
        *event_lags(steady, cdcv2_complete_times(directory, cdcv2))
    ).as_dict()
    return out


def batch_figures(rig: Rig, since: float, until: float) -> dict[str, Any]:
    """Batches started in [since, until]: how many per second, their median duration in the
    driver (the first sink's call to the last sink's return), and per sink the median time to
    take the batch's events and to write them."""

    def window(sink: TimedSink) -> list[BatchRecord]:
        return [b for b in sink.batches if since <= b.started_at <= until]

    ends = {b.batch_id: b.completed_at for b in rig.sinks[-1].batches}
    spans = [ends[b.batch_id] - b.started_at for b in window(rig.sinks[0]) if b.batch_id in ends]
    rows = [sum(b.transactions.values()) for b in window(rig.sinks[0])]
    sinks = {
        label: {
            "take_s": round(median([b.read_at - b.started_at for b in window(sink)] or [0]), 3),
            "write_s": round(median([b.completed_at - b.read_at for b in window(sink)] or [0]), 3),
        }
        for label, sink in zip(SINK_LABELS, rig.sinks, strict=True)
    }
    return {
        "batches_per_s": round(len(spans) / max(until - since, 1e-9), 2),
        "median_batch_s": round(median(spans), 3) if spans else 0.0,
        "median_batch_rows": median(rows) if rows else 0,
        "median_sink_s": sinks,
    }


def growth_s(rig: Rig, ledger: list[LedgerEntry]) -> float:
    """How much the last sink's lag grew over the load: the p50 of the changes committed in the
    last third minus that of the first third (seconds)."""
    delivered = rig.sinks[-1].delivered_at()
    first = min(e.commit_time for e in ledger)
    span = max(e.commit_time for e in ledger) - first

    def p50(low: float, high: float) -> float:
        lags = [delivered[(e.shard, e.gtid)] - e.commit_time for e in ledger
                if low <= e.commit_time - first <= high]  # fmt: skip
        return float(np.percentile(lags, 50)) if lags else 0.0

    return round(p50(2 * span / 3, span) - p50(0, span / 3), 3)


def run_load(rig: Rig, rate: float, duration: float) -> dict[str, Any]:
    """One load at `rate` (0: unthrottled): the generator's figures, the job's throughput,
    whether it was sustainable, the lag per sink, the batches and the load average."""
    began, opened, cpu_before = time.time(), rig.connections(), cpu_seconds(rig)
    load = rig.traffic(rate, duration)
    ledger = load.ledger
    last_write = rig.wait_delivered(ledger)
    first, last = load.figures.first_commit, load.figures.last_commit
    cpu = cpu_per_row(cpu_before, cpu_seconds(rig), load.figures.cpu_s, len(ledger),
                      time.time() - began)  # fmt: skip
    run: dict[str, Any] = {
        "requested_rows_per_s": round(rate),
        "rows": len(ledger),
        "committed_rows_per_s": round(load.figures.committed_rows_per_s),
        "delivered_rows_per_s": round(len(ledger) / (last_write - first)),
        "catch_up_s": round(last_write - last, 2),
        "lag_growth_s": growth_s(rig, ledger),
        "load_average": load_average(),
        "shard_connections_per_batch": connections_per_batch(
            rig, rig.connections() - opened, began
        ),
        **batch_figures(rig, first, last),
        "spark_batch_parts_s": spark_durations(rig.job.query, first, last),
        "cpu": cpu,
        "sinks": lags_of(rig, ledger),
    }
    run["sustainable"] = (
        rate > 0
        and run["committed_rows_per_s"] >= 0.9 * rate
        and run["lag_growth_s"] < GROWTH_S
        and run["catch_up_s"] < CATCH_UP_S
    )
    last_sink = run["sinks"][SINK_LABELS[-1]]
    console.print(
        f"  {rate:,.0f} rows/s requested: committed {run['committed_rows_per_s']:,}, delivered "
        f"{run['delivered_rows_per_s']:,}, lag p50 {last_sink['p50_s']}s p99 "
        f"{last_sink['p99_s']}s, growth {run['lag_growth_s']}s, catch-up {run['catch_up_s']}s"
        f" -> {'sustainable' if run['sustainable'] else 'not sustainable'}"
        f" (load {run['load_average'][0]}; CPU {cpu['total_us_per_row']} µs/row,"
        f" {cpu['cores_busy']} cores busy)"
    )
    return run


def two_figures(rate: float) -> float:
    """A rate rounded to two significant figures (1,234 -> 1,200; 87 -> 87)."""
    return float(f"{max(rate, 0.0):.2g}")


def find_max_rate(rig: Rig, start: float, duration: float) -> tuple[float, list[dict[str, Any]]]:
    """The highest sustainable rate, by steps from `start` (see the module docstring)."""
    steps: list[dict[str, Any]] = []

    def ok(rate: float) -> bool:
        steps.append(run_load(rig, rate, duration))
        return bool(steps[-1]["sustainable"])

    rate = two_figures(start)
    good, bad = 0.0, float("inf")
    if ok(rate):
        good = rate
        for _ in range(4):
            rate = two_figures(rate * 1.25)
            if not ok(rate):
                bad = rate
                break
            good = rate
    else:
        bad = rate
        for _ in range(6):
            rate = two_figures(rate * 0.8)
            if ok(rate):
                good = rate
                break
            bad = rate
    middle = two_figures((good + bad) / 2) if good and bad != float("inf") else 0.0
    if good < middle < bad and ok(middle):
        good = middle
    return good, steps


def loadgen_alone(rig: Rig, rounds: int) -> dict[str, Any]:
    runs = []
    for _ in range(rounds):
        positions = rig.positions()
        before, began = cpu_seconds(rig), time.time()
        load = rig.traffic(0, 10)
        cpu = cpu_per_row(before, cpu_seconds(rig), load.figures.cpu_s, load.figures.rows,
                          time.time() - began)  # fmt: skip
        runs.append({"rows_per_s": round(load.figures.committed_rows_per_s), "cpu": cpu,
                     "load_average": load_average()})  # fmt: skip
    console.print(f"load generator alone, unthrottled: {[r['rows_per_s'] for r in runs]} rows/s")
    shard = SHARDS[0]  # the last run's traffic on one shard, decoded alone
    decoded = decode_alone(rig, shard, positions[shard], rig.positions()[shard], rounds)
    console.print(f"its binlog on {shard} decoded alone: {decoded['us_per_row']} µs CPU per row")
    return {"rows_per_s": round(median(r["rows_per_s"] for r in runs)), "runs": runs,
            "decode_alone": decoded}  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per load")
    parser.add_argument("--rounds", type=int, default=3, help="rounds at each measured rate")
    parser.add_argument("--probe-seconds", type=float, default=20.0, help="unthrottled probe")
    parser.add_argument("--loads", default="0.5", help="fractions of the max rate, measured too")
    parser.add_argument("--connections", type=int, default=4, help="generator writers per shard")
    parser.add_argument("--trigger-seconds", type=float, default=0.1)
    parser.add_argument(
        "--source-option", type=lambda text: tuple(text.split("=", 1)), action="append",
        default=[], metavar="NAME=VALUE", help="a source option of the job, e.g. tail=false",
    )  # fmt: skip
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    result: dict[str, Any] = {"machine": machine(), "load_average_before": say_load()}
    fractions = [1.0, *(float(f) for f in args.loads.split(",") if f)]
    with tempfile.TemporaryDirectory(prefix="lag-bench-") as tmp:
        rig = Rig(Path(tmp), args.trigger_seconds, dict(args.source_option), args.connections)
        try:
            result["loadgen_alone"] = loadgen_alone(rig, args.rounds)
            console.print("the job, and a warm-up: 10s at 200 rows/s")
            rig.start_warm()
            result["shard_connect_ms"] = connect_ms(rig)
            console.print(
                f"probe: unthrottled traffic for {args.probe_seconds:.0f}s beside the job"
            )
            result["probe"] = run_load(rig, 0, args.probe_seconds)
            console.print("search for the highest sustainable rate")
            max_rate, steps = find_max_rate(
                rig, result["probe"]["delivered_rows_per_s"], args.duration
            )
            result["search"] = steps
            result["loads"] = measure_loads(rig, max_rate, fractions, args)
        finally:
            rig.close()
    result["load_average_after"] = say_load()
    report(args, max_rate, result)


def measure_loads(
    rig: Rig, max_rate: float, fractions: list[float], args: argparse.Namespace
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {f"{round(f * 100)}%": [] for f in fractions}
    for round_no in range(args.rounds):
        for fraction in fractions:
            console.print(f"round {round_no + 1}, {fraction:.0%} of {max_rate:,.0f} rows/s")
            runs[f"{round(fraction * 100)}%"].append(
                run_load(rig, fraction * max_rate, args.duration)
            )
    return {name: {"runs": r, "median": medians(r)} for name, r in runs.items()}


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for sink in runs[0]["sinks"]:
        out[sink] = {}
        for key in ("p50_s", "p99_s", "max_s"):
            values = [r["sinks"][sink][key] for r in runs if r["sinks"][sink][key] is not None]
            out[sink][key] = round(median(values), 3) if values else None
    return out


def report(args: argparse.Namespace, max_rate: float, result: dict[str, Any]) -> None:
    loads = result["loads"]
    at_max = loads["100%"]["median"][SINK_LABELS[-1]]
    half = loads.get("50%", loads["100%"])["median"]["versionstream"]
    rows = [
        [name, data["runs"][0]["requested_rows_per_s"], sink, f["p50_s"], f["p99_s"], f["max_s"]]
        for name, data in loads.items()
        for sink, f in data["median"].items()
    ]
    print_table(
        f"End-to-end lag (s), median of {args.rounds} rounds of {args.duration:.0f}s, trigger "
        f"{args.trigger_seconds}s; max sustainable rate {max_rate:,.0f} rows/s",
        ["load", "rows/s", "sink", "p50", "p99", "max"],
        rows,
    )
    last_sink = SINK_LABELS[-1]
    under_1s = [
        r["requested_rows_per_s"]
        for r in result["search"]
        if r["sustainable"] and (r["sinks"][last_sink]["p99_s"] or 99) < 1.0
    ]
    result |= {
        "trigger_seconds": args.trigger_seconds,
        "source_options": dict(args.source_option),
        "seconds_per_load": args.duration,
        "rounds": args.rounds,
        "shards": list(SHARDS),
        "sink_order": list(SINK_LABELS),
        "max_rate_rows_per_s": max_rate,
        # the highest rate the search found sustainable with every sink's lag p99 under 1 s
        "max_rate_p99_under_1s_rows_per_s": max(under_1s, default=0),
        "goal_max_rate": {
            "rows_per_s": 10_000,
            "lag_p99_s": 1.0,
            "met": max_rate >= 10_000 and (at_max["p99_s"] or 99) < 1.0,
        },
    }
    write_result("lag", result)
    merge_summary(
        {
            "machine": machine(),
            "max_rate_rows_per_s": max_rate,
            "max_rate_lag_p50_s": at_max["p50_s"],
            "max_rate_lag_p99_s": at_max["p99_s"],
            "lag_p50_s": half["p50_s"],
            "lag_p99_s": half["p99_s"],
            "lag_max_s": half["max_s"],
            "lag_trigger_s": args.trigger_seconds,
            "loadgen_rows_per_s": result["loadgen_alone"]["rows_per_s"],
            "loadgen_beside_job_rows_per_s": result["probe"]["committed_rows_per_s"],
        }
    )


if __name__ == "__main__":
    main()
