"""Read rows together with the position they were read at, as Event Tokens for the cache.

:class:`SnapshotReader` reads from one shard's primary. On MariaDB it is exact: it opens
``START TRANSACTION WITH CONSISTENT SNAPSHOT``, runs the query, and reads
``binlog_snapshot_file`` / ``binlog_snapshot_position`` in the same transaction; MariaDB keeps
those consistent with the snapshot, and ``BINLOG_GTID_POS()`` turns them into the GTID position
of exactly the transactions the snapshot sees. (Reading ``@@gtid_binlog_pos`` instead would be
wrong either way: after the query it may include transactions the snapshot missed, and even
before it a transaction is in the binlog before its rows are visible.)

On MySQL there is no such status, so the reader takes ``@@GLOBAL.gtid_executed`` *before* it
opens the snapshot: every transaction in it is visible to the snapshot, so the data is at least
that fresh (conservative: the value may be fresher than its token says).

**The timestamp.** An Event Token needs one, and it decides comparisons with tokens of other
seconds. The reader stamps its token with

* the cached token's timestamp when the cached token is from the same shard: the comparison is
  then decided by GTID positions alone, exactly, whatever the server and its lag;
* otherwise, on a primary, the server's clock ``slack`` seconds before the snapshot, so changes
  committed after the snapshot order after the token (see :mod:`updatestream.cache.client`);
* otherwise, on a replica (``replica=True``), 0: a replica's lag has no bound, so a change the
  snapshot missed may be older than any clock reading. A value read there with no entry in the
  cache is still cached, but the next change of the row invalidates it whatever its age, and
  an entry invalidated from another shard is not populated from a replica.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pymysql

from updatestream.cache.client import Loader
from updatestream.core.gtid import Flavor, parse_position
from updatestream.core.token import EventToken

V = TypeVar("V")
Connection = pymysql.connections.Connection  # generic only for the type checker
Rows = list[tuple[Any, ...]]


def stamp(
    shard: str,
    position: str,
    now: int | None,
    cached: EventToken | None,
    slack: int,
    flavor: Flavor,
) -> EventToken:
    """The token of data read at ``position`` of ``shard`` at server time ``now`` (None: no
    bound on how old the data may be, as on a replica)."""
    parsed = parse_position(position, flavor)
    if cached is not None and cached.shard == shard:
        return EventToken(cached.timestamp, shard, parsed)
    return EventToken(0 if now is None else max(0, now - slack), shard, parsed)


class SnapshotReader:
    """Reads rows of one shard with their Event Token; thread safe (a small connection pool)."""

    def __init__(
        self,
        connect: Callable[[], Connection[Any]],
        shard: str,
        *,
        flavor: Flavor = Flavor.MARIADB,
        slack: int = 2,
        replica: bool = False,
    ) -> None:
        self._connect = connect
        self.shard = shard
        self.flavor = flavor
        self.slack = slack
        self.replica = replica
        self._pool: queue.LifoQueue[Connection[Any]] = queue.LifoQueue()

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        try:
            conn = self._pool.get_nowait()
        except queue.Empty:
            conn = self._connect()
            conn.autocommit(True)
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):
                conn.close()
            raise
        self._pool.put(conn)

    def read(
        self, sql: str, args: Sequence[Any] = (), cached: EventToken | None = None
    ) -> tuple[Rows, EventToken]:
        """Run ``sql`` in a consistent snapshot; returns its rows and their token."""
        with self._connection() as conn, conn.cursor() as cur:
            if self.flavor is Flavor.MYSQL:
                cur.execute("SELECT UNIX_TIMESTAMP(), @@GLOBAL.gtid_executed")
                now, position = cur.fetchone() or (0, "")
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute(sql, tuple(args))
                rows = list(cur.fetchall())
            else:
                cur.execute("SELECT UNIX_TIMESTAMP()")
                now = (cur.fetchone() or (0,))[0]
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute(sql, tuple(args))
                rows = list(cur.fetchall())
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {str(k).lower(): v for k, v in cur.fetchall()}
                cur.execute(
                    "SELECT BINLOG_GTID_POS(%s, %s)",
                    (status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])),
                )
                position = (cur.fetchone() or ("",))[0]
            cur.execute("COMMIT")
        clock = None if self.replica else int(now)
        token = stamp(self.shard, str(position or ""), clock, cached, self.slack, self.flavor)
        return rows, token

    def loader(self, sql: str, args: Sequence[Any], convert: Callable[[Rows], V]) -> Loader[V]:
        """A :class:`~updatestream.cache.client.CacheClient` loader for one query."""

        def load(cached: EventToken | None) -> tuple[V, EventToken]:
            rows, token = self.read(sql, args, cached)
            return convert(rows), token

        return load

    def close(self) -> None:
        while True:
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(Exception):
                conn.close()
