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

The SELECT must see every transaction up to `at`. MySQL adds a transaction to `gtid_executed`
once it is committed, but MariaDB writes it into its binlog, and into `@@gtid_binlog_pos`,
before its rows are visible: a chunk read in that gap would hold a row that a transaction at or
before `at` deleted, stamped with `at`, and that row would win over the delete in every sink. So
on MariaDB the reader first waits until a consistent snapshot sees the binlog (its
`binlog_snapshot_file`/`_position`, which MariaDB keeps exact) up to where it ended once it held
`at` (`wait_until_visible`): from then on every read sees those transactions. Normally the
first snapshot does, and nothing waits.

A schema change of the table while the chunk is read: the SELECT reads `*`, so its rows have the
columns of the moment it ran; a key whose state comes from a before image has the columns of
that change. Each row is a faithful image of its key; nothing fails or is lost.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator, Mapping
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
from updatestream.core.gtid import (
    Flavor,
    GTIDPosition,
    MariaDBPosition,
    position_contains,
)
from updatestream.core.keyrange import KeyRange
from updatestream.core.snapshot_plan import Chunk, Key
from updatestream.core.token import EventToken
from updatestream.core.vschema import VSchema
from updatestream.snapshot.columns import columnar_query, exact_text, fetch, keyspace_ids
from updatestream.snapshot.tables import TableInfo, convert_row, describe_table

_FETCH = 2000
VISIBLE_WAIT_SECONDS = 30.0  # how long a chunk waits for the transactions up to `at` to show


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
        wait_until_visible(self.endpoint, self.config, self.at.position)
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


def wait_until_visible(
    endpoint: ShardEndpoint,
    config: ReaderConfig,
    position: GTIDPosition,
    *,
    timeout: float = VISIBLE_WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Return once every transaction up to `position` is visible to reads on a MariaDB shard
    (at once on MySQL: see the module); returns how many times it looked.

    It reads the shard's GTID position until it contains `position`, and then the end of the
    binlog, which holds those transactions whole (both are written under the binlog's lock).
    Then it opens consistent snapshots until one sees the binlog up to that end (MariaDB keeps
    a snapshot's binlog coordinates exact): every read that starts later sees the transactions
    up to `position`. The end is read once, so commits that keep coming cannot outrun the
    wait; nothing scans the binlog."""
    if flavor_of(endpoint) is not Flavor.MARIADB:
        return 0
    settings = connection_settings(endpoint, config)
    deadline = time.monotonic() + timeout
    looks = 0
    written: GTIDPosition | None = None
    target: BinlogCoordinates | None = None
    seen: BinlogCoordinates | None = None
    try:
        conn = pymysql.connect(autocommit=True, **settings)
        try:
            while True:
                looks += 1
                if target is None:
                    written, end = _written(conn)
                    target = end if position_contains(written, position) else None
                if target is not None:
                    seen = _seen(conn)
                    if seen >= target:
                        return looks
                if time.monotonic() > deadline:
                    raise ShardUnreachable(
                        f"{endpoint.describe()} did not make the transactions up to {position} "
                        f"visible within {timeout:.0f}s (its binlog holds {written}; reads see "
                        f"up to {seen and seen[2]}:{seen and seen[1]}); a commit is stalled on "
                        "the shard (disk full, a hung storage engine?)"
                    )
                sleep(min(0.5, 0.005 * 2**looks))
        finally:
            conn.close()
    except pymysql.err.MySQLError as exc:
        raise ShardUnreachable(
            f"cannot read the visible position of {endpoint.describe()}: {describe(exc)}"
        ) from None


BinlogCoordinates = tuple[int, int, str]  # file number, offset, file name


def _written(conn: Any) -> tuple[GTIDPosition, BinlogCoordinates]:
    """The shard's GTID position, then the end of its binlog."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@global.gtid_binlog_pos")
        text = str((cur.fetchone() or ("",))[0] or "")
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    if row is None:
        raise pymysql.err.OperationalError(0, "SHOW MASTER STATUS is empty: no binlog")
    # per domain the highest GTID is where the binlog stands
    parts = (MariaDBPosition.parse(p) for p in text.split(",") if p.strip())
    position = functools.reduce(MariaDBPosition.union, parts, MariaDBPosition())
    return position, _coordinates(str(row[0]), int(row[1]))


def _seen(conn: Any) -> BinlogCoordinates:
    """Where a consistent snapshot opened now sees the binlog up to."""
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {str(name).lower(): value for name, value in cur.fetchall()}
        cur.execute("COMMIT")
    return _coordinates(
        str(status["binlog_snapshot_file"]), int(status["binlog_snapshot_position"])
    )


def _coordinates(name: str, offset: int) -> BinlogCoordinates:
    """Binlog coordinates in their order: files are numbered `<base>.000001`, `.000002`, ..."""
    number = name.rpartition(".")[2]
    return (int(number) if number.isdigit() else 0, offset, name)


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
