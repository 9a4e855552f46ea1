"""The kinds of partition a micro-batch of the source is made of; each reads itself.

Spark ships a partition to a worker (pickled) and calls the source's `read` with it; every kind
here has its own `read(config)`, which yields Arrow record batches of the source's schema:

* `BinlogRangePartition`: one shard range the worker reads from the shard's binlog (its own
  connections); a long range is several of these, cut at exact GTID positions;
* `HeldRowsPartition`: the ranges whose rows the driver's binlog tails already hold, all of a
  batch in one partition (one Spark task: a batch's fixed cost grows with its tasks); each range
  is read as on its own, with the same filters and its heartbeat;
* `SnapshotChunkPartition` (in `snapshots`): one snapshot chunk on one shard, read as of a token.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from updatestream.binlog.row_converter import EventRow
from updatestream_jobs.source.arrow_rows import record_batches
from updatestream_jobs.source.binlog_ranges import ShardRange, read_shard_rows
from updatestream_jobs.source.options import SourceConfig


class SourcePartition(InputPartition):
    """A piece of a micro-batch that one Spark task reads by itself."""

    def read(self, config: SourceConfig) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError


class BinlogRangePartition(SourcePartition):
    """One shard range, read by the worker from the shard's binlog."""

    def __init__(self, shard_range: ShardRange) -> None:
        super().__init__((shard_range.shard, shard_range.start, shard_range.end))
        self.range = shard_range

    def __repr__(self) -> str:
        return f"BinlogRangePartition({self.range!r})"

    def read(self, config: SourceConfig) -> Iterator[pa.RecordBatch]:
        part = self.range
        rows = read_shard_rows(config, part)
        return record_batches(rows, config.arrow_batch_rows, part.classifier())


class HeldRowsPartition(SourcePartition):
    """Shard ranges whose rows the driver's tails read, handed over with the partition."""

    def __init__(self, held: Sequence[tuple[ShardRange, list[EventRow]]]) -> None:
        super().__init__(tuple(part.shard for part, _ in held))
        self.held = list(held)

    @property
    def ranges(self) -> list[ShardRange]:
        return [part for part, _ in self.held]

    def rows_of(self, shard: str) -> list[EventRow]:
        return next(rows for part, rows in self.held if part.shard == shard)

    def __repr__(self) -> str:
        inner = ", ".join(f"{part!r}: {len(rows)} rows" for part, rows in self.held)
        return f"HeldRowsPartition({inner})"

    def read(self, config: SourceConfig) -> Iterator[pa.RecordBatch]:
        return itertools.chain.from_iterable(
            record_batches(
                read_shard_rows(config, part, rows), config.arrow_batch_rows, part.classifier()
            )
            for part, rows in self.held
        )
