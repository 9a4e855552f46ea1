"""A Version Stream in one MySQL/MariaDB table: append in order, fetch versions and data.

A Version Stream is the ordered history of the states of a set of entities: every append gets
the next version number of its stream, and a version is never changed afterwards. The table::

    stream   INT          which stream (several share one table)
    version  BIGINT       0, 1, 2, ... per stream, without gaps, committed in order
    entity   VARCHAR      what changed; for a change stream "<table>:<primary key JSON>"
    data     LONGTEXT     the entity's state at this version (JSON), NULL for a deletion
    origin   (optional)   where the version came from: "<shard> <GTID position> <row index>"
                          (" snapshot" appended for an existing row the snapshot read)
    origin_hash           16 bytes of BLAKE2b of the origin and the entity, NULL without one

    PRIMARY KEY (stream, version, entity)       fetch by version, find the last version
    KEY (stream, entity, version)               an entity's history
    UNIQUE KEY (stream, origin_hash)            a source change is appended at most once

**Appending.** :meth:`VersionStreamRepository.append` writes a whole batch in one transaction
under REPEATABLE READ: a locking read of the stream's last version locks its index record and
the gap after it (see ``_lock_last``), so no other appender can add a version to the stream
until the transaction ends; the batch then gets the versions ``max+1 ... max+n`` in one
multi-row INSERT.
Versions are therefore gapless and become visible in order.

**At most once.** A record may carry its source identity (for a change event: origin shard,
origin GTID position and index in the transaction, where the origin of a filtered-replication
copy is its source, so a hop duplicate has the identity of the original). Under the stream
lock the append looks the identities up and skips those present, and a UNIQUE key on their hash
keeps it so. This is chosen over a per-stream batch-id high-water mark because batch ids belong
to one Spark checkpoint of one job: a checkpoint that is reset, or two key-range jobs appending
to one stream, would make a high-water mark skip new changes, and it could not recognise a
duplicate delivered in a different batch. An identity is exact in all those cases.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pymysql
import pymysql.cursors

from updatestream.core.errors import UpdateStreamError
from updatestream.versionstream.connection_pool import (
    LOCK_CONFLICTS,
    Connect,
    Connection,
    ConnectionPool,
)

ENTITY_MAX = 512
_IDENT = re.compile(r"^[A-Za-z0-9_$]{1,64}$")
_LOOKUP_CHUNK = 1000


class VersionStreamError(UpdateStreamError):
    """A Version Stream operation failed; the message names the table and stream."""


class VersionNotFound(VersionStreamError, KeyError):
    """No such (entity, version) in the stream."""

    def __str__(self) -> str:
        return str(self.args[0])


class Origin(NamedTuple):
    """Where a version comes from; equal origins are one change."""

    shard: str
    gtid: str
    row_index: int  # the row's index in its transaction
    part: int = 0  # one change may write two versions (a key change: old key's tombstone)
    snapshot: bool = False  # an existing row the snapshot read at `gtid`, not a change

    def text(self) -> str:
        suffix = f" part {self.part}" if self.part else ""
        if self.snapshot:
            suffix += " snapshot"
        return f"{self.shard} {self.gtid} {self.row_index}{suffix}"

    def digest(self, entity: str) -> bytes:
        """The unique key of one version: the origin together with the entity, since the rows of
        one source transaction copied to different destination shards share a row index."""
        text = f"{self.text()} {entity}"
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class Record(NamedTuple):
    """One version to append: the entity, its state as JSON text (None: deleted), its origin."""

    entity: str
    data: str | None
    origin: Origin | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    appended: int
    skipped: int  # records whose origin was already in the stream (or repeated in the batch)
    first_version: int | None  # versions given to this append, None if nothing was appended
    last_version: int | None


@dataclass(frozen=True, slots=True)
class Entry:
    """The state of an entity at a version, and the entity's version before it (if any)."""

    data: Any
    previous_version: int | None


def quoted_table(table: str, database: str | None = None) -> str:
    """The table's name in SQL, with its database when given (quoted); both must be plain
    identifiers (letters, digits, ``_``, ``$``)."""
    for name in (table, database):
        if name is not None and not _IDENT.match(name):
            raise VersionStreamError(f"invalid table or database name {name!r}")
    return table if database is None else f"`{database}`.`{table}`"


