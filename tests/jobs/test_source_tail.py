"""The binlog tails against real MariaDB shards: a tail's rows are exactly the rows a read of the
same range gives, across a binlog rotation and a large transaction; the stream reader hands
small ranges over inline and the workers' read of an inline partition yields exactly what their
own binlog read of it yields (dedup verdicts, snapshot holdback and heartbeat included); a full
buffer drops its rows and the range is read the ordinary way."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.traffic import TrafficOptions
from updatestream_jobs.source import tails as tails_module
from updatestream_jobs.source.binlog_ranges import ShardRange
from updatestream_jobs.source.data_source import UpdateStreamStreamReader
from updatestream_jobs.source.offsets import StreamOffset
from updatestream_jobs.source.options import SourceConfig
from updatestream_jobs.source.partitions import (
    BinlogRangePartition,
    HeldRowsPartition,
    SourcePartition,
)

from harness.stream_job import traffic_generator
from tests.binlogs import config_for, positions
from updatestream.binlog.range_reader import BinlogRangeReader
from updatestream.binlog.row_converter import RowConverter
from updatestream.binlog.session import flavor_of
from updatestream.binlog.tailer import ShardTailer
from updatestream.core.dedup import DedupFilter
from updatestream.core.gtid import GTIDPosition, position_contains
from updatestream.core.snapshot_plan import SnapshotRange
from updatestream.core.token import EventToken

SHARDS = ("-80", "80-")


MIN_ROWS = 300  # a loaded machine commits few rows in a second: run until this many at least


def traffic(cluster: DevCluster, tmp: Any, seed: int, rotate: bool = False, **extra: Any) -> None:
    """Unthrottled traffic for a second, and on until it changed `MIN_ROWS` rows."""
    options = TrafficOptions(rate=0, duration=1.0, seed=seed, **extra)
    gen = traffic_generator(cluster, tmp / f"ledger-{seed}.jsonl", options)
    while gen.run().rows < MIN_ROWS:
        pass
    if rotate:
        for shard in SHARDS:
            cluster.server(shard).query("FLUSH BINARY LOGS")
        gen.options.duration = 0.5
        gen.run()
    gen.close()


def executor_rows(config: SourceConfig, shard: str, start: GTIDPosition, end: GTIDPosition) -> list:
    endpoint = config.endpoint(shard)
    converter = RowConverter(config.reader, shard, flavor_of(endpoint))
    return list(BinlogRangeReader(endpoint, config.reader, start, end, converter).rows())


def wait_until(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_tail_holds_exactly_what_a_read_of_the_range_gives(
    cluster: DevCluster, tmp_path: Any
) -> None:
    config = config_for(cluster)
    start = positions(config)
    tailers = {
        s: ShardTailer(
            config.endpoint(s), config.reader, start[s], max_rows=10**6, max_bytes=1 << 30
        )
        for s in SHARDS
    }
    for tailer in tailers.values():
        tailer.start()
    try:
        traffic(cluster, tmp_path, 21, rotate=True, large_tx_rows=2000, large_tx_every=0.4)
        middle = positions(config)
        traffic(cluster, tmp_path, 22)
        end = positions(config)
        for shard, tailer in tailers.items():
            assert tailer.buffer.wait_for(end[shard], 60), tailer.error
            assert tailer.alive and len(tailer._reader.connections) == 1  # one connection
            buffer = tailer.buffer
            whole = executor_rows(config, shard, start[shard], end[shard])
            assert len(whole) > 2000
            assert buffer.rows_between(start[shard], end[shard], 10**6) == whole
            first = executor_rows(config, shard, start[shard], middle[shard])
            assert buffer.rows_between(start[shard], middle[shard], 10**6) == first
            assert buffer.rows_between(middle[shard], end[shard], 10**6) == whole[len(first) :]
            buffer.trim(middle[shard])  # committed up to the middle: its rows are gone
            assert buffer.rows == len(whole) - len(first)
            assert buffer.rows_between(start[shard], end[shard], 10**6) is None
    finally:
        for tailer in tailers.values():
            tailer.stop()
    wait_until(lambda: not any(t._thread.is_alive() for t in tailers.values()), 10)


def test_a_full_tail_drops_its_rows_and_stops(cluster: DevCluster, tmp_path: Any) -> None:
    config = config_for(cluster)
    start = positions(config)
    tailer = ShardTailer(
        config.endpoint("-80"), config.reader, start["-80"], max_rows=50, max_bytes=1 << 30
    )
    tailer.start()
    try:
        traffic(cluster, tmp_path, 23, large_tx_rows=500, large_tx_every=0.2)
        wait_until(lambda: not tailer._thread.is_alive(), 30)
        assert tailer.buffer.overflowed and not tailer.alive and tailer.error is None
        assert tailer.buffer.rows == 0
        end = positions(config)["-80"]
        assert tailer.buffer.rows_between(start["-80"], end, 10**6) is None
    finally:
        tailer.stop()


def arrow_rows(config: SourceConfig, part: SourcePartition) -> list[dict[str, Any]]:
    batches = list(part.read(config))
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def held_parts(parts: list[Any]) -> HeldRowsPartition:
    """The partition of a batch whose every range is held: one partition for all."""
    (held,) = parts
    assert isinstance(held, HeldRowsPartition)
    return held


def held_alone(held: HeldRowsPartition, part: ShardRange) -> HeldRowsPartition:
    """One held range as a partition of its own."""
    return HeldRowsPartition([(part, held.rows_of(part.shard))])


def worker_copy(part: ShardRange) -> BinlogRangePartition:
    """The same range, read by a worker from the shard."""
    return BinlogRangePartition(part)


@contextlib.contextmanager
def tailing_reader(config: SourceConfig) -> Iterator[tuple[UpdateStreamStreamReader, str]]:
    """The source's stream reader for `config` with its tails started, and its initial offset;
    stopped (its tails ended) after the block."""
    reader = UpdateStreamStreamReader(config)
    try:
        offset = reader.initialOffset()
        assert reader.partitions(offset, offset) == []  # no range: starts the tails
        yield reader, offset
    finally:
        reader.stop()


def test_inline_partitions_deliver_exactly_what_the_workers_read(
    cluster: DevCluster, tmp_path: Any
) -> None:
    config = config_for(cluster, tail="true", inlineMaxRows="100000", maxBatchRows="0")
    with tailing_reader(config) as (reader, offset):
        assert set(reader._tails.tailers) == set(SHARDS)
        traffic(cluster, tmp_path, 24, large_tx_rows=300, large_tx_every=0.3)
        end = reader.latestOffset(offset, None)
        both = reader.partitions(offset, end)
        held = held_parts(both)
        parts = held.ranges
        assert [p.shard for p in parts] == list(SHARDS)
        assert all(p.heartbeat for p in parts), parts
        assert reader._tails.inlined == 2
        together = arrow_rows(config, both[0])
        assert together == [r for p in parts for r in arrow_rows(config, worker_copy(p))]
        for part in parts:
            inline = arrow_rows(config, held_alone(held, part))
            read = arrow_rows(config, worker_copy(part))
            assert len(inline) > 100 and inline == read
            assert inline[-1]["op"] == "heartbeat"
        reader.commit(end)
        assert all(t.buffer.rows == 0 for t in reader._tails.tailers.values())

        # the same with a dedup rule (verdicts per row) and a snapshot holding rows back
        traffic(cluster, tmp_path, 25)
        later = reader.latestOffset(end, None)
        held = held_parts(reader.partitions(end, later))
        parts = held.ranges
        begin = StreamOffset.from_json(end)
        overlap = {s: begin.tokens[s].timestamp + 3600 for s in SHARDS}
        dedup = DedupFilter({}, overlap_until=overlap)
        # users of -80 above id 1000 wait for the snapshot
        holdback = (SnapshotRange("-80", "users", last=(10**15,), frontier=(1000,)),)
        kept = 0
        for part in parts:
            ruled = replace(part, dedup=dedup, holdback=holdback)
            inline = arrow_rows(config, HeldRowsPartition([(ruled, held.rows_of(part.shard))]))
            assert inline == arrow_rows(config, worker_copy(ruled))
            assert inline[-1]["op"] == "heartbeat"
            assert {r["dedup"] for r in inline[:-1]} == {"unknown"}
            kept += len(inline)
        assert kept < sum(len(held.rows_of(p.shard)) for p in parts) + len(parts)  # held back


def test_a_range_the_tail_does_not_hold_is_read_by_the_workers(
    cluster: DevCluster, tmp_path: Any
) -> None:
    config = config_for(cluster, tail="true", inlineMaxRows="10", maxBatchRows="0")
    with tailing_reader(config) as (reader, offset):
        traffic(cluster, tmp_path, 26)
        end = reader.latestOffset(offset, None)
        parts = reader.partitions(offset, end)  # too many rows to hand over
        assert parts and all(isinstance(p, BinlogRangePartition) for p in parts)
        # admission control: with a limit, the next batch ends early, at a transaction the tail
        # holds, with the start's time, and is handed over
        reader.commit(end)
        capped_config = config_for(cluster, tail="true", maxBatchRows="50")
        with tailing_reader(capped_config) as (capped, first):
            start = StreamOffset.from_json(first)
            for seed in range(27, 60):  # enough rows on every shard for a cut, however slow
                traffic(cluster, tmp_path, seed)
                now = positions(config)
                for tailer in capped._tails.tailers.values():
                    assert tailer.buffer.wait_for(now[tailer.shard], 30)
                tailers = capped._tails.tailers
                after = [t.buffer.rows_after(start.tokens[s].position) for s, t in tailers.items()]
                if all(rows is not None and rows > 60 for rows in after):
                    break
            cut = StreamOffset.from_json(capped.latestOffset(first, None))
            for shard in SHARDS:
                token: EventToken = cut.tokens[shard]
                assert token.timestamp == start.tokens[shard].timestamp
                assert position_contains(now[shard], token.position)
                assert token.position != now[shard]
            held = held_parts(capped.partitions(first, cut.to_json()))
            assert all(0 < len(held.rows_of(p.shard)) <= 50 for p in held.ranges)


def test_a_held_range_of_more_than_inline_max_bytes_is_read_by_the_workers(
    cluster: DevCluster, tmp_path: Any
) -> None:
    """A partition is shipped to its task whole: a range the tail holds but whose rows pass
    `inlineMaxBytes` goes to the workers in binlog pieces instead."""
    config = config_for(
        cluster, tail="true", inlineMaxRows="100000", inlineMaxBytes="65536", maxBatchRows="0"
    )
    with tailing_reader(config) as (reader, offset):
        traffic(cluster, tmp_path, 62, large_tx_rows=400, large_tx_every=0.3)
        end = reader.latestOffset(offset, None)
        parts = reader.partitions(offset, end)
        assert parts and all(isinstance(p, BinlogRangePartition) for p in parts)
        begin, until = StreamOffset.from_json(offset).tokens, StreamOffset.from_json(end).tokens
        for shard, tailer in reader._tails.tailers.items():
            held = tailer.buffer.rows_between(begin[shard].position, until[shard].position, 10**6)
            assert held is not None  # the tail held the range: its size alone sent it away
            assert (
                tailer.buffer.rows_between(
                    begin[shard].position, until[shard].position, 10**6, 65536
                )
                is None
            )


def test_a_backlog_past_the_tails_buffer_comes_in_batches_of_about_max_batch_bytes(
    cluster: DevCluster, tmp_path: Any
) -> None:
    """A backlog the tails cannot hold (their buffers overflow) is not one unbounded batch: each
    batch ends about `maxBatchBytes` of binlog after its start, at an exact position with the
    start's time, and the batches read back to back are the backlog, every row once."""
    config = config_for(cluster, tail="true", tailBufferRows="50", maxBatchBytes="65536")
    with tailing_reader(config) as (reader, first):
        traffic(cluster, tmp_path, 61, large_tx_rows=400, large_tx_every=0.25)
        now = positions(config)
        start, ends = first, {s: [] for s in SHARDS}
        read = dict.fromkeys(SHARDS, 0)
        for _ in range(500):
            tokens = StreamOffset.from_json(start).tokens
            if all(tokens[s].position == now[s] for s in SHARDS):
                break
            end = reader.latestOffset(start, None)
            cut = StreamOffset.from_json(end).tokens
            for shard in SHARDS:
                if cut[shard].position != tokens[shard].position:
                    ends[shard].append(cut[shard])
            for part in reader.partitions(start, end):
                for row in arrow_rows(config, part):
                    read[row["shard"]] += row["op"] != "heartbeat"
            reader.commit(end)
            start = end
        begun = StreamOffset.from_json(first).tokens
        for shard in SHARDS:
            *cuts, last = ends[shard]
            assert last.position == now[shard] and len(cuts) >= 3, (shard, len(cuts))
            assert all(t.timestamp == begun[shard].timestamp for t in cuts)
            backlog = executor_rows(config, shard, begun[shard].position, now[shard])
            assert read[shard] == len(backlog)


