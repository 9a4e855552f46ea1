"""What decoding `bench-lag`'s traffic costs alone: one shard's binlog between two positions read
with the source's own reader (`BinlogRangeReader` over python-mysql-replication, with the row
converter the tails and workers use), in this process, one thread, before the job starts, so
nothing else is streaming. The CPU per row change it reports is a floor under what the job's
source spends on the same rows at any rate (`bench.lag_budget` sets it against the goal)."""

from __future__ import annotations

import time
from statistics import median
from typing import Any

from updatestream_jobs.source.options import parse_options

from bench.lag_rig import Rig
from updatestream.binlog.range_reader import BinlogRangeReader
from updatestream.binlog.row_converter import RowConverter
from updatestream.binlog.session import flavor_of
from updatestream.core.gtid import parse_position


def decode_alone(rig: Rig, shard: str, before: str, after: str, rounds: int = 3) -> dict[str, Any]:
    """Read `shard`'s transactions after `before` up to `after` `rounds` times; the median CPU
    µs per row change, and each round's counts."""
    config = parse_options(
        {"keyspace": str(rig.cluster.manifest_path), "secretsDir": str(rig.cluster.secrets_dir)}
    )
    endpoint = config.endpoint(shard)
    runs = []
    for _ in range(rounds):
        converter = RowConverter(config.reader, shard, flavor_of(endpoint))
        reader = BinlogRangeReader(
            endpoint, config.reader, parse_position(before), parse_position(after), converter
        )
        began_cpu, began = time.process_time(), time.perf_counter()
        try:
            rows = sum(1 for _ in reader.rows())
            cpu, wall = time.process_time() - began_cpu, time.perf_counter() - began
        finally:
            reader.close()
        runs.append({
            "rows": rows, "transactions": reader.transactions, "cpu_s": round(cpu, 3),
            "wall_s": round(wall, 3), "us_per_row": round(cpu / max(rows, 1) * 1e6, 1),
        })  # fmt: skip
    return {
        "shard": shard,
        "us_per_row": median(run["us_per_row"] for run in runs),
        "runs": runs,
    }
