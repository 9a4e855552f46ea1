"""Reading one snapshot chunk from one shard, exactly as the table was at a given position.

`read_chunk` runs where Spark puts the chunk's partition. It reads the chunk's rows with one
plain SELECT (autocommit: no lock, no transaction held beyond the statement, nothing written),
then asks the shard for its GTID position. Between the position the chunk is read *as of* (the
batch's end position `at`) and that later position, the binlog holds every change that may have
reached the SELECT; the binlog's before images undo them: for each key of the chunk, the first
change after `at` tells the key's state at `at` (an insert: the row did not exist; an update or a
delete: its before image). Keys with no change in that window are unchanged since `at`. The
result is the chunk exactly at `at`, read without a consistent-snapshot transaction, and the
window is usually empty (no binlog read at all).

A schema change of the table while the chunk is read: the SELECT reads `*`, so its rows have the
columns of the moment it ran; a key whose state comes from a before image has the columns of
that change. Each row is a faithful image of its key; nothing fails or is lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
import pymysql.cursors

from updatestream.binlog.config import ReaderConfig, ShardEndpoint
from updatestream.binlog.errors import ShardUnreachable
from updatestream.binlog.events import encode_row
from updatestream.binlog.range_reader import BinlogRangeReader
from updatestream.binlog.row_converter import EventRow, RowConverter
from updatestream.binlog.session import (
    ShardSession,
    connection_settings,
    describe,
    flavor_of,
    retryable,
)
from updatestream.core.gtid import position_contains
from updatestream.core.keyrange import KeyRange
from updatestream.core.snapshot_plan import Chunk, Key
from updatestream.core.token import EventToken
from updatestream.core.vschema import VSchema
from updatestream.snapshot.columns import columnar_query, exact_text, fetch, keyspace_ids
from updatestream.snapshot.tables import TableInfo, convert_row, describe_table

_FETCH = 2000


def snapshot_database(config: ReaderConfig) -> str:
    """The database the snapshot reads: the stream's, else the keyspace's name."""
    return config.database or config.keyspace


def _in_chunk(key: Key, chunk: Chunk) -> bool:
    return (chunk.after is None or key > chunk.after) and key <= chunk.upto


class ChunkReader:
    """Reads one chunk of one table from one shard as of the token `at`."""

    def __init__(
        self,
        config: ReaderConfig,
        endpoint: ShardEndpoint,
        chunk: Chunk,
        at: EventToken,
    ) -> None:
        self.config = config
        self.endpoint = endpoint
        self.chunk = chunk
        self.at = at
        self.key_range = KeyRange.parse(chunk.key_range)
        self.vschema = VSchema.from_json(config.vschema_json, keyspace=config.keyspace)
        self.window_changes = 0  # binlog changes undone to bring the chunk back to `at`

    def columns(self) -> ChunkColumns:
        """The chunk's rows as of `at`: primary-key JSON, keyspace id and row JSON columns."""
        with ShardSession(self.endpoint, self.config) as session:
            info = describe_table(session, snapshot_database(self.config), self.chunk.table)
            query = columnar_query(info, self.vschema)
            if query is None:
                images = self._select(info)
                after, _ = session.current_position()
                found = ChunkColumns.from_images(images)
            else:
                where, args = self._where(info)
                table = fetch(self.endpoint, self.config, query.sql(where, args))
                after, _ = session.current_position()
                vindex = [table[f"_v{i}"] for i in range(len(query.vindex_columns))]
                mask, ksids = keyspace_ids(info, self.vschema, vindex, self.key_range)
                found = ChunkColumns(
                    exact_text(table["_pk"]).filter(mask),
                    ksids.filter(mask),
                    exact_text(table["_row"]).filter(mask),
                )
        if not position_contains(self.at.position, after):
            overrides: dict[str, tuple[str, str] | None] = {}
            self._undo(info, overrides, after)
            found = found.overridden(overrides)
        return found

    def rows(self) -> Iterator[EventRow]:
        """The chunk's rows as `snapshot` event tuples (ChangeEvent field order)."""
        found = self.columns()
        token, gtid = self.at.dumps(), str(self.at.position)
        keyspace, shard, table = self.config.keyspace, self.endpoint.shard, self.chunk.table
        for pk, ksid, image in zip(
            found.pk.to_pylist(), found.keyspace_id.to_pylist(), found.row.to_pylist(), strict=True
        ):
            yield (
                keyspace, shard, "snapshot", table, pk, ksid, None, image,
                token, self.at.timestamp, gtid, 0, None, None, None,
            )  # fmt: skip

    def _where(self, info: TableInfo) -> tuple[str, list[Any]]:
        where, args = info.at_most(self.chunk.upto)
        if self.chunk.after is not None:
            above, more = info.above(self.chunk.after)
            where, args = f"{above} AND {where}", more + args
        return where, args

    def _keyspace_id(self, row: dict[str, Any]) -> str | None:
        ksid = self.vschema.keyspace_id_for(self.chunk.table, row)
        if ksid is None or not self.key_range.contains(ksid):
            return None
        return ksid.hex()

    def _select(self, info: TableInfo) -> dict[str, tuple[str, str]]:
        """pk JSON -> (keyspace id hex, row JSON) of the chunk's rows in its key range (the row
        path, for tables the columnar query cannot encode exactly)."""
        where, args = self._where(info)
        sql = f"SELECT * FROM {info.qualified} WHERE {where}"
        settings = connection_settings(self.endpoint, self.config)
        try:
            conn = pymysql.connect(
                autocommit=True, cursorclass=pymysql.cursors.SSCursor, **settings
            )
        except pymysql.err.MySQLError as exc:
            raise ShardUnreachable(
                f"cannot read snapshot chunk of {info.name} from {self.endpoint.describe()}: "
                f"{describe(exc)}"
            ) from None
        images: dict[str, tuple[str, str]] = {}
        key_names = info.key_names
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, args)
                columns = [d[0] for d in cursor.description]
                while batch := cursor.fetchmany(_FETCH):
                    for values in batch:
                        row = convert_row(info, columns, values)
                        ksid = self._keyspace_id(row)
                        if ksid is not None:
                            pk = encode_row({name: row[name] for name in key_names})
                            images[pk] = (ksid, encode_row(row))
        except pymysql.err.MySQLError as exc:
            if retryable(exc):
                raise ShardUnreachable(
                    f"snapshot chunk of {info.name} on {self.endpoint.describe()} was cut off: "
                    f"{describe(exc)}"
                ) from None
            raise
        finally:
            conn.close()
        return images

    def _undo(self, info: TableInfo, images: dict[str, tuple[str, str] | None], upto: Any) -> None:
        """The chunk's keys the window changed, each with its state at `at` (None: absent)."""
        converter = RowConverter(self.config, self.endpoint.shard, flavor_of(self.endpoint))
        reader = BinlogRangeReader(self.endpoint, self.config, self.at.position, upto, converter)
        settled: set[str] = set()
        key_names = info.key_names
        for row in reader.rows():
            if row[3] != self.chunk.table:
                continue
            before, after = row[6], row[7]
            self.window_changes += 1
            touched: list[tuple[dict[str, Any], str | None]] = []
            if before is not None:  # the key held its before image at `at`
                touched.append((json.loads(before), before))
            if after is not None:
                new = json.loads(after)
                if before is None or not _same_key(touched[0][0], new, key_names):
                    touched.append((new, None))  # the key did not exist at `at`
            for decoded, state in touched:
                key = tuple(decoded[name] for name in key_names)
                pk = encode_row({name: decoded[name] for name in key_names})
                if pk in settled or not _in_chunk(key, self.chunk):
                    continue
                settled.add(pk)
                ksid = self._keyspace_id(decoded) if state is not None else None
                images[pk] = None if state is None or ksid is None else (ksid, state)


