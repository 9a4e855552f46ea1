"""The stream-of-streams: one ordered stream over the partitions of a partitioned Version Stream.

A partitioned Version Stream appends each entity's versions to one of N partition streams, each
gap-locked and gapless on its own (:mod:`updatestream.versionstream.partitioned_stream`). The
stream-of-streams is a Version Stream whose entities are those partition streams and whose
values are their versions: its version V says "partition p is at version m_p(V)" for each
partition. Together its versions order the partitions' versions into one stream: the combined
state at version V is every partition at m_p(V) (read by
:class:`updatestream.versionstream.combined_stream.CombinedStream`).

Not every partition version gets a version of its own (the number of versions would explode):
:meth:`StreamOfStreams.recombine` buffers, appending one version per partition that moved since
the last recombination, mapped to the partition's last committed version. Called after every
batch a writer appended, or every ``interval`` seconds by a :class:`Recombiner`, it bounds the
lag of the combined stream behind its partitions by that period.

Nothing is lost: a partition's versions commit in version order (each append holds the
partition's gap lock until it commits), so when its last committed version is m, every version
up to m is committed too. Recombinations are serialised by the stream-of-streams' own gap lock
and only ever move a partition's mapping forward, so several recombiners (several writers) may
run at once.

The table (``<table>_sos`` beside the Version Stream table)::

    stream             INT     the combined stream (the partitioned stream's base id)
    version            BIGINT  0, 1, 2, ... per stream, gapless, committed in order
    partition_stream   INT     the entity: a partition's stream id
    partition_version  BIGINT  the value: that partition's last version at this version
"""

from __future__ import annotations

import bisect
import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import pymysql

from updatestream.versionstream.connection_pool import LOCK_CONFLICTS, Connect, ConnectionPool
from updatestream.versionstream.repository import VersionStreamError, quoted_table

log = logging.getLogger(__name__)


