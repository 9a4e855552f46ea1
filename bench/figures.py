"""Every figure of `bench/results/summary.json`, declared once, and the goals it is held to.

A `Figure` names a summary key, the benchmark that measures it (its `make bench-<name>` target
and `bench/results/<name>.json`), what it is and its unit; the summary table of `make bench`,
the README's figures and docs/benchmarks.md are rendered from these declarations. A `Goal`
holds one figure to a bound, a number or another figure of the same summary (our lag p99 below
Debezium's); `bench.summary.judge` writes whether each is met into the summary every time a
benchmark merges its figures, so no table says "met" by hand.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

BENCHMARKS = (
    "source",
    "sinks",
    "mirror",
    "cdcv2",
    "lag",
    "peers",
    "footprint",
    "scaling",
    "hop",
    "snapshot",
)


@dataclass(frozen=True)
class Figure:
    key: str
    benchmark: str
    what: str
    unit: str = ""
    readme: bool = False  # in the README's short table even without a goal (those with one are)
    goals: tuple[Goal, ...] = ()  # their `key` is this figure's


_TESTS: dict[str, Callable[[float, float], bool]] = {
    "≥": operator.ge,
    "≤": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
}


@dataclass(frozen=True)
class Goal:
    op: str  # one of ≥ ≤ > < =
    bound: float | str  # a number, or the key of the figure to compare with
    name: str = ""  # unique among the goals; the figure's key when it has one goal
    says: str = ""  # how a bound that is another figure reads
    key: str = ""  # the figure held to it (set from the figure that declares the goal)

    @property
    def id(self) -> str:
        return self.name or self.key

    @property
    def text(self) -> str:
        if isinstance(self.bound, str):
            return f"{self.op} {self.says or self.bound}"
        return f"{self.op} {with_unit(shown(self.bound), FIGURE[self.key].unit)}"

    def met(self, summary: Mapping[str, Any]) -> bool | None:
        """Whether the summary's figure meets the goal; None when a figure is not measured."""
        value = summary.get(self.key)
        bound = summary.get(self.bound) if isinstance(self.bound, str) else self.bound
        if not isinstance(value, int | float) or not isinstance(bound, int | float):
            return None
        return _TESTS[self.op](value, bound)


def with_unit(shown: str, unit: str) -> str:
    return f"{shown}{unit}" if unit in ("x", "/s", "") else f"{shown} {unit}"


