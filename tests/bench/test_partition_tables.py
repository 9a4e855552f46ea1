"""The partitioned Version Stream block renders bench-sinks' partition runs with their CPU."""

from typing import Any

from bench.partition_tables import partitions


def measured(rate: int, client_s: float, server_s: float) -> dict[str, Any]:
    return {"appends_per_s": rate, "versions": 1000, "wall_s": 1000 / rate,
            "client_cpu_s": client_s, "server_cpu_s": server_s}  # fmt: skip


def test_the_block_gives_rates_cpu_per_version_and_the_cores_the_goal_would_need() -> None:
    runs = {
        "sink_1": [measured(1000, 0.02, 0.01), measured(1200, 0.02, 0.01)],
        "sink_4": [measured(1100, 0.03, 0.01), measured(1300, 0.05, 0.01)],
        "w_1": [measured(100, 0.5, 0.5)] * 2,
        "w_4": [measured(90, 0.9, 0.5)] * 2,
    }
    lines = partitions({"partition_runs": runs}).splitlines()
    assert (
        lines[2]
        == "| the job's sink, batches of 5,000 | 1 | 1,100 | 1,000 / 1,200 | 20 | 10 | 0.03 |"
    )
    assert lines[3].startswith(
        "| the job's sink, batches of 5,000 | 4 | 1,200 | 1,100 / 1,300 | 40 | 10 |"
    )
    # 3 x 1,100 versions/s x (40 + 10) µs each
    assert lines[-1].endswith("would keep 0.2 cores busy.")


def test_a_result_without_partition_runs_says_it_was_not_measured() -> None:
    assert partitions({}).startswith("Not measured yet")
