"""The traffic generator's writes through vtgate, with the shard and GTID of every commit.

vtgate routes each row by the VSchema and the serving shards, so the generator no longer picks
shards; its ledger still records, for each committed transaction, the shard that committed it
and that shard's GTID. vtgate reports neither (it does not pass MySQL's session-tracked GTIDs
on), so before the COMMIT the generator asks, in the same transaction and routed by the same
vindex value, which mysqld runs it and on which of its threads:

    SELECT @@server_uuid, PS_CURRENT_THREAD_ID(), COUNT(*) FROM <table> WHERE <vindex column> = ?

and after the COMMIT reads that thread's last committed GTID from the shard's
`performance_schema.events_transactions_history_long`: the last 10,000 transactions of the
server, with the GTID each was given at commit, kept also after their thread ended (vttablet
closes its connections when SwitchTraffic changes a primary's serving state, and a thread's own
`events_transactions_history` goes with it). The tablets' my.cnf turns that consumer on.
vtgate runs with `--transaction-mode SINGLE`, so a transaction never spans two shards. The
answer is exact while the generator is the only writer through vtgate: vttablet could otherwise
hand the same connection to another client's transaction between the COMMIT and the lookup.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pymysql

from updatestream import spec
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.errors import TrafficError
from updatestream_cli.devcluster.local_server import Connection
from updatestream_cli.devcluster.traffic import Change

# vtgate's own errors (1105, ER_UNKNOWN_ERROR) while SwitchTraffic moves the primaries, a
# transaction that would span two shards (SINGLE mode), and lost connections: roll back, retry.
_RETRY = {1105, 1317, 2003, 2006, 2013, 2014, 2055}

# after a COMMIT that failed: how long the tablet may still be finishing it
_COMMIT_SETTLE = 0.5

_LAST_GTID = (
    "SELECT GTID FROM performance_schema.events_transactions_history_long WHERE THREAD_ID = %s "
    "AND STATE = 'COMMITTED' AND GTID LIKE %s ORDER BY EVENT_ID DESC LIMIT 1"
)


class VtgateGateway:
    """One MySQL-protocol endpoint (vtgate) for every write of a `TrafficGenerator`."""

    def __init__(self, host: str, port: int, manifest_path: Path, secrets_dir: Path) -> None:
        self.address = (host, port)
        self.manifest_path = manifest_path
        self.secrets_dir = secrets_dir
        self._shard_by_uuid: dict[str, str] = {}
        self._readers: dict[str, _ShardReader] = {}

    def connect(self, creds: spec.Credentials) -> Connection:
        keyspace = spec.load_keyspace(self.manifest_path).metadata.name
        return pymysql.connect(
            host=self.address[0],
            port=self.address[1],
            user=creds.username,
            password=creds.password,
            database=keyspace,
            autocommit=False,
            charset="utf8mb4",
            connect_timeout=10,
            ssl_disabled=True,
        )

    def retryable(self, exc: pymysql.err.MySQLError) -> bool:
        return bool(exc.args) and exc.args[0] in _RETRY

    def commit(self, cur: Any, changes: Sequence[Change]) -> tuple[str, str, float]:
        """COMMIT the open transaction; (shard, GTID) of the mysqld that committed it, and the
        time the COMMIT returned (before the GTID's lookup)."""
        first = changes[0]
        column = _vindex_column(first.table)
        cur.execute(
            f"SELECT @@server_uuid, PS_CURRENT_THREAD_ID(), COUNT(*) FROM `{first.table}` "
            f"WHERE `{column}` = %s",
            (first.image[column],),
        )
        uuid, thread, _ = cur.fetchone()
        shard = self._shard_of(str(uuid))
        before = self._committed(shard, int(thread), str(uuid))
        try:
            cur.execute("COMMIT")
            committed_at = time.time()
        except pymysql.err.MySQLError as exc:
            # vtgate can answer a COMMIT that reached the tablet with an error while
            # SwitchTraffic moves the primaries: retried, the changes would apply twice.
            if not self.retryable(exc):
                raise
            committed_at = time.time()  # at the latest: the COMMIT's answer was an error
            time.sleep(_COMMIT_SETTLE)
            if self._committed(shard, int(thread), str(uuid)) == before:
                raise  # rolled back: the caller retries the changes
        return shard, self._last_gtid(shard, int(thread), str(uuid)), committed_at

    def _committed(self, shard: str, thread: int, uuid: str) -> str | None:
        """The last GTID `thread` committed on `shard`, None if none yet."""
        rows = self._reader(shard).query_rows(_LAST_GTID, (thread, f"{uuid}:%"))
        return str(rows[0][0]) if rows else None

    def _shard_of(self, uuid: str) -> str:
        if uuid not in self._shard_by_uuid:
            keyspace = spec.load_keyspace(self.manifest_path)
            for shard in keyspace.spec.shards:
                ((found,),) = self._reader(shard.name).query_rows("SELECT @@server_uuid")
                self._shard_by_uuid[str(found)] = shard.name
        try:
            return self._shard_by_uuid[uuid]
        except KeyError:
            raise TrafficError(
                f"vtgate committed on a mysqld (server_uuid {uuid}) that no shard of "
                f"{self.manifest_path} names; is the manifest out of date?"
            ) from None

    def _last_gtid(self, shard: str, thread: int, uuid: str) -> str:
        found = self._committed(shard, thread, uuid)
        if found is None:
            raise TrafficError(
                f"shard {shard}'s performance_schema holds no committed transaction of thread "
                f"{thread}; is performance_schema on, with the events_transactions_history_long "
                "consumer?"
            )
        return found

    def _reader(self, shard: str) -> _ShardReader:
        if shard not in self._readers:
            self._readers[shard] = _ShardReader(self.manifest_path, self.secrets_dir, shard)
        return self._readers[shard]

    def close(self) -> None:
        for reader in self._readers.values():
            with contextlib.suppress(Exception):
                reader.close()
        self._readers.clear()


class _ShardReader:
    """A connection to one shard's mysqld with the manifest's reader account, reopened once
    when it drops. Each opening reads the shard's endpoint from the manifest again: a Reshard
    that merges back into a shard's name (-40,40-80 -> -80) gives that name a new mysqld on
    another port, and the old one is gone once the Reshard completes."""

    def __init__(self, manifest_path: Path, secrets_dir: Path, shard: str) -> None:
        self.manifest_path, self.secrets_dir, self.shard = manifest_path, secrets_dir, shard
        self._conn: Connection | None = None

    def _connect(self) -> Connection:
        endpoint = spec.load_keyspace(self.manifest_path).spec.shard(self.shard)
        creds = spec.read_credentials(self.secrets_dir, endpoint.credentials_secret)
        return pymysql.connect(
            host=endpoint.mysql.host,
            port=endpoint.mysql.port,
            user=creds.username,
            password=creds.password,
            ssl_disabled=True,
            connect_timeout=10,
            autocommit=True,
        )

    def query_rows(self, sql: str, args: object = None) -> list[tuple[Any, ...]]:
        for attempt in (1, 2):
            try:
                if self._conn is None:
                    self._conn = self._connect()
                with self._conn.cursor() as cur:
                    cur.execute(sql, args)
                    return list(cur.fetchall())
            except pymysql.err.OperationalError:
                self.close()
                if attempt == 2:
                    raise
        return []

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


def _vindex_column(table: str) -> str:
    vindexes = sample_schema.VSCHEMA["tables"][table]["column_vindexes"]
    return str(vindexes[0]["column"])
