"""docs/benchmarks.md's block of partitioned Version Streams (`figures:sinks:partitions`),
rendered from the partition runs `bench-sinks` keeps in `sinks.json`: per way of appending,
the rates of every round and the CPU a version cost the clients and `mariadbd`, and what the
goal's speedup would keep busy at those costs."""

from __future__ import annotations

from statistics import median
from typing import Any

from bench.doc_tables import Result, listed, table
from bench.figures import goals_of, shown

(_GOAL,) = goals_of("versionstream_partitioned_speedup")
GOAL_SPEEDUP = float(_GOAL.bound)
WAYS = (
    ("sink_1", "the job's sink, batches of 5,000", 1),
    ("sink_4", "the job's sink, batches of 5,000", 4),
    ("w_1", "8 writers, one version an append", 1),
    ("w_4", "8 writers, one version an append", 4),
)


def cpu_per_version(runs: list[dict[str, Any]], part: str) -> float:
    """Median µs of CPU per version of `part` (`client` or `server`) over the rounds."""
    return float(median(run[f"{part}_cpu_s"] / run["versions"] * 1e6 for run in runs))


def cores_busy(runs: list[dict[str, Any]]) -> float:
    return float(
        median((run["client_cpu_s"] + run["server_cpu_s"]) / run["wall_s"] for run in runs)
    )


def partitions(r: Result) -> str:
    runs = r.get("partition_runs")
    if not runs:
        return "Not measured yet: the partition runs are written by `make bench-sinks`."
    rows = []
    for key, way, count in WAYS:
        rows.append([
            way, count, round(median(run["appends_per_s"] for run in runs[key])),
            listed(run["appends_per_s"] for run in runs[key]),
            round(cpu_per_version(runs[key], "client"), 1),
            round(cpu_per_version(runs[key], "server"), 1), round(cores_busy(runs[key]), 2),
        ])  # fmt: skip
    one = median(run["appends_per_s"] for run in runs["sink_1"])
    cost = cpu_per_version(runs["sink_4"], "client") + cpu_per_version(runs["sink_4"], "server")
    needed = GOAL_SPEEDUP * one * cost / 1e6
    line = (
        f"At {shown(GOAL_SPEEDUP)}x the one stream's median rate, the CPU a version cost with 4 "
        f"partitions (clients and server) would keep {needed:.1f} cores busy."
    )
    header = ["appends", "partitions", "appends/s (median)", "rounds", "client CPU µs/version",
              "server CPU µs/version", "cores busy"]  # fmt: skip
    return table(header, rows) + "\n\n" + line
