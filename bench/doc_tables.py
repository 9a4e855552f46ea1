"""docs/benchmarks.md's figures, rendered from the result files in `bench/results/`.

One function per benchmark turns its `<name>.json` into Markdown: the medians, every round,
the phases and the load averages the run recorded; `history` renders one benchmark's runs
from `history.json`. `bench.readme_figures` puts each between its markers and `make lint`
checks that what is there is what the files say. `bench-lag`'s block and the partitioned
Version Stream block have modules of their own (`bench.lag_tables`, `bench.partition_tables`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.figures import FIGURE, FIGURES, shown

RESULTS = Path(__file__).resolve().parent / "results"

Result = dict[str, Any]


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table; cells that are not text are shown as figures."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        cells = (cell if isinstance(cell, str) else shown(cell) for cell in row)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def listed(values: Iterable[Any], sep: str = " / ") -> str:
    return sep.join(shown(value) for value in values)


def loads(values: Sequence[Sequence[float]] | Sequence[float]) -> str:
    """One-minute load averages, in the order the run took them."""
    ones = [value[0] if isinstance(value, list | tuple) else value for value in values]
    return " → ".join(f"{value:.1f}" for value in ones)


def triple(load: Sequence[float]) -> str:
    """One reading of the 1, 5 and 15 minute load averages."""
    return " / ".join(f"{value:.2f}" for value in load) + " (1, 5, 15 min)"


def read(name: str, results: Path = RESULTS) -> Result:
    result: Result = json.loads((results / f"{name}.json").read_text(encoding="utf-8"))
    return result


def source(r: Result) -> str:
    rows = [[FIGURE[key].what, r[key]] for key in (
        "source_rows_per_s", "source_layer_rows_per_s", "plain_reader_rows_per_s",
        "mariadb_binlog_rows_per_s",
    )]  # fmt: skip
    rows += [
        ["source / plain reader", r["source_vs_plain_ratio"]],
        ["Python worker peak RSS, 100k-row transaction (MB)",
         r["source_large_tx_worker_peak_rss_mb"]],
    ]  # fmt: skip
    head = f"{r['rows']:,} rows, median of {r['rounds']} rounds; load average "
    return (
        head + f"{triple(r['load_average'])} at the start.\n\n" + table(["reader", "rows/s"], rows)
    )


def sinks(r: Result) -> str:
    rows = [
        ["memcached invalidations/s", r["memcached_invalidations_per_s"]],
        ["Version Stream appends/s", r["versionstream_appends_per_s"]],
        ["naive single-row appends/s", r["naive_append_per_s"]],
        ["Version Stream / naive, median of the rounds' ratios", r["versionstream_vs_naive_ratio"]],
    ]  # fmt: skip
    if "memcached_executors_invalidations_per_s" in r:
        rows[1:1] = [
            ["memcached invalidations/s from the executors, 1 core",
             r["memcached_executors_1core_invalidations_per_s"]],
            ["memcached invalidations/s from the executors, 2 cores",
             r["memcached_executors_invalidations_per_s"]],
            ["memcached from the executors, 2 cores over 1, median of the rounds' ratios",
             r["memcached_executors_scaling"]],
        ]  # fmt: skip
    head = (f"{r['events']:,} events ({r['naive']:,} naive appends), median of {r['rounds']} "
            f"rounds; load average {triple(r['load_average'])} at the start")  # fmt: skip
    return head + ".\n\n" + table(["figure", "median"], rows)


def mirror(r: Result) -> str:
    rounds = r["rounds_rows_per_s"]
    rows = [
        ["mirror sink, batches of 10,000", r["mirror_rows_per_s"], listed(rounds["10k"])],
        ["mirror sink, batches of 1,000", r["mirror_rows_per_s_batch_1k"], listed(rounds["1k"])],
        ["one guarded upsert per row, autocommit", r["mirror_naive_rows_per_s"],
         listed(rounds["naive"])],
        ["ratio, batches of 10,000 over per row", r["mirror_vs_naive_ratio"], ""],
    ]  # fmt: skip
    if "mirror_executors_rows_per_s" in r:
        rows += [
            ["from the executors, 1 core, batches of 10,000",
             r["mirror_executors_1core_rows_per_s"], listed(rounds["executors_1"])],
            ["from the executors, 2 cores, batches of 10,000",
             r["mirror_executors_rows_per_s"], listed(rounds["executors_2"])],
            ["ratio, 2 executor cores over 1", r["mirror_executors_scaling"], ""],
        ]  # fmt: skip
    head = (f"{r['rows']:,} inserts then {r['rows']:,} updates, {r['naive']:,} of each per row; "
            f"load average {triple(r['load_average'])} at the start")  # fmt: skip
    return head + ".\n\n" + table(["writer", "rows/s (median)", "rounds"], rows)


def cdcv2(r: Result) -> str:
    rounds = r["rounds_rows_per_s"]
    rows = [
        ["one writer in the driver, events held", r["cdcv2_rows_per_s"], listed(rounds["driver"])],
        [f"from the executors, {r['parts']} parts, 1 core", r["cdcv2_executors_1core_rows_per_s"],
         listed(rounds["executors_1"])],
        [f"from the executors, {r['parts']} parts, 2 cores", r["cdcv2_executors_rows_per_s"],
         listed(rounds["executors_2"])],
        ["ratio, 2 executor cores over 1", r["cdcv2_executors_scaling"], ""],
    ]  # fmt: skip
    head = (f"{r['events'] // 2:,} inserts then as many updates in batches of 10,000, median of "
            f"{r['rounds']} rounds; "
            f"load average {triple(r['load_average'])} at the start")  # fmt: skip
    return head + ".\n\n" + table(["writer", "rows/s (median)", "rounds"], rows)


# the lag table's rows: Debezium twice, the job's durable sinks, its fast lane's invalidations
# and that lane's first phase (the binlog tail read the commit)
PEER_SYSTEMS = ("debezium_default", "debezium_poll10", "job_console", "job_versionstream",
                "job_fastlane", "job_tailed")  # fmt: skip


def peers(r: Result) -> str:
    """MariaDB's section, then MySQL 8's when the run had one."""
    parts = [peers_flavor(r, "MariaDB", r["rows"], r["rounds"])]
    if "mysql" in r:
        parts.append(peers_flavor(r["mysql"], "MySQL 8", r["rows"], r["rounds"]))
    return "\n\n".join(parts)


def peers_flavor(r: Result, flavor: str, rows_count: int, rounds: int) -> str:
    catch = r["catch_up"]
    keys = ["debezium_first_to_last_rows_per_s", "debezium_with_engine_start_rows_per_s",
            "debezium_with_jvm_start_rows_per_s", "source_rows_per_s", "plain_reader_rows_per_s",
            "mariadb_binlog_rows_per_s"]  # fmt: skip
    catch_rows = [
        [key.removesuffix("_rows_per_s"), catch["median"][key],
         listed(round_[key] for round_ in catch["rounds"])]
        for key in keys if catch["median"].get(key) is not None
    ]  # fmt: skip
    seen = [r["load_average_before"], r["load_average_between"], r["load_average_after"]]
    head = (f"**{flavor}**: Debezium {r['debezium']}. {rows_count:,} rows, {rounds} rounds; load "
            f"average (1 min) {loads(seen)} (start, after the catch-up, end). "
            f"`source_vs_debezium_ratio` {shown(r['source_vs_debezium_ratio'])}.")  # fmt: skip
    rows = []
    for rate, figures in r["lag"]["median"].items():
        for system in PEER_SYSTEMS:
            f = figures.get(system)
            if f is not None:  # a system measured since a run the results may be from
                rows.append([rate, system, f["p50_s"], f["p99_s"], f["max_s"]])
    lag_table = table(["rows/s", "system", "p50 (s)", "p99 (s)", "max (s)"], rows)
    return "\n\n".join([
        head, table(["reader", "rows/s (median)", "rounds"], catch_rows), lag_table,
        peers_phases(r),
    ])  # fmt: skip


def peers_phases(r: Result) -> str:
    """The job's median micro-batch at each rate: Spark's phases and the batch function's."""
    rows = []
    for rate, figures in r["lag"]["median"].items():
        parts, driver = figures["job_spark_batch_parts_s"], figures["job_driver_phases_s"]
        batch = figures["job_batch_phases"]
        rows.append([
            rate, batch["median_batch_rows"], parts["triggerExecution"], parts["latestOffset"],
            parts["addBatch"], parts["walCommit"], parts["commitOffsets"], driver["read_s"],
            driver["console_write_s"], driver["versionstream_write_s"],
        ])  # fmt: skip
    header = ["rows/s", "batch rows", "`triggerExecution`", "`latestOffset`", "`addBatch`",
              "`walCommit`", "`commitOffsets`", "read from Spark", "console sink",
              "Version Stream sink"]  # fmt: skip
    return "Median micro-batch of the job, seconds:\n\n" + table(header, rows)