@pytest.fixture(autouse=True)
def _quiet_pause() -> None:
    time.sleep(0.1)  # let the previous test's tails end


def test_the_startup_heap_is_frozen_once_per_process() -> None:
    """Before its first tail a reader's process leaves what is alive then out of later
    collections; a second tail freezes nothing more (what the stream makes later stays
    collectable)."""
    script = (
        "import gc\n"
        "from updatestream_jobs.source.tails import freeze_startup_heap\n"
        "before = gc.get_freeze_count()\n"
        "freeze_startup_heap()\n"
        "frozen = gc.get_freeze_count()\n"
        "later = [[n] for n in range(1000)]\n"
        "freeze_startup_heap()\n"
        "print(before, frozen, gc.get_freeze_count())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=120
    ).stdout.split()
    before, frozen, after = (int(n) for n in out)
    assert before == 0 and frozen > 10_000 and after == frozen, out


def test_a_tail_behind_hands_over_what_it_read_and_one_behind_a_batch_end_follows_from_it(
    cluster: DevCluster, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tail far behind its shard's head ends the batch where it stands (its rows go inline;
    no worker reads them again), and a tail behind the end of a batch the workers read starts
    again from that end instead of reading the same binlog after them (not while a snapshot
    reads: its batches end at the head and a tail a moment behind is left to catch up)."""
    config = config_for(cluster, tail="true")
    shard = SHARDS[0]
    old = positions(config)[shard]
    for seed in (71, 72, 73):  # a backlog the tail takes a while to read
        traffic(cluster, tmp_path, seed, large_tx_rows=2000, large_tx_every=0.2)
    head = EventToken(int(time.time()), shard, positions(config)[shard])
    start = EventToken(int(time.time()) - 60, shard, old)
    monkeypatch.setattr(tails_module, "BEHIND", 0)  # any distance counts as behind
    with tailing_reader(config) as (reader, _offset):
        tails = reader._tails
        tails.stop()
        tails.follow({shard: start})  # a tail from the old position: behind by the backlog
        tailer = tails.tailers[shard]
        while tailer.buffer.position == old:
            time.sleep(0.001)
        held = tails.held_end(shard, start, head)
        assert held is not None and held.timestamp == start.timestamp
        assert held.position != old and position_contains(head.position, held.position)
        assert not position_contains(tailer.buffer.position, head.position)  # still behind
        tails.follow({shard: head}, skip_ahead=False)  # a snapshot's batch: kept
        assert tails.tailers[shard] is tailer
        tails.follow({shard: head})
        again = tails.tailers[shard]
        assert again is not tailer and again.buffer.base == head.position
        assert tails.held_end(shard, head, head) is None  # nothing read past the end yet
