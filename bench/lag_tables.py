"""docs/benchmarks.md's `bench-lag` block (`figures:lag`), rendered from `lag.json`: the lag per
load and sink, the CPU budget of the maximum-rate goal, the probe and the search with the CPU a
row change cost by part of the rig, and every round's batches and Spark phases."""

from __future__ import annotations

import json

from bench.doc_tables import Result, loads, table, triple
from bench.figures import shown
from bench.lag_budget import budget_line


def lag(r: Result) -> str:
    head = (
        f"Shards {', '.join(r['shards'])}; trigger {shown(r['trigger_seconds'])} s; "
        f"{shown(r['seconds_per_load'])} s per load, {r['rounds']} rounds; source options "
        f"{json.dumps(r.get('source_options') or {})}; load average "
        f"{triple(r['load_average_before'])} before, per round (1 min) below.\n\n"
        f"**Maximum sustainable rate** {shown(r['max_rate_rows_per_s'])} rows/s "
        f"({sum(x['sustainable'] for x in r['loads']['100%']['runs'])} of {r['rounds']} rounds at "
        f"it sustainable; goal "
        f"{r['goal_max_rate']['rows_per_s']:,} rows/s with lag p99 under "
        f"{shown(r['goal_max_rate']['lag_p99_s'])} s). The generator alone committed "
        f"{r['loadgen_alone']['rows_per_s']:,} rows/s unthrottled. One shard connection: "
        f"{shown(r['shard_connect_ms']['pymysql_defaults'])} ms with PyMySQL's defaults, "
        f"{shown(r['shard_connect_ms']['ssl_disabled'])} ms with `ssl_disabled=True`."
    )  # fmt: skip
    rows = []
    for load, data in r["loads"].items():
        rate = data["runs"][0]["requested_rows_per_s"]
        for sink, f in data["median"].items():
            rows.append([load, rate, sink, f["p50_s"], f["p99_s"], f["max_s"]])
    lags = table(["load", "rows/s", "sink", "p50 (s)", "p99 (s)", "max (s)"], rows)
    return "\n\n".join([head, lags, budget_line(r), lag_search(r), lag_rounds(r)])


def lag_search(r: Result) -> str:
    """The probe and each rate the search tried: what was committed and delivered, whether it
    was sustainable, and the CPU each row cost, by part of the rig."""
    runs = [("probe (unthrottled)", r["probe"])] + [
        (f"{run['requested_rows_per_s']:,} rows/s", run) for run in r["search"]
    ]
    parts = list(r["probe"]["cpu"]["us_per_row"])
    rows = []
    for label, run in runs:
        cpu = run["cpu"]
        rows.append([
            label, run["committed_rows_per_s"], run["delivered_rows_per_s"],
            "yes" if run["sustainable"] else "no", shown(run["catch_up_s"]),
            cpu["total_us_per_row"], cpu["cores_busy"],
            *(cpu["us_per_row"][part] for part in parts),
        ])  # fmt: skip
    header = ["run", "committed rows/s", "delivered rows/s", "sustainable", "catch-up (s)",
              "CPU µs/row", "cores busy", *(f"{part} µs/row" for part in parts)]  # fmt: skip
    return table(header, rows)


def lag_rounds(r: Result) -> str:
    """Per load and round: the Version Stream's lag, the batches and Spark's phases."""
    rows = []
    for load, data in r["loads"].items():
        for number, run in enumerate(data["runs"], 1):
            vs, parts = run["sinks"]["versionstream"], run["spark_batch_parts_s"]
            rows.append([
                load, number, loads([run["load_average"]]), run["committed_rows_per_s"],
                "yes" if run["sustainable"] else "no",
                f"{shown(vs['p50_s'])} / {shown(vs['p99_s'])}", run["batches_per_s"],
                run["median_batch_rows"], parts["triggerExecution"], parts["addBatch"],
                parts["walCommit"], parts["commitOffsets"], run["shard_connections_per_batch"],
            ])  # fmt: skip
    header = ["load", "round", "load avg", "committed rows/s", "sustainable", "Version Stream "
              "p50 / p99 (s)", "batches/s", "median batch rows", "`triggerExecution` (s)",
              "`addBatch` (s)", "`walCommit` (s)", "`commitOffsets` (s)",
              "shard connections per batch"]  # fmt: skip
    return table(header, rows)
