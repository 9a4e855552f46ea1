"""The maximum-rate goal's CPU budget is computed from bench-lag's CPU tables."""

from typing import Any

import pytest

from bench.lag_budget import budget_line, cores_of, cpu_budget


def run(total: float, **parts: float) -> dict[str, Any]:
    return {"cpu": {"total_us_per_row": total, "us_per_row": parts}}


def result() -> dict[str, Any]:
    alone = [run(150, load_generator=25, shards_mariadbd=95 + n, job_driver_python=20)
             for n in (-5, 0, 5)]  # fmt: skip
    at_max = [run(total, load_generator=40, shards_mariadbd=180) for total in (1900, 1700, 1800)]
    return {
        "machine": "2 CPUs, 24 GiB RAM, a CPU",
        "goal_max_rate": {"rows_per_s": 10_000, "lag_p99_s": 1.0},
        "loadgen_alone": {"runs": alone},
        "loads": {"100%": {"runs": at_max}, "50%": {"runs": [run(99_999)]}},
    }


def test_the_traffic_alone_is_charged_to_the_traffic_and_the_rest_to_the_job() -> None:
    budget = cpu_budget(result())
    assert budget.traffic_us_per_row == 120  # the median run: 25 + 95
    assert budget.job_us_per_row == 1680  # the median at the maximum rate, less the traffic
    assert budget.traffic_cores_at_goal == pytest.approx(1.2)
    assert budget.job_budget_us_per_row == pytest.approx(80)
    assert budget.ceiling_rows_per_s == pytest.approx(2e6 / 1800)


def test_the_line_says_the_budget_and_how_far_the_job_is_from_it() -> None:
    line = budget_line(result())
    assert "cost 120 µs" in line and "1.20 of the 2 cores" in line and "leave 80 µs" in line
    assert "took 1,680 µs per row" in line and "21.0x that budget" in line
    assert "at most 1,111 rows/s" in line


def test_the_traffic_decoded_alone_is_set_against_the_budget_when_measured() -> None:
    measured = result()
    assert "decoded" not in budget_line(measured).lower()
    measured["loadgen_alone"]["decode_alone"] = {"us_per_row": 160.0}
    assert cpu_budget(measured).decode_us_per_row == 160
    assert budget_line(measured).endswith("cost 160 µs per row change, 2.0x the budget by itself.")


def test_a_machine_without_a_cpu_count_is_refused() -> None:
    assert cores_of("4 CPUs, 8 GiB RAM") == 4
    with pytest.raises(ValueError, match="no CPU count"):
        cores_of("a laptop")
