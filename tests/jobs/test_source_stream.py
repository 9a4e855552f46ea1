"""The `updatestream` data source in Spark (local mode, foreachBatch sinks keyed by batch id)
over a live two-shard traffic run: every committed change exactly once, in per-shard GTID order,
across a restart of the query from its checkpoint (the first query without `prefetchHeld`, the
restarted one with it); and a bounded batch read of a key range.

A query stopped between a batch's sink write and its commit runs that batch again after the
restart, over the same offsets (Spark's contract with a sink that is idempotent per batch id);
the test's sinks keep batches by id, so the replay must bring exactly the rows it brought first."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import LedgerEntry, read_ledger
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken

SHARDS = ("-80", "80-")
Identity = tuple[str, str, str, str, str | None]


def positions(cluster: DevCluster) -> dict[str, str]:
    return {shard: cluster.server(shard).gtid_position() for shard in SHARDS}


def stream(spark: Any, cluster: DevCluster, start: str, **options: str) -> Any:
    return (
        spark.readStream.format("updatestream")
        .option("keyspace", str(cluster.manifest_path))
        .option("secretsDir", str(cluster.secrets_dir))
        .option("start", start)
        .option("heartbeatIntervalSeconds", "2")
        .options(**options)
        .load()
    )


class Batches:
    """A foreachBatch sink keeping each batch's rows by batch id (a replay overwrites)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[dict[str, Any]]] = {}

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.batches[batch_id] = [row.asDict() for row in frame.collect()]

    def rows(self) -> list[dict[str, Any]]:
        return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]


def identity(row: dict[str, Any]) -> Identity:
    import hashlib

    digest = hashlib.sha256(row["after"].encode()).hexdigest() if row["after"] else None
    return (row["table"], row["pk"], row["op"], row["gtid"], digest)


def ledger_identity(entry: LedgerEntry) -> Identity:
    return (entry.table, entry.pk, entry.op, entry.gtid, entry.digest)


def changes(rows: list[dict[str, Any]]) -> Counter[Identity]:
    """The row changes of a batch (a heartbeat is a position, not a change)."""
    return Counter(identity(r) for r in rows if r["op"] != "heartbeat")


def wait_until(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.5)


def wait_for_heartbeats(sink: Batches, final: dict[str, str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {(row["shard"], row["gtid"]) for row in sink.rows() if row["op"] == "heartbeat"}
        if all((shard, final[shard]) in seen for shard in SHARDS):
            return
        time.sleep(1.0)
    raise AssertionError(f"the stream did not reach {final} within {timeout}s")


def test_traffic_exactly_once_in_gtid_order_across_a_restart(
    spark: Any, cluster: DevCluster, tmp_path: Path
) -> None:
    start = json.dumps(positions(cluster))
    ledger_path = tmp_path / "ledger.jsonl"
    checkpoint = tmp_path / "checkpoint"
    traffic = TrafficGenerator(
        cluster.manifest_path,
        cluster.secrets_dir,
        ledger_path,
        TrafficOptions(rate=100, seed=3, large_tx_rows=200, large_tx_every=3.0),
    )
    first_sink, sink = Batches(), Batches()
    first = (
        stream(spark, cluster, start, prefetchHeld="false")  # its held batches read by workers
        .writeStream.foreachBatch(first_sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    traffic.start()
    try:
        wait_until(lambda: len(first_sink.rows()) > 200, timeout=120)
        first.stop()  # mid-run: the traffic goes on
        second = (  # its held batches handed to Spark with their plans
            stream(spark, cluster, start, prefetchHeld="true")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .start()
        )
        wait_until(lambda: len(sink.rows()) > 200, timeout=120)
    finally:
        stats = traffic.stop()
    final = positions(cluster)
    try:
        wait_for_heartbeats(sink, final, timeout=120)
    finally:
        second.stop()
    # At most the first run's last batch runs again, with the changes it had.
    replayed = set(first_sink.batches) & set(sink.batches)
    assert replayed <= {max(first_sink.batches)}, sorted(replayed)
    for batch_id in replayed:
        again, first_time = (changes(b.batches[batch_id]) for b in (sink, first_sink))
        assert again == first_time, batch_id
    before_restart = first_sink.rows()
    after_restart = [r for b in sorted(set(sink.batches) - replayed) for r in sink.batches[b]]
    assert before_restart and after_restart and stats.transactions > 20

    ledger = list(read_ledger(ledger_path))
    delivered = [r for r in before_restart + after_restart if r["op"] != "heartbeat"]
    assert Counter(identity(r) for r in delivered) == Counter(ledger_identity(e) for e in ledger)
    assert len(delivered) == len(ledger) == stats.rows
    for shard in SHARDS:
        sequence = [int(r["gtid"].rsplit("-", 1)[1]) for r in delivered if r["shard"] == shard]
        assert sequence == sorted(sequence)
        heartbeats = [r for r in after_restart if r["op"] == "heartbeat" and r["shard"] == shard]
        assert heartbeats and EventToken.loads(heartbeats[-1]["token"]).shard == shard
    # The restarted query went on from the checkpoint, not from the start option again: its
    # batch ids continue the first run's and no change came twice. (A heartbeat may: a restart
    # whose first batch finds no new transaction repeats the last position's heartbeat.)
    assert min(sink.batches) > 0
    changes_before = {identity(r) for r in before_restart if r["op"] != "heartbeat"}
    assert changes_before.isdisjoint(identity(r) for r in after_restart if r["op"] != "heartbeat")

    # A bounded batch read of an unaligned key range between the same positions.
    batch = (
        spark.read.format("updatestream")
        .option("keyspace", str(cluster.manifest_path))
        .option("secretsDir", str(cluster.secrets_dir))
        .option("keyRange", "40-c0")
        .option("start", start)
        .option("end", json.dumps(final))
        .load()
    )
    rows = [row.asDict() for row in batch.where("op != 'heartbeat'").collect()]
    key_range = KeyRange.parse("40-c0")
    wanted = [e for e in ledger if key_range.contains(bytes.fromhex(e.keyspace_id))]
    assert 0 < len(rows) < len(ledger)
    assert Counter(identity(r) for r in rows) == Counter(ledger_identity(e) for e in wanted)
