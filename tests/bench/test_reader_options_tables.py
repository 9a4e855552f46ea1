"""`bench-reader-options`: its medians from job results of the shape `LagRig.job` returns, and the
docs' block rendered from a result of the shape the bench writes."""

from __future__ import annotations

from typing import Any

from bench.doc_tables import READER_OPTION_SINKS, reader_options
from bench.peers_lag import FAST_LANE, SINK_LABELS, TAILED
from bench.reader_options_bench import VARIANTS, medians_of


def job_result(p99: float, add_batch: float) -> dict[str, Any]:
    lag = {"p50_s": p99 / 2, "p99_s": p99, "max_s": p99 * 2}
    return {
        "committed_rows_per_s": 600,
        "sinks": {label: dict(lag) for label in (*SINK_LABELS, FAST_LANE, TAILED)},
        "batch_phases": {"median_batch_rows": 100, "sinks": {"console": {"write_s": 0.01}}},
        "spark_batch_parts_s": {"triggerExecution": add_batch + 0.1, "queryPlanning": 0.01,
                                "addBatch": add_batch, "walCommit": 0.03,
                                "commitOffsets": 0.04},
        "driver_phases_s": {"read_s": add_batch / 2},
    }  # fmt: skip


def test_the_medians_are_per_variant_and_the_block_shows_both() -> None:
    assert set(READER_OPTION_SINKS) <= {*SINK_LABELS, FAST_LANE}
    runs = {
        "neither": [job_result(0.5, 0.2), job_result(0.7, 0.3), job_result(0.6, 0.25)],
        "prefetchHeld": [job_result(0.4, 0.1), job_result(0.3, 0.12), job_result(0.35, 0.2)],
    }
    assert set(runs) <= set(VARIANTS)
    medians = {name: medians_of(results) for name, results in runs.items()}
    assert medians["neither"]["job_versionstream"]["p99_s"] == 0.6
    assert medians["prefetchHeld"]["job_spark_batch_parts_s"]["addBatch"] == 0.12
    assert "debezium_default" not in medians["neither"]
    text = reader_options({
        "flavor": "mariadb", "rate": 1100, "rounds": 3, "duration_s": 15.0, "trigger_s": 0.1,
        "load_average": [1.5, 1, 1], "load_average_end": [2.5, 1, 1], "median": medians,
        "machine": "2 CPUs",
    })  # fmt: skip
    assert text.startswith("mariadb, 1,100 rows/s, 3 rounds of 15 s, trigger 0.1 s")
    assert "(start, end); 2 CPUs." in text
    assert "| neither | versionstream | 0.3 | 0.6 | 1.2 |" in text
    assert "| prefetchHeld | 100 | 0.22 | 0.01 | 0.12 | 0.03 | 0.04 | 0.06 |" in text
