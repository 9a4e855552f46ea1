"""The fast lane against real MariaDB shards and a real memcached, without Spark: the stream
reader's lanes invalidate each change as soon as its shard's tail holds it, with the snapshot
hold-back of the offset the reader handed out, exactly the keys and tokens the batch's own read
of the range gives; the batch that applies the same changes afterwards writes nothing and
counts no duplicate."""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace
from typing import Any

from pyspark import cloudpickle
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.routing import Router
from updatestream_cli.devcluster.sample_schema import DATABASE
from updatestream_jobs.sinks.memcached_sink import MemcachedSink
from updatestream_jobs.sinks.sink import BatchContext
from updatestream_jobs.source.binlog_ranges import ShardRange, read_shard_range
from updatestream_jobs.source.data_source import UpdateStreamStreamReader
from updatestream_jobs.source.offsets import StreamOffset

from tests.binlogs import config_for, positions
from tests.jobs.test_source_tail import SHARDS, traffic, wait_until
from updatestream import spec
from updatestream.cache.entry import FAST_LANE_FLAG, decode
from updatestream.cache.transport import PipelinedClient
from updatestream.core.snapshot_plan import SnapshotRange, SnapshotState
from updatestream.core.token import EventToken

# users of -80 above id 1000 wait for an unfinished snapshot: their binlog events are held back
HOLDBACK = (SnapshotRange("-80", "users", last=(10**15,), frontier=(1000,)),)


def entries(memcached: MemcachedServer, keys: list[str]) -> dict[str, tuple[str, bool, bool]]:
    """key -> (token text, holds a value, flagged by the fast lane), for the keys present."""
    client = PipelinedClient(memcached.address)
    try:
        found = client.gets_many(keys)
    finally:
        client.close()
    out = {}
    for key, (raw, _cas) in found.items():
        entry = decode(raw, key)
        out[key] = (entry.token_text, entry.value is not None, bool(raw.flags & FAST_LANE_FLAG))
    return out


def test_the_fast_lane_invalidates_what_the_tail_holds_as_the_batch_would(
    cluster: DevCluster, memcached: MemcachedServer, tmp_path: Any
) -> None:
    memcached.flush()
    lanes = json.dumps([{"servers": [memcached.address]}])
    lane_log = tmp_path / "fast-lane.jsonl"
    config = config_for(
        cluster, tail="true", fastLaneSinks=lanes, maxBatchRows="0", fastLaneLog=str(lane_log)
    )
    reader = UpdateStreamStreamReader(config)
    sink_spec = spec.MemcachedSink.model_validate(
        {"type": "memcached", "servers": [memcached.address]}
    )
    batch_sink = MemcachedSink(sink_spec, keyspace=config.keyspace)
    try:
        first = reader.initialOffset()
        cloudpickle.dumps(reader)  # Spark pickles the reader when it plans a batch
        reader.partitions(first, first)  # starts the tails, and a lane for each
        assert reader.fast_lane is not None
        begin = StreamOffset.from_json(first)
        reader.fast_lane.rule(with_snapshot(begin))
        traffic(cluster, tmp_path, 41)
        end = positions(config)
        wait_until(lambda: all(reader.fast_lane.position(s) == end[s] for s in SHARDS), 60)

        # what the batch reads of the same ranges, from the binlog, with the same hold-back
        events, held_back = [], []
        for shard in SHARDS:
            start = begin.tokens[shard]
            last = EventToken(start.timestamp, shard, end[shard]).dumps()
            part = ShardRange(shard, start.dumps(), last, True, holdback=HOLDBACK)
            events += list(read_shard_range(config, part))
            whole = ShardRange(shard, start.dumps(), last, False)
            held_back += [e for e in read_shard_range(config, whole) if _held(e)]
        expected = {key: tokens[-1] for key, tokens in batch_sink.changes(events).items()}
        assert held_back and len(expected) > 50
        held_keys = set(batch_sink.changes(held_back)) - set(expected)
        found = entries(memcached, [*expected, *held_keys])
        assert {key: found.get(key) for key in expected} == {
            key: (token, False, True) for key, token in expected.items()
        }
        assert not held_keys & set(found)  # the hold-back applied: nothing invalidated
        # the lane's log names each transaction it applied, once (what bench-lag times)
        logged = [json.loads(line) for line in lane_log.read_text().splitlines()]
        applied = {(e.shard, e.gtid) for e in events if e.op != "heartbeat"}
        assert sorted((e["shard"], e["gtid"]) for e in logged) == sorted(applied)

        # the batch applies the same changes afterwards: nothing to write, no duplicate
        batch_sink.open()
        result = batch_sink.write_batch(events, BatchContext("s", "-", 0))
        assert (result.written, result.duplicates_delivered) == (0, 0), result
        assert result.skipped == len(expected)

        # one more change: invalidated within a second of its commit, no batch involved
        key, committed = insert_user(cluster)
        seen = wait_for_entry(memcached, key, committed)
        assert seen - committed < 1.0, seen - committed
        wait_until(lambda: len(lane_log.read_text().splitlines()) == len(logged) + 1, 10)
        last = json.loads(lane_log.read_text().splitlines()[-1])
        # logged once the write returned; the poll may see the entry a moment before that
        assert last["shard"] == "80-" and abs(last["appliedAt"] - seen) < 0.5, (last, seen)
        # the tail read the commit after the writer's COMMIT returned, and before the lane wrote
        assert committed - 0.05 <= last["tailedAt"] <= last["appliedAt"], (last, committed)
    finally:
        batch_sink.close()
        reader.stop()


def with_snapshot(offset: StreamOffset) -> StreamOffset:
    return replace(offset, snapshot=SnapshotState(ranges=HOLDBACK))


def _held(event: Any) -> bool:
    return (
        event.shard == "-80"
        and event.table == "users"
        and json.loads(event.pk or "{}").get("id", 0) > 1000
    )


def insert_user(cluster: DevCluster) -> tuple[str, float]:
    """A new user on `80-`, whose users no snapshot holds back (see `HOLDBACK`); its cache key
    and the commit's time."""
    router = Router(cluster.manifest_path)
    shard = ""
    while shard != "80-":
        user = random.randrange(10**9, 10**10)
        shard = router.shard_for("users", {"id": user})
    with cluster.server(shard).root_connect(DATABASE) as conn, conn.cursor() as cur:
        cur.execute(
            "INSERT INTO users (id, name, created_at) VALUES (%s, %s, NOW(6))", (user, "fast")
        )
        committed = time.time()
    return f"commerce:users:{user}", committed


def wait_for_entry(
    memcached: MemcachedServer, key: str, since: float, timeout: float = 30
) -> float:
    """When the key's entry appeared (flagged: the fast lane's), polled every 2 ms."""
    while time.time() - since < timeout:
        found = entries(memcached, [key]).get(key)
        if found is not None:
            assert found[2], found
            return time.time()
        time.sleep(0.002)
    raise AssertionError(f"no entry for {key} after {timeout}s")
