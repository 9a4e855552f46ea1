"""`bench-vitess-peers`' lag part: the three readers side by side on one traffic through vtgate.

The cluster serves `-80,80-`. All three start at the current position and run at once: our
job in this process (Spark local mode, the given trigger, its console sink wrapped in
`bench.lagtools.TimedSink`: delivered when the sink's write returned), the VStream client
(delivered when it received the transaction's events) and Debezium's Vitess connector
(delivered when the engine handed the change to the harness). Our job also has a memcached
sink, whose fast lane invalidates each change as soon as the shard's binlog tail has its
transaction, ahead of the micro-batch: `updatestream_fastlane` is when the lane applied it (the
job's `fastLaneLog`), `updatestream` when the console sink's write returned. The traffic is
`updatestream vitess traffic` in its own process at one fixed rate, with its ledger's commit
times (the writer's clock, taken when COMMIT returned). A light warm-up each reader must
deliver comes first. Lag per change: delivered minus committed; p50, p99 and max per reader.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.ledger import LedgerEntry, read_ledger
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.manifests import update_stream
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_jobs.job import Job, spark_session

from bench.lag_rig import spark_durations
from bench.lagtools import TimedSink, fast_lane_times, summarize
from bench.report import console
from bench.vitess_cases import Peer, wait_until
from bench.vitess_ledger import first_named, match
from harness.stream_job import CLI
from updatestream import spec
from updatestream.contract.job_config import JobConfig

FAST_LANE = "updatestream_fastlane"  # the reader name of our memcached fast lane
FAST_LANE_LOG = "lag-fast-lane.jsonl"


def traffic(cluster: VitessCluster, root: Path, rate: float, seconds: float, seed: int
            ) -> list[LedgerEntry]:  # fmt: skip
    """`updatestream vitess traffic` for `seconds`; its ledger."""
    ledger = root / f"lag-ledger-{seed}.jsonl"
    command = [
        CLI, "vitess", "traffic", "--dir", str(cluster.dir), "--rate", f"{rate:g}",
        "--duration", f"{seconds:g}", "--ledger", str(ledger), "--seed", str(seed),
    ]  # fmt: skip
    with (root / "lag-traffic.log").open("ab") as log:
        subprocess.run(command, check=True, stdout=log, stderr=log, timeout=seconds + 600)
    return read_ledger(ledger)


def our_job(
    cluster: VitessCluster, root: Path, trigger: float, memcached: str
) -> tuple[Job, TimedSink]:
    """Our job of every serving shard from its current position into a console file and the
    memcached server at `memcached` (its fast lane logging to `FAST_LANE_LOG` under `root`)."""
    serving = spec.load_keyspace(cluster.manifest_path).spec.serving_shards
    start = {"mode": "gtid", "gtid": {s: cluster.gtid_executed(s) for s in serving}}
    sinks = [
        {"type": "console", "path": str(root / "lag-console.jsonl")},
        {"type": "memcached", "servers": [memcached]},
    ]
    stream = spec.parse_update_stream(
        update_stream("vitess-lag", cluster.keyspace, start, sinks, ["-"])
    )
    job = Job(
        JobConfig(
            stream=stream,
            keyspace=spec.load_keyspace(cluster.manifest_path),
            secrets_dir=cluster.secrets_dir,
            checkpoint=root / "lag-checkpoint",
            status_file=root / "lag-status.json",
            trigger_seconds=trigger,
            source_options={"fastLaneLog": str(root / FAST_LANE_LOG)},
        )
    )
    timed = TimedSink(job.sinks[0])
    job.sinks = [timed, *job.sinks[1:]]
    return job, timed


def warm_up(cluster: VitessCluster, root: Path, peers: list[Peer], rounds: int = 6
            ) -> list[list[LedgerEntry]]:  # fmt: skip
    """Light traffic, 5 s at a time, until every peer delivered some of it; each run's ledger.

    A peer that says it started may open its VStream (at `current`) a moment later and never
    see what was committed before; none of the warm-up is measured."""
    runs: list[list[LedgerEntry]] = []
    waiting = [p.name for p in peers]
    for number in range(rounds):
        runs.append(traffic(cluster, root, 20, 5, seed=80 + number))
        deadline = time.monotonic() + 30
        while waiting and time.monotonic() < deadline:
            waiting = [p.name for p in peers if not any(delivered_any(w, p) for w in runs)]
            time.sleep(0.5)
        if not waiting:
            return runs
    raise SystemExit(f"{', '.join(waiting)} delivered none of {rounds} warm-up runs of 5 s")


def delivered_any(entries: list[LedgerEntry], peer: Peer) -> bool:
    return bool(match(entries, peer.deliveries()).first_delivered())


def delivered_all(entries: list[LedgerEntry], peer: Peer) -> bool:
    return match(entries, peer.deliveries()).first_delivered().keys() >= {e.order for e in entries}


def ours_delivered_at(entries: list[LedgerEntry], sink: TimedSink) -> dict[int, float]:
    """Ledger change -> when our console sink's write of its transaction returned."""
    done = [(b.completed_at, shard, gtid) for b in list(sink.batches)
            for shard, gtid in b.transactions]  # fmt: skip
    return first_named(done, entries)


