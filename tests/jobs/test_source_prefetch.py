"""`prefetchHeld` and `switchIntervalMs` against real MariaDB shards: a batch the tails hold
whole is handed to Spark with its plan (the rows its streaming source runner sends to the JVM
are exactly the batch's rows, once, and only for the batch just planned); a batch with a range
the tails do not hold is not, and its partitions are read by the workers as without the option.
The stream reader's process runs its tails with the GIL switch interval `switchIntervalMs`
asks for."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_jobs.source.data_source import (
    PrefetchingStreamReader,
    UpdateStreamDataSource,
    UpdateStreamStreamReader,
)
from updatestream_jobs.source.offsets import StreamOffset
from updatestream_jobs.source.options import SourceConfig
from updatestream_jobs.source.partitions import BinlogRangePartition, HeldRowsPartition

from tests.binlogs import config_for
from tests.jobs.test_source_tail import SHARDS, arrow_rows, traffic, wait_until
from updatestream.core.gtid import GTIDPosition, position_contains


@contextlib.contextmanager
def prefetching(config: SourceConfig) -> Iterator[tuple[PrefetchingStreamReader, Any]]:
    reader = PrefetchingStreamReader(config)
    try:
        offset = reader.initialOffset()
        assert reader.partitions(offset, offset) == []  # no range: starts the tails
        assert reader.getCache(offset, offset) is None
        yield reader, offset
    finally:
        reader.stop()


def start_of(offset: Any, shard: str) -> GTIDPosition:
    return StreamOffset.from_json(offset).tokens[shard].position


def cached_rows(reader: PrefetchingStreamReader, start: Any, end: Any) -> list[dict[str, Any]]:
    cached = reader.getCache(start, end)
    assert cached is not None
    batches = list(cached)
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def test_the_option_picks_the_reader_spark_prefetches_from(cluster: DevCluster) -> None:
    options = {"keyspace": str(cluster.manifest_path), "secretsDir": str(cluster.secrets_dir)}
    plain = UpdateStreamDataSource({**options, "prefetchHeld": "false"}).streamReader(None)  # type: ignore[arg-type]
    assert type(plain) is UpdateStreamStreamReader
    on = UpdateStreamDataSource(options).streamReader(None)  # type: ignore[arg-type]  # the default
    assert isinstance(on, PrefetchingStreamReader)
    assert isinstance(on, _SimpleStreamReaderWrapper)  # what Spark's runner asks for its rows
    assert on.simple_reader is on  # trigger AvailableNow: the runner asks the simple reader
    off = {**options, "prefetchHeld": "true", "tail": "false"}  # nothing is ever held
    assert type(UpdateStreamDataSource(off).streamReader(None)) is UpdateStreamStreamReader  # type: ignore[arg-type]
    for reader in (plain, on):
        reader.stop()


def test_a_held_batch_is_handed_over_once_and_a_read_one_is_not(
    cluster: DevCluster, tmp_path: Any
) -> None:
    config = config_for(
        cluster, tail="true", prefetchHeld="true", maxBatchRows="0", switchIntervalMs="2"
    )
    before = sys.getswitchinterval()
    with prefetching(config) as (reader, offset):
        assert sys.getswitchinterval() == 0.002  # set as the tails started
        sys.setswitchinterval(before)  # this test process's own
        traffic(cluster, tmp_path, 41, large_tx_rows=300, large_tx_every=0.3)
        end = reader.latestOffset(offset, None)
        (held,) = reader.partitions(offset, end)
        assert isinstance(held, HeldRowsPartition)
        assert reader.getCache(end, end) is None  # another range: not this batch's rows
        (held,) = reader.partitions(offset, end)  # Spark may plan a batch again
        rows = cached_rows(reader, offset, end)
        assert len(rows) > 300 and rows == arrow_rows(config, held)
        assert [r["op"] for r in rows].count("heartbeat") == 2  # a heartbeat per shard
        assert reader.getCache(offset, end) is None  # handed over once
        reader.commit(end)

        # an offset the tails have read past names those shards, at the tails' positions
        traffic(cluster, tmp_path, 43)
        tails = reader._tails
        assert tails is not None

        def past_end(shard: str) -> bool:
            here, there = tails.tailers[shard].buffer.position, start_of(end, shard)
            return here != there and position_contains(here, there)

        def read_to() -> dict[str, GTIDPosition]:
            return {shard: tails.tailers[shard].buffer.position for shard in SHARDS}

        wait_until(lambda: all(past_end(shard) for shard in SHARDS))
        # the tails may still be reading: the offset holds where each was during the call
        ahead = read_to()
        handed = StreamOffset.from_json(reader._handed_out(StreamOffset.from_json(end)))
        later = read_to()
        assert set(handed.behind) == set(SHARDS)
        for shard, token in handed.behind.items():
            assert position_contains(token.position, ahead[shard]), (shard, token, ahead)
            assert position_contains(later[shard], token.position), (shard, token, later)
        assert StreamOffset.from_json(handed.to_json()) == handed

    # a tail may hand over at most 10 rows of a range: the workers read it
    config = config_for(cluster, tail="true", prefetchHeld="true", inlineMaxRows="10")
    with prefetching(config) as (reader, offset):
        traffic(cluster, tmp_path, 42)
        end = reader.latestOffset(offset, None)
        parts = reader.partitions(offset, end)
        assert parts and all(isinstance(p, BinlogRangePartition) for p in parts)
        assert reader.getCache(offset, end) is None