def entity_name(table: str, pk: dict[str, Any]) -> str:
    """The entity of a row: ``<table>:<primary key as compact JSON, columns in key order>``
    (the text of ``ChangeEvent.pk``: ``json.dumps`` with ``(",", ":")`` separators)."""
    return f"{table}:{json.dumps(pk, separators=(',', ':'))}"


class VersionStreamRepository:
    """Appends to and reads one stream of a Version Stream table; safe to share between threads
    (each operation borrows a connection from a small pool)."""

    def __init__(
        self,
        connect: Connect,
        *,
        table: str = "versionstream",
        stream: int = 0,
        database: str | None = None,
        retries: int = 5,
        where: str = "",
    ) -> None:
        self._pool = ConnectionPool(connect)
        self.table = quoted_table(table, database)
        self.stream = stream
        self.retries = retries
        self.conflicts = 0  # appends run again after losing a deadlock or a lock wait
        self.where = where or f"{self.table} stream {stream}"

    # -- connections ------------------------------------------------------------------------

    def _connection(self) -> contextlib.AbstractContextManager[Connection[Any]]:
        return self._pool.connection()

    def close(self) -> None:
        self._pool.close()

    # -- schema -----------------------------------------------------------------------------

    def create_table(self) -> None:
        """Create the table (and its database) if missing."""
        database, _, _ = self.table.rpartition(".")
        with self._connection() as conn, conn.cursor() as cur:
            if database:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {database} CHARACTER SET utf8mb4")
            cur.execute(
                f"""CREATE TABLE IF NOT EXISTS {self.table} (
                  stream INT NOT NULL,
                  version BIGINT NOT NULL,
                  entity VARCHAR({ENTITY_MAX}) NOT NULL,
                  data LONGTEXT NULL,
                  origin TEXT NULL,
                  origin_hash BINARY(16) NULL,
                  PRIMARY KEY (stream, version, entity),
                  KEY idx_entity_version (stream, entity, version),
                  UNIQUE KEY uq_origin (stream, origin_hash)
                ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""
            )
            conn.commit()

    # -- appending --------------------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> AppendResult:
        """Append the records as the next versions, in order, in one transaction (see module)."""
        for record in records:
            if len(record.entity) > ENTITY_MAX:
                raise VersionStreamError(
                    f"entity {record.entity[:80]!r}... is longer than {ENTITY_MAX} characters; "
                    f"{self.where} cannot hold it"
                )
        if not records:
            return AppendResult(0, 0, None, None)
        for attempt in range(self.retries + 1):
            try:
                return self._append_once(records)
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] in LOCK_CONFLICTS and attempt < self.retries:
                    self.conflicts += 1
                    # Two appenders that both took the gap lock of an empty stream deadlock on
                    # their inserts; run again after a random pause, so they do not collide
                    # again in step.
                    time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _append_once(self, records: Sequence[Record]) -> AppendResult:
        with self._connection() as conn, conn.cursor() as cur:
            conn.begin()
            last = self._lock_last(cur)
            digests = [None if r.origin is None else r.origin.digest(r.entity) for r in records]
            present = self._present(cur, [d for d in digests if d is not None])
            rows: list[tuple[Any, ...]] = []
            for record, digest in zip(records, digests, strict=True):
                if digest is not None:
                    if digest in present:
                        continue
                    present.add(digest)
                origin = record.origin
                rows.append(
                    (
                        self.stream,
                        last + 1 + len(rows),
                        record.entity,
                        record.data,
                        None if origin is None else origin.text(),
                        digest,
                    )
                )
            if rows:
                cur.executemany(
                    f"INSERT INTO {self.table} (stream, version, entity, data, origin, "
                    "origin_hash) VALUES (%s,%s,%s,%s,%s,%s)",
                    rows,
                )
            conn.commit()
        skipped = len(records) - len(rows)
        if not rows:
            return AppendResult(0, skipped, None, None)
        return AppendResult(len(rows), skipped, last + 1, last + len(rows))

    def _lock_last(self, cur: pymysql.cursors.Cursor) -> int:
        """Lock the stream's last version and the gap after it; returns it (-1: empty stream).

        The last version is read first without a lock, then locked by an ascending scan from it
        to the end of the stream. Locking it with ``SELECT MAX(version) ... FOR UPDATE`` would
        scan down from the next stream's first record, taking the gap lock after the last
        version before waiting for that version's record lock: a waiting appender then holds a
        gap lock the lock holder's INSERT must wait for, and one of the two dies in a
        deadlock. The ascending scan waits on the record first and takes the gap only once it
        holds the record (the rows past a stale first read are locked too)."""
        cur.execute(f"SELECT MAX(version) FROM {self.table} WHERE stream = %s", (self.stream,))
        row = cur.fetchone()
        first = -1 if row is None or row[0] is None else int(row[0])
        cur.execute(  # an empty stream: only its gap, which its first appenders share
            f"SELECT version FROM {self.table} WHERE stream = %s AND version >= %s "
            "ORDER BY version FOR UPDATE",
            (self.stream, first),
        )
        return max((int(r[0]) for r in cur.fetchall()), default=-1)

    def _present(self, cur: pymysql.cursors.Cursor, digests: list[bytes]) -> set[bytes]:
        found: set[bytes] = set()
        for start in range(0, len(digests), _LOOKUP_CHUNK):
            chunk = digests[start : start + _LOOKUP_CHUNK]
            marks = ",".join(["%s"] * len(chunk))
            cur.execute(
                f"SELECT origin_hash FROM {self.table} WHERE stream = %s "
                f"AND origin_hash IN ({marks}) LOCK IN SHARE MODE",
                (self.stream, *chunk),
            )
            found.update(bytes(r[0]) for r in cur.fetchall())
        return found

    def append_naive(self, entity: str, data: str | None) -> None:
        """The single-row append: one INSERT computing the version in a subquery, in its own
        transaction (the baseline the batched :meth:`append` is measured against)."""
        with self._connection() as conn, conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.table} (stream, version, entity, data) VALUES (%s, "
                f"IFNULL((SELECT MAX(s2.version) FROM {self.table} s2 WHERE s2.stream = %s) + 1, "
                "0), %s, %s)",
                (self.stream, self.stream, entity, data),
            )
            conn.commit()

    # -- reading ----------------------------------------------------------------------------

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._connection() as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            rows = list(cur.fetchall())
            conn.commit()  # end the read view: the next query sees newer versions
            return rows

    def fetch_last_version(self) -> int | None:
        """The stream's last version, None while it is empty."""
        rows = self._query(
            f"SELECT MAX(version) FROM {self.table} WHERE stream = %s", (self.stream,)
        )
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def fetch_new_versions(
        self, since: int, until: int | None = None, *, prefix: str = ""
    ) -> dict[str, int]:
        """Each entity changed at versions ``since..until`` (inclusive) with its last version;
        with ``prefix``, only the entities whose name starts with it (a sub-stream's)."""
        sql = f"SELECT entity, MAX(version) FROM {self.table} WHERE stream = %s AND version >= %s"
        args: tuple[Any, ...] = (self.stream, since)
        if until is not None:
            sql += " AND version <= %s"
            args += (until,)
        if prefix:
            sql += " AND LEFT(entity, %s) = %s"
            args += (len(prefix), prefix)
        return {str(e): int(v) for e, v in self._query(sql + " GROUP BY entity", args)}

    def fetch_version_at(self, entity: str, version: int) -> int | None:
        """The entity's last version at or before ``version`` (None: it had none yet)."""
        rows = self._query(
            f"SELECT MAX(version) FROM {self.table} WHERE stream = %s AND entity = %s AND "
            "version <= %s",
            (self.stream, entity, version),
        )
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def fetch_data(self, entity: str, version: int) -> Any:
        """The entity's state at exactly ``version`` (decoded JSON; None for a deletion)."""
        return self.fetch_entry(entity, version).data

    def fetch_entry(self, entity: str, version: int) -> Entry:
        """The state at ``version`` and the entity's previous version (for history walks)."""
        rows = self._query(
            f"SELECT data, (SELECT MAX(p.version) FROM {self.table} p WHERE p.stream = %s AND "
            f"p.entity = %s AND p.version < %s) FROM {self.table} WHERE stream = %s AND "
            "version = %s AND entity = %s",
            (self.stream, entity, version, self.stream, version, entity),
        )
        if not rows:
            raise VersionNotFound(f"{self.where} has no version {version} of entity {entity!r}")
        data, previous = rows[0]
        return Entry(
            None if data is None else json.loads(data),
            None if previous is None else int(previous),
        )

    def fetch_history(self, entity: str) -> list[tuple[int, Any]]:
        """Every (version, state) of one entity, oldest first."""
        rows = self._query(
            f"SELECT version, data FROM {self.table} WHERE stream = %s AND entity = %s "
            "ORDER BY version",
            (self.stream, entity),
        )
        return [(int(v), None if d is None else json.loads(d)) for v, d in rows]
