"""Hop time: from the serving map change to the first batch of destination events delivered.

One development cluster (`-80`, `80-`), traffic at ``--rate`` row changes/s with a ledger, and
one stream (`updatestream run`, Spark local mode) into a Version Stream on a MariaDB of its own
and into CDCv2 files. ``--rounds`` times: split ``-80`` in two (at another point each
round; filtered replication running ``--replicate`` seconds before the cut-over, as in
production), retire ``-80``, merge back into ``-80``, retire the two halves. Each hop's
figures come from the job's status file: ``durationSeconds`` (serving map change in the
Keyspace history -> the sinks wrote the hop batch, which holds the destinations' first events)
and ``duplicatesDropped``. At the
end the traffic stops, the stream catches up and ``updatestream verify`` checks both sinks
against the ledger: the duplicates delivered and the changes lost over all hops.

Run it with ``make bench-hop`` or ``python -m bench.hop_bench [--rounds 5] [--rate 300]``.
Writes ``bench/results/hop.json`` and merges ``hop_median_s``, ``hop_max_s``,
``hop_duplicates_delivered`` and friends into ``bench/results/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.reshard import ReshardOptions
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

from bench.report import machine
from bench.summary import merge_summary
from harness.stream_job import StreamJob, completed_hops, job_from_now, reshard, traffic_generator

REPO = Path(__file__).resolve().parents[1]

RESULT = REPO / "bench" / "results" / "hop.json"


def _steps(rounds: int) -> list[tuple[str, str]]:
    """Split -80 and merge it back, `rounds` times; a different split point each round, since
    a finished workflow is not run twice."""
    points = ["40", "20", "60", "30", "50", "10", "70"]
    steps = []
    for point in (points * (rounds // len(points) + 1))[:rounds]:
        steps += [("-80", f"-{point},{point}-80"), (f"-{point},{point}-80", "-80")]
    return steps


def _start_job(cluster: DevCluster, server: MariaDBServer, work: Path) -> StreamJob:
    """A stream of both shards from their current positions into the sink server."""
    server.create_account("hopbench", "hop-bench-pw", ["GRANT ALL PRIVILEGES ON *.* TO {user}"])
    assert server.port is not None
    sink = (server.host, server.port)
    account = ("hopbench", "hop-bench-pw")
    return job_from_now(cluster, work, sink, account, "us_hop_bench", secret="hop-bench-sink")


def _hop(
    cluster: DevCluster, job: StreamJob, number: int, step: tuple[str, str], options: ReshardOptions
) -> None:
    sources, targets = step
    reshard(cluster, sources, targets, options)
    job.wait_for(f"hop {number}", lambda s: len(completed_hops(s)) == number)
    cluster.retire(sources.split(","))
    hop = completed_hops(job.wait_for("status", lambda s: True))[-1]
    print(
        f"hop {number:2d} {sources:>10} -> {targets:<10} {hop['durationSeconds']:6.2f} s, "
        f"{hop['duplicatesDropped']:5d} duplicates dropped",
        flush=True,
    )


def _figures(hops: list[dict[str, Any]], reports: dict[str, Any]) -> dict[str, Any]:
    """Hop times (splits are the even hops, merges the odd ones) and the verifier's verdict."""
    durations = [float(h["durationSeconds"]) for h in hops]
    return {
        "hops": [
            {
                "from": h["from"],
                "to": h["to"],
                "duration_s": h["durationSeconds"],
                "duplicates_dropped": h["duplicatesDropped"],
            }
            for h in hops
        ],
        "hop_median_s": round(statistics.median(durations), 3),
        "hop_max_s": round(max(durations), 3),
        "split_median_s": round(statistics.median(durations[0::2]), 3),
        "merge_median_s": round(statistics.median(durations[1::2]), 3),
        "duplicates_dropped_per_hop_median": statistics.median(
            h["duplicatesDropped"] for h in hops
        ),
        "verify": reports,
        "hop_duplicates_delivered": sum(int(r["duplicates_delivered"]) for r in reports.values()),
        "hop_lost": sum(int(r["lost"]) for r in reports.values()),
    }


def run(rounds: int, rate: float, replicate: float, work: Path) -> dict[str, Any]:
    cluster = DevCluster(work / "cluster")
    server = MariaDBServer(base_dir=work / "sink", server_id=4343)
    cluster.up("-80,80-")
    server.start()
    job: StreamJob | None = None
    traffic: TrafficGenerator | None = None
    try:
        job = _start_job(cluster, server, work)
        ledger = work / "ledger.jsonl"
        traffic = traffic_generator(cluster, ledger, TrafficOptions(rate=rate, seed=5))
        job.start()
        job.wait_first_batch()
        traffic.start()
        options = ReshardOptions(min_replicate_seconds=replicate)
        began = time.monotonic()
        for number, step in enumerate(_steps(rounds), start=1):
            _hop(cluster, job, number, step, options)
        stats = traffic.stop()
        traffic = None
        final = job.wait_caught_up(["-80", "80-"])
        reshard_seconds = time.monotonic() - began
        reports = job.verify(ledger)
    finally:
        if traffic is not None:
            traffic.stop()
        if job is not None:
            job.stop()
        server.stop()
        cluster.down()
    return {
        "machine": machine(),
        "load_average": os.getloadavg(),
        "rounds": rounds,
        "rate_rows_per_s": rate,
        "replicate_seconds_before_cutover": replicate,
        "row_changes": stats.rows,
        "elapsed_s": round(reshard_seconds, 1),
        **_figures(completed_hops(final), reports),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="splits and merges (each)")
    parser.add_argument("--rate", type=float, default=300.0, help="row changes per second")
    parser.add_argument("--replicate", type=float, default=5.0, help="seconds before cut-over")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hop-bench-") as tmp:
        result = run(args.rounds, args.rate, args.replicate, Path(tmp))
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    merge_summary(
        {
            key: result[key]
            for key in (
                "machine",
                "hop_median_s",
                "hop_max_s",
                "hop_duplicates_delivered",
                "hop_lost",
                "split_median_s",
                "merge_median_s",
                "duplicates_dropped_per_hop_median",
            )
        }
    )
    print(
        f"{len(result['hops'])} hops: median {result['hop_median_s']} s, max "
        f"{result['hop_max_s']} s (splits {result['split_median_s']} s, merges "
        f"{result['merge_median_s']} s); duplicates delivered "
        f"{result['hop_duplicates_delivered']}, lost {result['hop_lost']}"
    )
    return 0 if result["hop_duplicates_delivered"] == 0 and result["hop_lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