@dataclass(frozen=True)
class ChunkColumns:
    """A chunk's rows as three aligned Arrow string columns."""

    pk: pa.Array
    keyspace_id: pa.Array
    row: pa.Array

    def __len__(self) -> int:
        return len(self.pk)

    @classmethod
    def from_images(cls, images: Mapping[str, tuple[str, str]]) -> ChunkColumns:
        return cls(
            pa.array(list(images), type=pa.string()),
            pa.array([k for k, _ in images.values()], type=pa.string()),
            pa.array([r for _, r in images.values()], type=pa.string()),
        )

    def overridden(self, overrides: dict[str, tuple[str, str] | None]) -> ChunkColumns:
        """These rows with each key of `overrides` replaced by its state (None: removed)."""
        if not overrides:
            return self
        keep = pc.invert(pc.is_in(self.pk, value_set=pa.array(list(overrides), pa.string())))
        present = {pk: state for pk, state in overrides.items() if state is not None}
        return ChunkColumns(
            pa.concat_arrays([self.pk.filter(keep), pa.array(list(present), pa.string())]),
            pa.concat_arrays(
                [
                    self.keyspace_id.filter(keep),
                    pa.array([k for k, _ in present.values()], pa.string()),
                ]
            ),
            pa.concat_arrays(
                [self.row.filter(keep), pa.array([r for _, r in present.values()], pa.string())]
            ),
        )


def _same_key(old: dict[str, Any], new: dict[str, Any], key_names: tuple[str, ...]) -> bool:
    return all(old.get(n) == new.get(n) for n in key_names)
