"""Print `bench/results/summary.json` as one table, with the goals the README sets.

Run by ``make bench`` after every benchmark; ``python -m bench.show_summary`` prints it alone.
Keys without a description here are printed under their own name.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from typing import Any

from bench.report import console, print_table
from bench.summary import SUMMARY

Goal = tuple[str, Callable[[float, float], bool], float]  # (shown as, test, bound)
AT_LEAST: Callable[[float, float], bool] = operator.ge
BELOW: Callable[[float, float], bool] = operator.lt

# key -> (what it is, its goal or None), in the order of the README's Figures table
FIGURES: dict[str, tuple[str, Goal | None]] = {
    "source_rows_per_s": ("binlog source through Spark, one shard (rows/s)", None),
    "source_layer_rows_per_s": ("source read path without Spark (rows/s)", None),
    "plain_reader_rows_per_s": ("plain python-mysql-replication read (rows/s)", None),
    "mariadb_binlog_rows_per_s": ("mariadb-binlog decoding the same binlog (rows/s)", None),
    "source_vs_plain_ratio": ("source / plain reader", ("≥ 0.5", AT_LEAST, 0.5)),
    "source_large_tx_worker_peak_rss_mb": ("Python worker peak RSS, 100k-row tx (MB)", None),
    "source_vs_debezium_ratio": ("source / Debezium first-to-last catch-up, one run", None),
    "debezium_lag_p99_s": ("Debezium lag p99, defaults, bench-lag's 50% rate (s)", None),
    "memcached_invalidations_per_s": (
        "memcached invalidations/s",
        ("≥ 20,000", AT_LEAST, 20_000),
    ),
    "versionstream_appends_per_s": ("Version Stream appends/s", ("≥ 10,000", AT_LEAST, 10_000)),
    "naive_append_per_s": ("naive single-row Version Stream appends/s", None),
    "versionstream_vs_naive_ratio": ("Version Stream / naive append", ("≥ 100", AT_LEAST, 100)),
    "mirror_rows_per_s": ("mirror rows applied/s, batches of 10k", ("≥ 30,000", AT_LEAST, 30_000)),
    "mirror_rows_per_s_batch_1k": ("mirror rows applied/s, batches of 1k", None),
    "mirror_naive_rows_per_s": ("one guarded upsert per row, autocommit (rows/s)", None),
    "mirror_vs_naive_ratio": ("mirror / one upsert per row", ("≥ 20", AT_LEAST, 20)),
    "snapshot_rows_per_s": (
        "snapshot of 1M rows, 2 shards (rows/s)", ("≥ 300,000", AT_LEAST, 300_000)
    ),
    "snapshot_vs_jdbc_ratio": ("snapshot / Spark's JDBC reader", ("≥ 0.5", AT_LEAST, 0.5)),
    "snapshot_vs_debezium_ratio": (
        "snapshot / Debezium's initial snapshot", ("> 1", AT_LEAST, 1.0)
    ),
    "max_rate_rows_per_s": ("max sustainable rate, traffic + stream, 2 shards (rows/s)", None),
    "lag_trigger_s": ("trigger interval of the lag runs (s)", None),
    "lag_p50_s": ("lag p50 at 50% load, Version Stream (s)", ("< 1", BELOW, 1.0)),
    "lag_p99_s": ("lag p99 at 50% load, Version Stream (s)", ("< 2", BELOW, 2.0)),
    "lag_max_s": ("lag max at 50% load, Version Stream (s)", None),
    "operator_rss_mb_idle": ("operator RSS, no streams (MB)", None),
    "operator_rss_mb_100_streams": ("operator peak RSS, 100 UpdateStreams (MB)",
                                    ("< 200", BELOW, 200)),
    "driver_jvm_peak_rss_mb": ("job driver JVM peak RSS, 100k-row tx (MB)", None),
    "driver_python_peak_rss_mb": ("job driver Python peak RSS, 100k-row tx (MB)", None),
    "scaling_rows_per_s_1_shards": ("source, 1 shard, 2 cores (rows/s)", None),
    "scaling_rows_per_s_2_shards": ("source, 2 shards, 2 cores (rows/s)", None),
    "scaling_rows_per_s_4_shards": ("source, 4 shards, 2 cores (rows/s)", None),
    "scaling_spark_cpu_s_per_100k_rows": ("source CPU per 100k rows, Spark side (s)", None),
    "hop_median_s": ("hop time, median of live splits and merges (s)", ("< 5", BELOW, 5.0)),
    "hop_max_s": ("hop time, max (s)", None),
    "split_median_s": ("hop time, median of the splits (s)", None),
    "merge_median_s": ("hop time, median of the merges (s)", None),
    "duplicates_dropped_per_hop_median": ("duplicates dropped per hop, median", None),
    "hop_duplicates_delivered": ("duplicates delivered over all hops", ("= 0", BELOW, 1)),
    "hop_lost": ("changes lost over all hops", ("= 0", BELOW, 1)),
}  # fmt: skip


def rows(summary: dict[str, Any]) -> list[list[Any]]:
    known = [key for key in FIGURES if key in summary]
    others = sorted(key for key in summary if key not in FIGURES and key != "machine")
    out = []
    for key in known + others:
        what, goal = FIGURES.get(key, (key, None))
        value = summary[key]
        if goal is None or not isinstance(value, int | float):
            out.append([what, value, "—", ""])
        else:
            shown, test, bound = goal
            out.append([what, value, shown, "met" if test(value, bound) else "missed"])
    return out


def main() -> None:
    if not SUMMARY.exists():
        raise SystemExit("no bench/results/summary.json yet; run a benchmark first")
    summary = json.loads(SUMMARY.read_text(encoding="utf-8"))
    print_table(
        f"Benchmark summary ({summary.get('machine', 'machine not recorded')})",
        ["figure", "value", "goal", ""],
        rows(summary),
    )
    console.print("per-benchmark details: bench/results/<name>.json")


if __name__ == "__main__":
    main()