class StreamOfStreams:
    """The stream-of-streams of one partitioned stream; safe to share between threads."""

    def __init__(
        self,
        connect: Connect,
        *,
        table: str,
        stream: int,
        partition_streams: Sequence[int],
        database: str | None = None,
    ) -> None:
        if len(table) > 60:
            raise VersionStreamError(
                f"the Version Stream table {table!r} is too long for a partitioned stream: its "
                f"stream-of-streams table {table}_sos needs 4 more characters; use a name of "
                "at most 60"
            )
        self._pool = ConnectionPool(connect)
        self.partition_table = quoted_table(table, database)
        self.table = quoted_table(f"{table}_sos", database)
        self.stream = stream
        self.partition_streams = tuple(partition_streams)
        self.where = f"{self.table} stream {stream}"

    def create_table(self) -> None:
        with self._pool.connection() as conn, conn.cursor() as cur:
            cur.execute(
                f"""CREATE TABLE IF NOT EXISTS {self.table} (
                  stream INT NOT NULL,
                  version BIGINT NOT NULL,
                  partition_stream INT NOT NULL,
                  partition_version BIGINT NOT NULL,
                  PRIMARY KEY (stream, version),
                  KEY idx_partition (stream, partition_stream, version),
                  KEY idx_partition_version (stream, partition_stream, partition_version)
                ) ENGINE=InnoDB"""
            )
            conn.commit()

    def close(self) -> None:
        self._pool.close()

    # -- writing ----------------------------------------------------------------------------

    def recombine(self, retries: int = 5) -> int | None:
        """Append one version per partition whose last committed version moved past its
        mapping; returns the stream-of-streams' last version (None while empty)."""
        for attempt in range(retries + 1):
            try:
                return self._recombine_once()
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] in LOCK_CONFLICTS and attempt < retries:
                    # two recombiners that both took the gap lock of an empty stream deadlock
                    # on their inserts: run again after a random pause
                    time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _recombine_once(self) -> int | None:
        marks = ",".join(["%s"] * len(self.partition_streams))
        with self._pool.connection() as conn, conn.cursor() as cur:
            conn.begin()
            last = self._lock_last(cur)
            cur.execute(
                f"SELECT partition_stream, MAX(partition_version) FROM {self.table} "
                "WHERE stream = %s GROUP BY partition_stream",
                (self.stream,),
            )
            mapped = {int(p): int(v) for p, v in cur.fetchall()}
            cur.execute(
                f"SELECT stream, MAX(version) FROM {self.partition_table} "
                f"WHERE stream IN ({marks}) GROUP BY stream",
                self.partition_streams,
            )
            moved = sorted(
                (int(p), int(v)) for p, v in cur.fetchall() if int(v) > mapped.get(int(p), -1)
            )
            if moved:
                cur.executemany(
                    f"INSERT INTO {self.table} (stream, version, partition_stream, "
                    "partition_version) VALUES (%s, %s, %s, %s)",
                    [(self.stream, last + 1 + i, p, v) for i, (p, v) in enumerate(moved)],
                )
            conn.commit()
        return None if last + len(moved) < 0 else last + len(moved)

    def _lock_last(self, cur: Any) -> int:
        """Lock the last version and the gap after it by an ascending scan from it, as
        `VersionStreamRepository` does (recombiners then queue instead of deadlocking)."""
        cur.execute(f"SELECT MAX(version) FROM {self.table} WHERE stream = %s", (self.stream,))
        row = cur.fetchone()
        first = -1 if row is None or row[0] is None else int(row[0])
        cur.execute(
            f"SELECT version FROM {self.table} WHERE stream = %s AND version >= %s "
            "ORDER BY version FOR UPDATE",
            (self.stream, first),
        )
        return max((int(r[0]) for r in cur.fetchall()), default=-1)

    # -- reading ----------------------------------------------------------------------------

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._pool.connection() as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            rows = list(cur.fetchall())
            conn.commit()  # end the read view: the next query sees newer versions
            return rows

    def fetch_last_version(self) -> int | None:
        rows = self._query(
            f"SELECT MAX(version) FROM {self.table} WHERE stream = %s", (self.stream,)
        )
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def mapping(self, version: int) -> dict[int, int]:
        """Partition stream -> its version at stream-of-streams version ``version`` (-1: none
        yet); for every partition."""
        return {p: self.mapping_of(p, version) for p in self.partition_streams}

    def mapping_of(self, partition: int, version: int) -> int:
        """The version of ``partition`` at stream-of-streams version ``version`` (-1: none)."""
        if version < 0:
            return -1
        rows = self._query(
            f"SELECT partition_version FROM {self.table} WHERE stream = %s AND "
            "partition_stream = %s AND version <= %s ORDER BY version DESC LIMIT 1",
            (self.stream, partition, version),
        )
        return int(rows[0][0]) if rows else -1

    def steps(self, partition: int, since: int, until: int) -> Steps:
        """The versions in ``since..until`` that moved ``partition``, with where they moved it."""
        rows = self._query(
            f"SELECT version, partition_version FROM {self.table} WHERE stream = %s AND "
            "partition_stream = %s AND version >= %s AND version <= %s ORDER BY version",
            (self.stream, partition, since, until),
        )
        return Steps([int(v) for v, _ in rows], [int(m) for _, m in rows])

    def cover(self, partition: int, partition_version: int) -> int | None:
        """The first stream-of-streams version at which ``partition_version`` of ``partition``
        is visible; None while it is not."""
        # a partition's mapping only grows with the version: the first row in partition_version
        # order is the earliest version (one index probe, not a scan of the later ones)
        rows = self._query(
            f"SELECT version FROM {self.table} WHERE stream = %s AND partition_stream = %s "
            "AND partition_version >= %s ORDER BY partition_version, version LIMIT 1",
            (self.stream, partition, partition_version),
        )
        return int(rows[0][0]) if rows else None


class Steps:
    """A partition's mapping over a range of stream-of-streams versions (both increasing)."""

    def __init__(self, versions: list[int], partition_versions: list[int]) -> None:
        self.versions = versions
        self.partition_versions = partition_versions

    def cover(self, partition_version: int) -> int | None:
        """The first version of the range at which ``partition_version`` is visible."""
        index = bisect.bisect_left(self.partition_versions, partition_version)
        return self.versions[index] if index < len(self.versions) else None


class Recombiner:
    """Recombines a stream-of-streams every ``interval`` seconds in a thread of its own (for
    writers that do not recombine after their appends): the combined stream's lag behind its
    partitions stays under about ``interval`` plus one recombination."""

    def __init__(self, streams: StreamOfStreams, interval: float = 0.1) -> None:
        if interval <= 0:
            raise VersionStreamError(f"the recombine interval must be positive, got {interval}")
        self.streams = streams
        self.interval = interval
        self.rounds = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recombiner", daemon=True)

    def start(self) -> Recombiner:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after one last recombination (everything committed so far is mapped)."""
        self._stop.set()
        self._thread.join()
        self.streams.recombine()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.streams.recombine()
                self.rounds += 1
                self.error = None
            except Exception as exc:  # the next round tries again; stop() reports the last
                log.warning("recombining %s failed: %s", self.streams.where, exc)
                self.error = exc