READER_OPTION_SINKS = ("console", "versionstream", "fastlane")


def reader_options(r: Result) -> str:
    """Per variant of `bench-reader-options`: each sink's lag, then the median micro-batch."""
    head = (f"{r['flavor']}, {r['rate']:,} rows/s, {r['rounds']} rounds of {r['duration_s']:g} s,"
            f" trigger {r['trigger_s']:g} s; load average (1 min) "
            f"{loads([r['load_average'], r['load_average_end']])} (start, end); "
            f"{r.get('machine', 'machine not recorded')}.")  # fmt: skip
    lags, batches = [], []
    for variant, m in r["median"].items():
        for sink in READER_OPTION_SINKS:
            f = m[f"job_{sink}"]
            lags.append([variant, sink, f["p50_s"], f["p99_s"], f["max_s"]])
        parts, driver = m["job_spark_batch_parts_s"], m["job_driver_phases_s"]
        batches.append([
            variant, m["job_batch_phases"]["median_batch_rows"], parts["triggerExecution"],
            parts.get("queryPlanning"), parts["addBatch"], parts["walCommit"],
            parts["commitOffsets"], driver["read_s"],
        ])  # fmt: skip
    return "\n\n".join([
        head, table(["options", "sink", "p50 (s)", "p99 (s)", "max (s)"], lags),
        "Median micro-batch, seconds:",
        table(["options", "batch rows", "`triggerExecution`", "`queryPlanning`",
               "`addBatch`", "`walCommit`", "`commitOffsets`", "read from Spark"], batches),
    ])  # fmt: skip


