"""The snapshot inside the stream: planning chunks on the driver, reading them on the workers.

`SnapshotPlanner` runs in the driver's stream reader. When a stream starts with `start:
snapshot`, it records the highest key of every table on every shard of the key range (the
chunks' last upper bound) in the first offset. Each later `latestOffset` plans the next chunks
(up to `snapshotChunksPerBatch`, one per table and key range, upper bounds fixed by one
index-ordered query) into the offset it hands out. So the snapshot's progress is in Spark's
offset log: a job killed at any moment replays its last batch with the same chunks and goes on
with the next unfinished ones; finished chunks are never read again.

Each planned chunk becomes one `SnapshotChunkPartition` per shard holding part of its key range;
the worker reads it as of the batch's end token of that shard (`updatestream.snapshot.chunks`).
The batch's binlog partitions drop the events the starting snapshot will cover
(`SnapshotFilter`); a snapshot on demand drops none, and its rows are `reread` events.

A snapshot on demand: `snapshotRequests` names a file of JSON lines, `{"id": ..., "table": ...,
"keyRange": ...}`; the planner reads it at each batch and adds the ranges of a request id it has
not seen, so the same chunk algorithm re-reads a table (or part of its key range) while the
stream runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from updatestream.binlog.config import ShardEndpoint
from updatestream.binlog.errors import SourceOptionsError
from updatestream.binlog.session import ShardSession
from updatestream.core.keyrange import KeyRange
from updatestream.core.snapshot_plan import (
    Chunk,
    SnapshotRange,
    SnapshotState,
    next_chunks,
)
from updatestream.core.token import EventToken
from updatestream.core.vschema import VSchema
from updatestream.snapshot.chunks import ChunkReader, snapshot_database
from updatestream.snapshot.tables import (
    TableInfo,
    chunk_upper,
    describe_table,
    estimated_rows,
    last_key,
)
from updatestream_jobs.source.arrow_rows import ARROW_SCHEMA
from updatestream_jobs.source.offsets import StreamOffset
from updatestream_jobs.source.options import SourceConfig
from updatestream_jobs.source.partitions import SourcePartition

log = logging.getLogger(__name__)


class SnapshotChunkPartition(SourcePartition):
    """One snapshot chunk on one shard, read as of `at` (the shard's end token, JSON)."""

    def __init__(
        self, shard: str, chunk: str, at: str, endpoint: ShardEndpoint | None, op: str = "snapshot"
    ) -> None:
        super().__init__((shard, chunk, at))
        self.shard = shard
        self.chunk = chunk
        self.at = at
        self.endpoint = endpoint
        self.op = op  # "snapshot" (the starting snapshot) or "reread" (a snapshot on demand)

    def __repr__(self) -> str:
        return f"SnapshotChunkPartition({self.shard}, {self.chunk})"

    def read(self, config: SourceConfig) -> Iterator[pa.RecordBatch]:
        return chunk_batches(config, self, ARROW_SCHEMA, max(config.arrow_batch_rows, 8192))


def chunk_batches(
    config: SourceConfig, part: SnapshotChunkPartition, schema: pa.Schema, max_rows: int
) -> Iterator[pa.RecordBatch]:
    """The chunk's `snapshot` events as Arrow record batches of `schema` (the source's), built
    column by column: the row texts come from the shard, the rest is the same for every row."""
    chunk = Chunk.from_json(json.loads(part.chunk))
    endpoint = part.endpoint or config.endpoint(part.shard)
    at = EventToken.loads(part.at)
    found = ChunkReader(config.reader, endpoint, chunk, at).columns()
    size = len(found)
    constants: dict[str, Any] = {
        "keyspace": config.keyspace, "shard": endpoint.shard, "op": part.op,
        "table": chunk.table, "token": at.dumps(), "timestamp": at.timestamp,
        "gtid": str(at.position), "tx_index": 0,
    }  # fmt: skip
    given = {"pk": found.pk, "keyspace_id": found.keyspace_id, "after": found.row}
    columns = []
    for field in schema:
        if field.name in given:
            columns.append(given[field.name])
        elif field.name in constants:
            columns.append(pa.repeat(pa.scalar(constants[field.name], field.type), size))
        else:
            columns.append(pa.nulls(size, field.type))
    batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    for offset in range(0, size, max_rows):
        yield batch.slice(offset, max_rows)


def stream_tables(config: SourceConfig) -> list[str]:
    """The tables the snapshot reads: the stream's, else every table of the VSchema."""
    if config.tables:
        return list(config.tables)
    vschema = VSchema.from_json(config.vschema_json, keyspace=config.keyspace)
    return sorted(name for name, vindexes in vschema.tables.items() if vindexes)


class SnapshotPlanner:
    """Driver-side: starts the snapshot, plans each batch's chunks, takes requests."""

    def __init__(self, config: SourceConfig, session: Callable[[str], ShardSession]) -> None:
        self.config = config
        self._session = session
        self._infos: dict[tuple[str, str], TableInfo] = {}
        self._requests_seen = 0

    def _info(self, shard: str, table: str) -> TableInfo:
        if (shard, table) not in self._infos:
            database = snapshot_database(self.config.reader)
            self._infos[(shard, table)] = describe_table(self._session(shard), database, table)
        return self._infos[(shard, table)]

    def _ranges(
        self, shards: list[str], tables: list[str], within: KeyRange, request: str | None
    ) -> list[SnapshotRange]:
        """One range per shard and table; `request` None: the stream's starting snapshot."""
        ranges = []
        for shard in sorted(shards):
            part = KeyRange.parse(shard).intersection(within)
            if part is None:
                continue
            for table in tables:
                info = self._info(shard, table)
                session = self._session(shard)
                last = last_key(session, info)
                estimate = estimated_rows(session, info) // self.config.snapshot_chunk_rows + 1
                ranges.append(
                    SnapshotRange(
                        part.name, table, last, done=last is None, request=request or "start",
                        estimate=estimate, on_demand=request is not None,
                    )
                )  # fmt: skip
        return ranges

    def begin(self, offset: StreamOffset) -> StreamOffset:
        """The first offset of a stream that starts with a snapshot."""
        ranges = self._ranges(
            list(offset.tokens), stream_tables(self.config), KeyRange.parse(self.config.key_range),
            None,
        )  # fmt: skip
        state = SnapshotState(tuple(ranges), started_at=time.time())
        log.info(
            "snapshot of %d tables x key ranges planned (%d already empty)",
            len(ranges),
            sum(1 for r in ranges if r.done),
        )
        return dataclasses.replace(offset, snapshot=state)

    def plan(self, offset: StreamOffset) -> StreamOffset:
        """`offset` with the next batch's chunks planned (none while a hop is being made)."""
        state = self._take_requests(offset)
        if state is None:
            return offset
        if state.finished:
            return dataclasses.replace(offset, snapshot=state.advance(()))
        planned = []
        frontiers: dict[str, Any] = {}  # a range's frontier after the chunks planned so far
        for item in next_chunks(state, self.config.snapshot_chunks_per_batch):
            frontier = frontiers.get(item.ident, item.frontier)
            assert item.last is not None
            if frontier is not None and frontier >= item.last:
                continue  # the range's last chunk is already planned in this batch
            shard = self._holder(offset, item.key_range)
            upto = chunk_upper(
                self._session(shard), self._info(shard, item.table), frontier,
                self.config.snapshot_chunk_rows, item.last,
            )  # fmt: skip
            frontiers[item.ident] = upto
            planned.append((item, upto))
        return dataclasses.replace(offset, snapshot=state.advance(planned))

    def _holder(self, offset: StreamOffset, key_range: str) -> str:
        wanted = KeyRange.parse(key_range)
        for shard in sorted(offset.tokens):
            if KeyRange.parse(shard).intersects(wanted):
                return shard
        raise SourceOptionsError(f"no shard of the stream holds snapshot key range {key_range}")

    def _take_requests(self, offset: StreamOffset) -> SnapshotState | None:
        state = offset.snapshot
        path = self.config.snapshot_requests
        if not path:
            return state
        for request in read_requests(Path(path)):
            ident = str(request["id"])
            if state is not None and ident in state.requests:
                continue
            known = stream_tables(self.config)
            tables = [str(request["table"])] if request.get("table") else known
            if not set(tables) <= set(known):
                log.warning(
                    "snapshot request %s names table %s, which stream does not read (%s); "
                    "ignored", ident, request["table"], ", ".join(known),
                )  # fmt: skip
                tables = []
            within = KeyRange.parse(self.config.key_range)
            if request.get("keyRange"):
                part = within.intersection(KeyRange.parse(str(request["keyRange"])))
                if part is None:
                    log.warning("snapshot request %s is outside key range %s", ident, within)
                    continue
                within = part
            ranges = self._ranges(list(offset.tokens), tables, within, ident)
            log.info("snapshot request %s: %d ranges of %s", ident, len(ranges), tables)
            if state is None:
                state = SnapshotState((), started_at=time.time(), requests=())
            state = state.with_request(ident, ranges)
        return state

    def chunk_partitions(
        self,
        begin: StreamOffset,
        finish: StreamOffset,
        endpoint: Callable[[str], ShardEndpoint],
    ) -> list[SnapshotChunkPartition]:
        """The chunk partitions of the batch from `begin` to `finish`."""
        if finish.snapshot is None:
            return []
        chunks = finish.snapshot.chunks_of_batch(begin.snapshot)
        parts = []
        for chunk in chunks:
            wanted = KeyRange.parse(chunk.key_range)
            text = json.dumps(chunk.to_json(), sort_keys=True)
            op = "reread" if finish.snapshot.range(chunk.range_ident).on_demand else "snapshot"
            for shard, token in sorted(finish.tokens.items()):
                if KeyRange.parse(shard).intersects(wanted):
                    parts.append(
                        SnapshotChunkPartition(shard, text, token.dumps(), endpoint(shard), op)
                    )
        return parts


def read_requests(path: Path) -> list[dict[str, Any]]:
    """The snapshot requests in `path` (JSON lines); a missing file holds none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    requests = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceOptionsError(
                f"snapshot request file {path} line {number} is not JSON ({exc}); write one "
                'object per line: {"id": "...", "table": "...", "keyRange": "..."}'
            ) from None
        if not isinstance(data, dict) or not data.get("id"):
            raise SourceOptionsError(
                f"snapshot request file {path} line {number} needs an 'id' (any text, unique "
                "per request)"
            )
        requests.append(data)
    return requests
