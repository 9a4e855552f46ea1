"""Control connections to a shard and the GTID helpers every binlog reader shares.

`ShardSession` runs the few SQL statements the source needs: the settings check that refuses a
server whose binlog cannot give full row changes, the shard's current GTID position and clock,
its binlog files and the GTID position at the start of each file.
"""

from __future__ import annotations

import contextlib
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
from pymysql.constants.COMMAND import COM_BINLOG_DUMP
from pymysqlreplication import BinLogStreamReader

from updatestream.binlog.config import ReaderConfig, RetryPolicy, ShardEndpoint
from updatestream.binlog.errors import BinlogSettingsError, ShardUnreachable
from updatestream.core.gtid import (
    Flavor,
    GTIDPosition,
    MariaDBGTID,
    MariaDBPosition,
    MySQLGTIDSet,
    parse_position,
    position_contains,
)
from updatestream.mysql_connections import connection_arguments
from updatestream.spec import MySQLEndpoint, SecretRef

# (variable, required value, server flag to set)
REQUIRED_SETTINGS = (
    ("log_bin", "ON", "--log-bin"),
    ("binlog_format", "ROW", "binlog_format=ROW"),
    ("binlog_row_image", "FULL", "binlog_row_image=FULL"),
    ("binlog_row_metadata", "FULL", "binlog_row_metadata=FULL"),
)
_FATAL_CODES = {1045, 1227, 1236, 1044}  # access denied, missing privilege, binlog refused


def flavor_of(endpoint: ShardEndpoint) -> Flavor:
    return Flavor.MYSQL if endpoint.flavor == "mysql" else Flavor.MARIADB


def connection_settings(endpoint: ShardEndpoint, config: ReaderConfig) -> dict[str, Any]:
    """pymysql settings for a shard; they hold the password, so they are never logged."""
    return connection_arguments(
        MySQLEndpoint(host=endpoint.host, port=endpoint.port, tls=endpoint.tls),
        Path(config.secrets_dir),
        SecretRef(name=endpoint.secret),
        connect_timeout=config.retry.connect_timeout,
        read_timeout=config.retry.read_timeout,
    )


class SilentReconnect(Exception):
    """python-mysql-replication tried to reconnect the binlog stream on its own."""


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, pymysql.err.OperationalError | pymysql.err.InternalError):
        return not (exc.args and exc.args[0] in _FATAL_CODES)
    return isinstance(exc, SilentReconnect | pymysql.err.InterfaceError | OSError | struct.error)


def describe(exc: BaseException) -> str:
    if isinstance(exc, pymysql.err.MySQLError) and len(exc.args) >= 2:
        return f"MySQL error {exc.args[0]}: {exc.args[1]}"
    return f"{type(exc).__name__}: {exc}"


def _reduce_mariadb(text: str) -> MariaDBPosition:
    """A MariaDB position from a GTID list that may hold several server ids per domain."""
    best: dict[int, MariaDBGTID] = {}
    for part in (p.strip() for p in text.replace("[", "").replace("]", "").split(",")):
        if part:
            gtid = MariaDBGTID.parse(part)
            if gtid.domain not in best or gtid.seq > best[gtid.domain].seq:
                best[gtid.domain] = gtid
    return MariaDBPosition(best.values())