def footprint(r: Result) -> str:
    operator, driver = r["operator"], r["driver"]["median"]
    rows = [[f"operator, {run['streams']} UpdateStreams ({run['launcher']} launcher), round {n}",
             run["idle_mb"], run["peak_mb"], run["steady_mb"]]
            for n, run in enumerate(operator["runs"], 1)]  # fmt: skip
    rows += [[f"job driver, median: {process}", driver["idle_mb"][process],
              driver["peak_mb"][process], ""]
             for process in ("driver_jvm", "driver_python", "python_workers")]  # fmt: skip
    head = f"{r['rounds']} rounds; load average (1 min) {loads(r['load_averages'])}, in turn."
    return head + "\n\n" + table(["process", "idle (MB)", "peak (MB)", "steady (MB)"], rows)


def scaling(r: Result) -> str:
    rows = [
        [shards, ", ".join(f["shards"]), f["rows_per_s"], f["rows_per_s_per_shard"],
         f["spark_cpu_s_per_100k_rows"], f["mariadbd_cpu_s_per_100k_rows"],
         listed(run["rows_per_s"] for run in f["runs"])]
        for shards, f in r["by_shards"].items()
    ]  # fmt: skip
    head = (f"{r['rows']:,} rows, Spark `{r['spark_master']}`, median of {r['rounds']} rounds; "
            f"load average (1 min) {loads(r['load_averages'])}, in turn.")  # fmt: skip
    header = ["shards", "key ranges", "rows/s", "per shard", "Spark CPU s / 100k rows",
              "`mariadbd` CPU s / 100k rows", "rounds (rows/s)"]  # fmt: skip
    return head + "\n\n" + table(header, rows)