def fast_lane_delivered_at(entries: list[LedgerEntry], root: Path) -> dict[int, float]:
    """Ledger change -> when our fast lane applied its transaction's invalidations."""
    applied = fast_lane_times(root / FAST_LANE_LOG)
    return first_named([(at, shard, gtid) for (shard, gtid), at in applied.items()], entries)


def measure(cluster: VitessCluster, root: Path, peers: list[Peer], rate: float, seconds: float,
            trigger: float) -> dict[str, Any]:  # fmt: skip
    """Lag per reader at `rate` row changes/s for `seconds`, all three reading at once."""
    spark = spark_session("local[2]", "vitess-peers-lag")
    memcached = MemcachedServer(memory_mb=64).start()
    job, sink = our_job(cluster, root, trigger, memcached.address)
    try:
        job.start(spark)
        for peer in peers:
            peer.start()
        for peer in peers:
            wait_until(f"{peer.name} streaming", lambda p=peer: p.streaming(), 300)
        warm = warm_up(cluster, root, peers)
        wait_until("our warm-up", lambda: all(len(ours_delivered_at(w, sink)) == len(w)
                                              for w in warm), 300)  # fmt: skip
        ledger = traffic(cluster, root, rate, seconds, seed=91)
        console.print(f"lag traffic: {len(ledger)} row changes committed")
        for peer in peers:
            wait_until(f"{peer.name} changes", lambda p=peer: delivered_all(ledger, p), 300)
        wait_until("our changes", lambda: len(ours_delivered_at(ledger, sink)) == len(ledger), 300)
        first, last = min(e.commit_time for e in ledger), max(e.commit_time for e in ledger)
        parts = spark_durations(job.query, first, last)
    finally:
        for peer in peers:
            peer.stop()
        job.stop()
        spark.stop()
        memcached.stop()
    firsts = {
        "updatestream": ours_delivered_at(ledger, sink),
        FAST_LANE: fast_lane_delivered_at(ledger, root),
    }
    firsts.update({p.name: match(ledger, p.deliveries()).first_delivered() for p in peers})
    readers: dict[str, Any] = {}
    for name, times in firsts.items():
        lags = [times[e.order] - e.commit_time for e in ledger if e.order in times]
        readers[name] = summarize(lags, len(ledger) - len(lags)).as_dict()
    return {
        "rate_rows_per_s": rate,
        "seconds": seconds,
        "committed": len(ledger),
        "committed_rows_per_s": round(len(ledger) / max(last - first, 1e-9)),
        "trigger_seconds": trigger,
        "readers": readers,
        "spark_batch_parts_s": parts,
        "goal": lag_goal(readers, parts),
    }


def lag_goal(readers: dict[str, Any], parts: dict[str, float]) -> dict[str, Any]:
    """Our p99 at most the VStream client's p99 plus our micro-batch cycle (the median of
    Spark's `triggerExecution` over the batches that read the traffic): `met` for the durable
    sink, `fastlane_met` for the memcached fast lane's invalidations."""
    ours, plain = readers["updatestream"]["p99_s"], readers.get("vstream", {}).get("p99_s")
    lane = readers.get(FAST_LANE, {}).get("p99_s")
    cycle = parts.get("triggerExecution")
    bound = None if plain is None or cycle is None else round(plain + cycle, 3)
    return {
        "ours_p99_s": ours,
        "fastlane_p99_s": lane,
        "vstream_p99_s": plain,
        "cycle_s": cycle,
        "bound_s": bound,
        "met": None if bound is None or ours is None else ours <= bound,
        "fastlane_met": None if bound is None or lane is None else lane <= bound,
    }