class ShardSession:
    """A control connection to one shard, reconnected with bounded retries."""

    def __init__(
        self,
        endpoint: ShardEndpoint,
        config: ReaderConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint = endpoint
        self.flavor = flavor_of(endpoint)
        self.config = config
        self._retry: RetryPolicy = config.retry
        self._sleep = sleep
        self._conn: Any = None
        self._file_starts: dict[str, GTIDPosition] = {}
        self._inner: dict[str, tuple[int, list[tuple[int, GTIDPosition]]]] = {}

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # already gone
                self._conn.close()
            self._conn = None

    def __enter__(self) -> ShardSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, sql: str, args: object = None) -> list[tuple[Any, ...]]:
        attempt = 0
        while True:
            try:
                if self._conn is None:
                    settings = connection_settings(self.endpoint, self.config)
                    self._conn = pymysql.connect(autocommit=True, **settings)
                with self._conn.cursor() as cursor:
                    cursor.execute(sql, args)
                    return list(cursor.fetchall())
            except Exception as exc:
                self.close()
                if not retryable(exc):
                    raise ShardUnreachable(
                        f"cannot query {self.endpoint.describe()}: {describe(exc)}; check the "
                        f"replication user in Secret {self.endpoint.secret!r} and its grants "
                        "(REPLICATION SLAVE, BINLOG MONITOR, SELECT)"
                    ) from None
                attempt += 1
                if attempt > self._retry.max_retries:
                    raise ShardUnreachable(
                        f"cannot reach {self.endpoint.describe()} after {attempt} attempts: "
                        f"{describe(exc)}; check that the server is up and reachable"
                    ) from None
                self._sleep(self._retry.backoff(attempt))

    def check_settings(self) -> None:
        """Refuse a server whose binlog cannot give full row changes."""
        names = tuple(name for name, _, _ in REQUIRED_SETTINGS)
        marks = ", ".join(["%s"] * len(names))
        rows = self.query(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", names)
        values = {str(name).lower(): str(value).upper() for name, value in rows}
        for name, required, fix in REQUIRED_SETTINGS:
            actual = values.get(name, "(not supported by this server)")
            if actual != required:
                raise BinlogSettingsError(
                    f"{name} is {actual} on {self.endpoint.describe()}; set {fix}"
                )

    def current_position(self) -> tuple[GTIDPosition, int]:
        """The shard's GTID position now and the server's clock (seconds)."""
        variable = "gtid_executed" if self.flavor is Flavor.MYSQL else "gtid_binlog_pos"
        rows = self.query(f"SELECT @@global.{variable}, UNIX_TIMESTAMP()")
        text, now = rows[0]
        return parse_position(str(text or ""), self.flavor), int(now)

    def binlog_files(self) -> list[tuple[str, int]]:
        return [(str(row[0]), int(row[1])) for row in self.query("SHOW BINARY LOGS")]

    def file_start(self, name: str) -> GTIDPosition:
        """The GTID position at the start of a binlog file (its Gtid_list / Previous_gtids)."""
        cached = self._file_starts.get(name)
        if cached is not None:
            return cached
        if self.flavor is Flavor.MARIADB:
            text = self.query("SELECT BINLOG_GTID_POS(%s, 4)", (name,))[0][0]
            position: GTIDPosition = _reduce_mariadb(str(text or ""))
        else:
            rows = self.query("SHOW BINLOG EVENTS IN %s LIMIT 3", (name,))
            info = next((str(r[5]) for r in rows if str(r[2]) == "Previous_gtids"), "")
            position = MySQLGTIDSet.parse(info)
        self._file_starts[name] = position
        return position

    def split_points(
        self, start: GTIDPosition, end: GTIDPosition, limit: int
    ) -> list[GTIDPosition]:
        """Cut points strictly between start and end, about `limit` bytes of binlog apart.

        Candidates are the binlog file boundaries and, in a MariaDB file larger than `limit`,
        the state before a transaction every `limit` bytes (found on the server by skipping
        events, see `_cuts_inside`). Each is an exact GTID position, so the pieces of the range
        read back to back are the range.
        """
        files = self.binlog_files()
        candidates: list[tuple[int, GTIDPosition]] = []  # (offset over all files, position)
        offset = 0
        for index, (name, size) in enumerate(files):
            begins = self.file_start(name)
            if not position_contains(end, begins) or (begins == end and index > 0):
                break  # this file begins at or after the end of the range
            following = files[index + 1][0] if index + 1 < len(files) else None
            if following is None or not position_contains(start, self.file_start(following)):
                candidates.append((offset, begins))
                if self.flavor is Flavor.MARIADB and size > limit:
                    inner = self._cuts_inside(name, size, limit)
                    candidates += [(offset + at, position) for at, position in inner]
            offset += size
        points: list[GTIDPosition] = []
        last = candidates[0][0] if candidates else 0
        for at, position in candidates:
            inside = not position_contains(start, position) and position != end
            if inside and position_contains(end, position) and at - last >= limit // 2:
                points.append(position)
                last = at
        return points

    def _cuts_inside(self, name: str, size: int, limit: int) -> list[tuple[int, GTIDPosition]]:
        """(byte offset, position before the transaction there), about every `limit` bytes of
        one file. Remembered per file and extended as the (active) file grows."""
        cursor, cuts = self._inner.get(name, (4, []))
        average = 0.0
        while cursor + limit < size:
            if not average:
                page = self.query("SHOW BINLOG EVENTS IN %s FROM %s LIMIT 64", (name, cursor))
                if len(page) < 2:
                    break
                average = max(1.0, (int(page[-1][4]) - cursor) / len(page))
            skip = max(1, int(limit / average))
            page = self.query("SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s, 64", (name, cursor, skip))
            gtid_at = next((int(row[1]) for row in page if str(row[2]) == "Gtid"), None)
            if gtid_at is None:  # past the end, or inside one very large transaction
                if not page:
                    break
                cursor = int(page[-1][4])
                continue
            average = max(1.0, (int(page[0][1]) - cursor) / skip)
            text = self.query("SELECT BINLOG_GTID_POS(%s, %s)", (name, gtid_at))[0][0]
            if text is None:
                break
            cuts = [*cuts, (gtid_at, _reduce_mariadb(str(text)))]
            cursor = gtid_at
        self._inner[name] = (cursor, cuts)
        return cuts


def server_id() -> int:
    # A replica connecting with the server id of another one kicks it off: pick a fresh one.
    return random.randint(1_000_000_000, 4_000_000_000)


class BinlogStream(BinLogStreamReader):  # type: ignore[misc]
    """python-mysql-replication's stream with a well-formed MariaDB GTID dump request.

    The library's MariaDB `COM_BINLOG_DUMP` packet declares 14 payload bytes and sends 15; the
    stray byte waits in the server's socket buffer until the dump thread next reads from the
    client, and the server then resets the connection mid-stream. This override sends the same
    request (start from `@slave_connect_state`, strict GTID mode) with the right length.
    """

    def _BinLogStreamReader__set_mariadb_settings(self) -> bytes:
        cursor = self._stream_connection.cursor()
        if self.auto_position is not None:
            cursor.execute("SET @slave_connect_state = %s", (self.auto_position,))
        cursor.execute("SET @slave_gtid_strict_mode = 1")
        cursor.execute("SET @slave_gtid_ignore_duplicates = 0")
        cursor.close()
        non_block = 0 if self._BinLogStreamReader__blocking else 0x01
        payload = struct.pack(
            "<BIHI", COM_BINLOG_DUMP, 4, non_block, self._BinLogStreamReader__server_id
        )  # binlog position 4, flags, our server id, then an empty file name
        return struct.pack("<i", len(payload)) + payload


def gtid_of(event: Any, flavor: Flavor) -> tuple[str, Callable[[GTIDPosition], bool], Any]:
    """(text, 'is it in this position?', what advances a position) for a GTID event."""
    if flavor is Flavor.MARIADB:
        gtid = MariaDBGTID(event.domain_id, event.server_id, event.gtid_seq_no)

        def in_mariadb(position: GTIDPosition) -> bool:
            if not isinstance(position, MariaDBPosition):
                return False
            seq = position.domain_seq(gtid.domain)
            return seq is not None and seq >= gtid.seq

        return str(gtid), in_mariadb, gtid
    sid, _, gno = str(event.gtid).partition(":")

    def in_mysql(position: GTIDPosition) -> bool:
        return isinstance(position, MySQLGTIDSet) and position.contains_gtid(sid, int(gno))

    return f"{sid}:{gno}", in_mysql, (sid, int(gno))


def advance(position: GTIDPosition, gtid: Any) -> GTIDPosition:
    if isinstance(position, MariaDBPosition):
        return position.advance(gtid)
    sid, gno = gtid
    return position.add(sid, gno)