def hop(r: Result) -> str:
    hops = [[n, ",".join(h["from"]), ",".join(h["to"]), h["duration_s"], h["duplicates_dropped"]]
            for n, h in enumerate(r["hops"], 1)]  # fmt: skip
    verify = [[sink, v["committed"], v["delivered"], v["lost"], v["duplicates_delivered"],
               v["duplicates_dropped"]] for sink, v in r["verify"].items()]  # fmt: skip
    head = (f"{r['rounds']} splits and {r['rounds']} merges at {shown(r['rate_rows_per_s'])} "
            f"rows/s, filtered replication {shown(r['replicate_seconds_before_cutover'])} s before "
            f"each cut-over; load average {triple(r['load_average'])} at the end. Hop time median "
            f"{shown(r['hop_median_s'])} s (splits {shown(r['split_median_s'])} s, merges "
            f"{shown(r['merge_median_s'])} s), max {shown(r['hop_max_s'])} s.")  # fmt: skip
    return "\n\n".join([
        head, table(["hop", "from", "to", "time (s)", "duplicates dropped"], hops),
        table(["sink", "committed", "delivered", "lost", "duplicates delivered",
               "duplicates dropped"], verify),
    ])  # fmt: skip


def snapshot(r: Result) -> str:
    """Per size of table: each reader's rate (from the query's start, and after the first
    micro-batch where measured), the ratios side by side, and the mirror's check."""
    rows: list[list[Any]] = []
    for size, figures in r["sizes"].items():
        rows += _snapshot_rows(f"{int(size):,}", figures)
    rss = r["rss"]
    head = (f"Chunks of {r['chunk_rows']:,} rows; load average (1 min) "
            f"{loads([r['load_before'], r['load_after']])} (start, end). Peak RSS at "
            f"{listed(rss['rows'])} rows: Python driver {listed(rss['driver_rss_mb'])} MB, "
            f"Python workers {listed(rss['worker_rss_mb'])} MB. \"steady\": the rate after the "
            f"first micro-batch (which carries the Python workers' start).")  # fmt: skip
    return head + "\n\n" + table(["rows", "reader", "rows/s (median)", "steady", "rounds"], rows)


def _snapshot_rows(size: str, f: Result) -> list[list[Any]]:
    rounds = f["rounds"]
    rates = {kind: [run["rows_per_s"] for run in runs] for kind, runs in rounds.items()}
    rows = [
        [size, "our snapshot", f["snapshot_rows_per_s"], f["snapshot_steady_rows_per_s"],
         listed(rates["updatestream"])],
        [size, "Spark's JDBC reader", f["jdbc_rows_per_s"], "—", listed(rates["jdbc"])],
        [size, "ours / JDBC", f["snapshot_vs_jdbc_ratio"], "—", listed(
            u / j for u, j in zip(rates["updatestream"], rates["jdbc"], strict=True))],
    ]  # fmt: skip
    if "mirror" in rates:
        equal = all(run["verified"]["equal"] for run in rounds["mirror"])
        check = "verified equal" if equal else "NOT equal to the shards"
        rows.append([
            size, f"into the mirror, end to end, {check}", f["snapshot_to_mirror_rows_per_s"],
            f["snapshot_to_mirror_steady_rows_per_s"], listed(rates["mirror"]),
        ])  # fmt: skip
    if "debezium" in rates:
        rows += [
            [size, "Debezium's initial snapshot, first to last record", f["debezium_rows_per_s"],
             "—", listed(rates["debezium"])],
            [size, "ours / Debezium", f["snapshot_vs_debezium_ratio"], "—", listed(
                u / d for u, d in zip(rates["updatestream"], rates["debezium"], strict=True))],
        ]  # fmt: skip
    return rows


def outcomes(starts: Sequence[str], width: int = 140) -> str:
    """A reader's starts in a case, each shortened to `width` characters from the middle: an
    error says what it is first and why last."""
    head = width // 3
    short = [s if len(s) <= width else f"{s[:head]} … {s[len(s) - (width - head - 3):]}"
             for s in starts]  # fmt: skip
    return "; ".join(text.replace("|", "\\|") for text in short) or "—"


