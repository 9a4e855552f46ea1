"""The CPU budget of `bench-lag`'s maximum-rate goal, from its result file: what the traffic
alone costs per row change, what that leaves the job at the goal's rate on the machine's cores,
and what the job cost per row at the rate the search found sustainable.

The traffic's cost is the generator's and the shards' CPU per row while the generator runs
alone; the job's is everything else the rig spent per row at the maximum rate (the driver,
Spark's JVM and Python processes, the sinks' servers, memcached, and what the shards spent
beyond the traffic's own, such as serving the binlog tails). Both come from the CPU table the
benchmark writes (`bench.lag_rig.cpu_per_row`). When the run decoded its traffic alone
(`bench.lag_decode`), the line also sets that floor of the source's cost against the budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from statistics import median
from typing import Any

TRAFFIC_PARTS = ("load_generator", "shards_mariadbd")


@dataclass(frozen=True)
class CpuBudget:
    cores: int
    goal_rows_per_s: int
    traffic_us_per_row: float  # the generator and the shards, the generator alone
    job_us_per_row: float  # the rest of the rig at the maximum rate
    decode_us_per_row: float | None = None  # one shard's traffic decoded alone, one thread

    @property
    def traffic_cores_at_goal(self) -> float:
        return self.traffic_us_per_row * self.goal_rows_per_s / 1e6

    @property
    def job_budget_us_per_row(self) -> float:
        """What a row change may cost the job at the goal's rate, the traffic's cost paid."""
        return max(self.cores - self.traffic_cores_at_goal, 0.0) * 1e6 / self.goal_rows_per_s

    @property
    def ceiling_rows_per_s(self) -> float:
        """The rate at which traffic and job, at these costs, would keep every core busy."""
        return self.cores * 1e6 / (self.traffic_us_per_row + self.job_us_per_row)

    def times_the_budget(self, us_per_row: float) -> float:
        return us_per_row / max(self.job_budget_us_per_row, 1e-9)


def cores_of(machine: str) -> int:
    found = re.match(r"(\d+) CPUs?", machine)
    if not found:
        raise ValueError(f"no CPU count in the result's machine {machine!r}")
    return int(found[1])


def cpu_budget(result: dict[str, Any]) -> CpuBudget:
    traffic = median(
        sum(run["cpu"]["us_per_row"][part] for part in TRAFFIC_PARTS)
        for run in result["loadgen_alone"]["runs"]
    )
    at_max = result["loads"]["100%"]["runs"]
    job = median(run["cpu"]["total_us_per_row"] for run in at_max) - traffic
    return CpuBudget(
        cores=cores_of(result["machine"]),
        goal_rows_per_s=result["goal_max_rate"]["rows_per_s"],
        traffic_us_per_row=round(traffic, 1),
        job_us_per_row=round(job, 1),
        decode_us_per_row=result["loadgen_alone"].get("decode_alone", {}).get("us_per_row"),
    )


def budget_line(result: dict[str, Any]) -> str:
    b = cpu_budget(result)
    return (
        f"**CPU budget.** The traffic alone (generator and shards) cost "
        f"{b.traffic_us_per_row:,.0f} µs of CPU per row change: at {b.goal_rows_per_s:,} "
        f"rows/s it would take {b.traffic_cores_at_goal:.2f} of the {b.cores} cores and leave "
        f"{b.job_budget_us_per_row:,.0f} µs per row for the job, its sinks and their servers. "
        f"At the maximum rate those took {b.job_us_per_row:,.0f} µs per row (the median of its "
        f"rounds, {b.times_the_budget(b.job_us_per_row):.1f}x that budget); at these "
        f"costs the {b.cores} cores carry at most {b.ceiling_rows_per_s:,.0f} rows/s."
    ) + _decoded(b)


def _decoded(b: CpuBudget) -> str:
    if b.decode_us_per_row is None:
        return ""
    return (
        f" Decoding this traffic's binlog alone (the source's reader, one thread, nothing else "
        f"streaming) cost {b.decode_us_per_row:,.0f} µs per row change, "
        f"{b.times_the_budget(b.decode_us_per_row):.1f}x the budget by itself."
    )