def shown(value: Any) -> str:
    """A figure as the docs show it: thousands separated from 100 on, else 3 significant digits."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return "0" if text == "-0" else text  # a lag a hair under zero (clocks read apart)


FIGURES: tuple[Figure, ...] = (
    Figure("source_rows_per_s", "source", "binlog source through Spark, one shard", "rows/s",
           readme=True),
    Figure("source_layer_rows_per_s", "source", "the source's read path without Spark", "rows/s"),
    Figure("plain_reader_rows_per_s", "source", "plain python-mysql-replication read", "rows/s"),
    Figure("mariadb_binlog_rows_per_s", "source", "`mariadb-binlog` decoding", "rows/s"),
    Figure("source_vs_plain_ratio", "source", "source / plain reader, side by side", "x",
           goals=(Goal("≥", 0.5),)),
    Figure("source_large_tx_worker_peak_rss_mb", "source",
           "Python worker peak RSS reading a 100k-row transaction", "MB"),
    Figure("memcached_invalidations_per_s", "sinks", "memcached invalidations", "/s",
           goals=(Goal("≥", 20_000),)),
    Figure("memcached_executors_invalidations_per_s", "sinks",
           "memcached invalidations from the executors, 2 cores", "/s"),
    Figure("memcached_executors_1core_invalidations_per_s", "sinks",
           "memcached invalidations from the executors, 1 core", "/s"),
    Figure("memcached_executors_scaling", "sinks",
           "memcached from the executors: 2 cores / 1 core", "x"),
    Figure("versionstream_appends_per_s", "sinks", "Version Stream appends", "/s",
           goals=(Goal("≥", 10_000),)),
    Figure("naive_append_per_s", "sinks", "naive single-row Version Stream appends", "/s"),
    Figure("versionstream_partitioned_speedup", "sinks",
           "Version Stream sink, 4 partitions / one stream, side by side", "x",
           goals=(Goal("≥", 3),)),
    Figure("versionstream_partitioned_appends_per_s", "sinks",
           "Version Stream sink with 4 partitions", "/s"),
    Figure("versionstream_one_stream_appends_per_s", "sinks",
           "Version Stream sink, one stream, beside the 4 partitions", "/s"),
    Figure("versionstream_writers_partitioned_speedup", "sinks",
           "8 single-version writers: 4 partitions / one stream", "x"),
    Figure("versionstream_writers_partitioned_appends_per_s", "sinks",
           "8 single-version writers into 4 partitions", "/s"),
    Figure("versionstream_writers_one_stream_appends_per_s", "sinks",
           "8 single-version writers into one stream", "/s"),
    Figure("versionstream_vs_naive_ratio", "sinks", "Version Stream / naive append", "x",
           goals=(Goal("≥", 100),)),
    Figure("mirror_rows_per_s", "mirror", "mirror sink, batches of 10,000", "rows/s"),
    Figure("mirror_executors_rows_per_s", "mirror",
           "mirror sink from the executors, 2 cores, batches of 10,000", "rows/s",
           goals=(Goal("≥", 60_000),)),
    Figure("mirror_executors_1core_rows_per_s", "mirror",
           "mirror sink from the executors, 1 core, batches of 10,000", "rows/s"),
    Figure("mirror_executors_scaling", "mirror", "from the executors: 2 cores / 1 core", "x"),
    Figure("mirror_rows_per_s_batch_1k", "mirror", "mirror sink, batches of 1,000", "rows/s"),
    Figure("mirror_naive_rows_per_s", "mirror", "one guarded upsert per row", "rows/s"),
    Figure("mirror_vs_naive_ratio", "mirror", "mirror / one upsert per row", "x",
           goals=(Goal("≥", 20),)),
    Figure("cdcv2_rows_per_s", "cdcv2", "CDCv2 sink, one writer in the driver", "rows/s"),
    Figure("cdcv2_executors_rows_per_s", "cdcv2",
           "CDCv2 sink from the executors, 4 parts, 2 cores", "rows/s"),
    Figure("cdcv2_executors_1core_rows_per_s", "cdcv2",
           "CDCv2 sink from the executors, 4 parts, 1 core", "rows/s"),
    Figure("cdcv2_executors_scaling", "cdcv2", "CDCv2 from the executors: 2 cores / 1 core", "x"),
    Figure("max_rate_rows_per_s", "lag",
           "maximum sustainable rate, 2 shards, four sinks, traffic on the same cores",
           "rows/s", goals=(Goal("≥", 10_000),)),
    Figure("max_rate_lag_p50_s", "lag", "lag p50 at the maximum rate, every sink written", "s"),
    Figure("max_rate_lag_p99_s", "lag", "lag p99 at the maximum rate, every sink written", "s",
           goals=(Goal("<", 1),)),
    Figure("loadgen_rows_per_s", "lag", "the C load generator alone, unthrottled", "rows/s"),
    Figure("loadgen_beside_job_rows_per_s", "lag",
           "the C load generator, unthrottled, beside the job", "rows/s"),
    Figure("lag_p50_s", "lag", "lag p50 at half that rate, Version Stream", "s",
           goals=(Goal("<", 0.2),)),
    Figure("lag_p99_s", "lag", "lag p99 at half that rate, Version Stream", "s",
           goals=(Goal("<", 0.35), Goal("<", "debezium_lag_p99_s", "lag_p99_below_debezium",
                                        "Debezium's p99"))),
    Figure("lag_max_s", "lag", "lag max at half that rate, Version Stream", "s"),
    Figure("lag_trigger_s", "lag", "trigger interval of the lag runs", "s"),
    Figure("source_vs_debezium_ratio", "peers",
           "catch-up: source through Spark / Debezium, first to last event", "x",
           goals=(Goal("≥", 1.2),)),
    Figure("debezium_lag_p99_s", "peers",
           "Debezium's lag p99 at its defaults, at bench-lag's half rate", "s", readme=True),
    Figure("debezium_fast_lag_p99_s", "peers",
           "Debezium's lag p99 with poll.interval.ms=10, at the same rate", "s", readme=True),
    Figure("invalidation_lag_p50_s", "peers",
           "memcached invalidation lag p50 (fast lane), at the same rate", "s",
           goals=(Goal("<", 0.05),)),
    Figure("invalidation_lag_p99_s", "peers",
           "memcached invalidation lag p99 (fast lane), at the same rate", "s",
           goals=(Goal("<", 0.05), Goal("≤", "debezium_fast_lag_p99_x2",
                                        "invalidation_p99_within_twice_debezium_fast",
                                        "twice Debezium's p99 at poll.interval.ms=10"))),
    Figure("debezium_fast_lag_p99_x2", "peers",
           "twice Debezium's lag p99 with poll.interval.ms=10 (the fast lane's bound)", "s"),
    Figure("versionstream_lag_p50_s", "peers",
           "Version Stream lag p50 beside Debezium, at the same rate", "s"),
    Figure("versionstream_lag_p99_s", "peers",
           "Version Stream lag p99 beside Debezium, at the same rate", "s",
           goals=(Goal("<", "debezium_lag_p99_s", "versionstream_p99_below_debezium",
                       "Debezium's p99"),)),
    Figure("source_vs_debezium_ratio_mysql", "peers",
           "catch-up on MySQL 8: source through Spark / Debezium's MySQL connector", "x"),
    Figure("debezium_lag_p99_s_mysql", "peers",
           "Debezium's MySQL connector: lag p99 at its defaults, at bench-lag's half rate", "s"),
    Figure("debezium_fast_lag_p99_s_mysql", "peers",
           "MySQL 8: Debezium's lag p99 with poll.interval.ms=10", "s"),
    Figure("invalidation_lag_p50_s_mysql", "peers", "MySQL 8: invalidation lag p50 (fast lane)",
           "s"),
    Figure("invalidation_lag_p99_s_mysql", "peers", "MySQL 8: invalidation lag p99 (fast lane)",
           "s"),
    Figure("debezium_fast_lag_p99_x2_mysql", "peers",
           "MySQL 8: twice Debezium's lag p99 with poll.interval.ms=10", "s"),
    Figure("versionstream_lag_p50_s_mysql", "peers", "MySQL 8: Version Stream lag p50", "s"),
    Figure("versionstream_lag_p99_s_mysql", "peers", "MySQL 8: Version Stream lag p99", "s"),
    Figure("operator_rss_mb_100_streams", "footprint",
           "operator peak RSS with 100 UpdateStreams", "MB", goals=(Goal("<", 200),)),
    Figure("operator_rss_mb_idle", "footprint", "operator RSS with no stream", "MB"),
    Figure("driver_jvm_peak_rss_mb", "footprint",
           "job driver JVM peak RSS, one 100k-row transaction", "MB"),
    Figure("driver_python_peak_rss_mb", "footprint",
           "job driver Python peak RSS, one 100k-row transaction", "MB"),
    Figure("scaling_rows_per_s_1_shards", "scaling", "source over 1 shard, 2 cores", "rows/s"),
    Figure("scaling_rows_per_s_2_shards", "scaling", "source over 2 shards, 2 cores", "rows/s"),
    Figure("scaling_rows_per_s_4_shards", "scaling", "source over 4 shards, 2 cores", "rows/s"),
    Figure("scaling_spark_cpu_s_per_100k_rows", "scaling",
           "Spark CPU per 100k rows, 2 shards", "s"),
    Figure("hop_median_s", "hop", "hop time, median of 5 splits and 5 merges", "s",
           goals=(Goal("<", 5),)),
    Figure("hop_max_s", "hop", "hop time, max", "s"),
    Figure("split_median_s", "hop", "hop time, median of the splits", "s"),
    Figure("merge_median_s", "hop", "hop time, median of the merges", "s"),
    Figure("duplicates_dropped_per_hop_median", "hop", "duplicates dropped per hop, median"),
    Figure("hop_duplicates_delivered", "hop", "duplicates delivered over the hops",
           goals=(Goal("=", 0),)),
    Figure("hop_lost", "hop", "changes lost over the hops", goals=(Goal("=", 0),)),
    Figure("snapshot_rows_per_s", "snapshot", "snapshot of 1M rows over 2 shards", "rows/s",
           goals=(Goal("≥", 300_000),)),
    Figure("snapshot_vs_jdbc_ratio", "snapshot", "snapshot / Spark's JDBC reader", "x",
           goals=(Goal("≥", 0.5),)),
    Figure("snapshot_to_mirror_rows_per_s", "snapshot",
           "snapshot into the mirror, end to end and verified", "rows/s",
           goals=(Goal("≥", 60_000),)),
    Figure("snapshot_steady_rows_per_s", "snapshot",
           "snapshot reader after its first micro-batch", "rows/s"),
    Figure("snapshot_rows_for_ratios", "snapshot",
           "rows of the snapshot the ratios and the mirror figure were measured on"),
    Figure("snapshot_vs_debezium_ratio", "snapshot", "snapshot / Debezium's initial snapshot",
           "x", goals=(Goal(">", 1),)),
)  # fmt: skip

FIGURE: dict[str, Figure] = {figure.key: figure for figure in FIGURES}

GOALS: tuple[Goal, ...] = tuple(
    replace(goal, key=figure.key) for figure in FIGURES for goal in figure.goals
)


def goals_of(key: str) -> list[Goal]:
    return [goal for goal in GOALS if goal.key == key]


def own_figures(benchmark: str, figures: Mapping[str, Any]) -> dict[str, Any]:
    """The figures among `figures` that `benchmark` measures."""
    return {key: value for key, value in figures.items()
            if key in FIGURE and FIGURE[key].benchmark == benchmark}  # fmt: skip