def vitess_peers(r: Result) -> str:
    """Per case and reader: starts, lost and duplicates; then the lag through vtgate."""
    rows = [
        [case, reader, outcomes(f["starts"]), f["committed"], f["lost"], f["duplicates"],
         f.get("unmatched", "—")]
        for case, data in r["cases"].items() for reader, f in data["readers"].items()
    ]  # fmt: skip
    seen = [r["load_average_before"], r["load_average_between"], r["load_average_after"]]
    head = (f"{shown(r['rate_rows_per_s'])} row changes/s through vtgate during the cases; load "
            f"average (1 min) {loads(seen)} (start, after the cases, end). Debezium "
            f"{r['readers']['debezium']}.")  # fmt: skip
    header = ["case", "reader", "starts", "committed", "lost", "duplicates delivered",
              "unmatched"]  # fmt: skip
    parts = [head, table(header, rows)]
    if r.get("error"):
        parts.append(f"The run ended early: {r['error']}")
    lag = r.get("lag")
    if lag:
        lags = [[reader, f["events"], f["missing"], f["p50_s"], f["p99_s"], f["max_s"]]
                for reader, f in lag["readers"].items()]  # fmt: skip
        goal = lag["goal"]
        parts += [
            f"Lag at {shown(lag['rate_rows_per_s'])} row changes/s through vtgate "
            f"({shown(lag['committed_rows_per_s'])} committed/s), {shown(lag['seconds'])} s, all "
            f"three at once; our trigger {shown(lag['trigger_seconds'])} s, micro-batch cycle "
            f"(median `triggerExecution`) {shown(goal['cycle_s'])} s.",
            table(["reader", "changes", "missing", "p50 (s)", "p99 (s)", "max (s)"], lags),
            f"Goal, our p99 ≤ the VStream client's p99 + our micro-batch cycle "
            f"({shown(goal['bound_s'])} s): {lag_goal_met(goal)}.",
        ]  # fmt: skip
    return "\n\n".join(parts)


def lag_goal_met(goal: dict[str, Any]) -> str:
    """`bench.vitess_lag.lag_goal` in words: the durable sink's, then the fast lane's."""

    def said(p99: Any, met: Any) -> str:
        return f"{shown(p99)} s, {'**met**' if met else 'missed'}"

    text = f"the console sink (durable) {said(goal['ours_p99_s'], goal['met'])}"
    if goal.get("fastlane_p99_s") is not None:  # runs before the fast lane was measured
        lane = said(goal["fastlane_p99_s"], goal["fastlane_met"])
        text += f"; the memcached fast lane's invalidations {lane}"
    return text


def vitess_peers_line(r: Result) -> str:
    """docs/vitess.md's one line: case (c) per reader, and the lag p99s."""
    case = r["cases"].get("c", {}).get("readers", {})
    said = [f"{reader} {outcomes(f['starts'], 90)}, lost {shown(f['lost'])}, duplicates "
            f"{shown(f['duplicates'])}" for reader, f in case.items()]  # fmt: skip
    line = "Stopped until `Reshard complete`, then started: " + "; ".join(said) + "."
    lag = r.get("lag")
    if lag:
        p99 = ", ".join(f"{reader} {shown(f['p99_s'])} s" for reader, f in lag["readers"].items())
        line += f" Lag p99 at {shown(lag['rate_rows_per_s'])} row changes/s through vtgate: {p99}."
    return line


def history(benchmark: str, entries: list[dict[str, Any]]) -> str:
    """Every recorded run of `benchmark`, oldest first."""
    runs = [entry for entry in entries if entry["benchmark"] == benchmark]
    seen = {key for run in runs for key in run["figures"]}
    keys = [
        figure.key for figure in FIGURES if figure.benchmark == benchmark and figure.key in seen
    ]
    rows = [[run["date"], run["commit"] or "—", loads(run["load"]) if run["load"] else "—",
             *(run["figures"].get(key) for key in keys)] for run in runs]  # fmt: skip
    return table(["date", "commit", "load avg", *(f"`{key}`" for key in keys)], rows)


RENDERERS: dict[str, Callable[[Result], str]] = {
    "source": source, "sinks": sinks, "mirror": mirror, "cdcv2": cdcv2,
    "peers": peers,
    "footprint": footprint, "scaling": scaling, "hop": hop, "snapshot": snapshot,
    "vitess_peers": vitess_peers, "vitess_peers:line": vitess_peers_line,
    "reader_options": reader_options, "reader_options_mysql": reader_options,
    "checkpoint_manager": reader_options, "read_back": reader_options,
}  # fmt: skip
