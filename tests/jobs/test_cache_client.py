"""The read-through cache client with real MariaDB, its real binlog and a real memcached."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymemcache.client.base import Client
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_jobs.sinks.memcached_sink import MemcachedSink
from updatestream_jobs.sinks.sink import BatchContext

from harness.sink_events import ShardLog
from tests.conftest import MariaDBFixture
from updatestream import spec
from updatestream.binlog.events import ChangeEvent, Op, encode_row
from updatestream.cache import CacheClient, SnapshotReader
from updatestream.core.gtid import MariaDBGTID, MariaDBPosition
from updatestream.core.token import EventToken

DB = "us_cachetest"
SHARD = "-"  # the server plays an unsharded keyspace's only shard


@pytest.fixture(scope="module")
def replica(mariadb_server: MariaDBFixture, mariadb_server_factory: Any) -> MariaDBFixture:
    """A real replica of the shared server, replicating from its current position on."""
    server: MariaDBFixture = mariadb_server_factory.start(
        f"cache-replica-{uuid.uuid4().hex[:6]}", extra_args=["--log-slave-updates"]
    )
    position = str(sql(mariadb_server, "SELECT @@gtid_binlog_pos")[0][0])
    admin = mariadb_server.admin
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL gtid_slave_pos = %s", (position,))
        cur.execute(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s, MASTER_USER = %s, "
            "MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos",
            (mariadb_server.port, admin.username, admin.password),
        )
        cur.execute("START SLAVE")
    return server


def wait_replicated(primary: MariaDBFixture, replica: MariaDBFixture) -> None:
    target = MariaDBPosition.parse(str(sql(primary, "SELECT @@gtid_binlog_pos")[0][0]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        applied = MariaDBPosition.parse(str(sql(replica, "SELECT @@gtid_slave_pos")[0][0]))
        if applied.contains(target):
            return
        time.sleep(0.05)
    raise AssertionError(f"the replica did not reach {target}")


@pytest.fixture(scope="module")
def items(mariadb_server: MariaDBFixture, replica: MariaDBFixture) -> str:
    table = f"items_{uuid.uuid4().hex[:8]}"
    with mariadb_server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}")
        cur.execute(f"CREATE TABLE {DB}.{table} (id INT PRIMARY KEY, v INT NOT NULL)")
        cur.execute(f"INSERT INTO {DB}.{table} VALUES " + ",".join(f"({i},0)" for i in range(40)))
    wait_replicated(mariadb_server, replica)
    return table


@pytest.fixture
def reader(mariadb_server: MariaDBFixture) -> Iterator[SnapshotReader]:
    snapshot_reader = SnapshotReader(lambda: mariadb_server.connect(), SHARD)
    yield snapshot_reader
    snapshot_reader.close()


@pytest.fixture
def client(memcached: MemcachedServer) -> Iterator[CacheClient[Any]]:
    cache: CacheClient[Any] = CacheClient([memcached.address])
    yield cache
    cache.close()


def sql(server: MariaDBFixture, statement: str, args: tuple[Any, ...] = ()) -> Any:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(statement, args)
        return cur.fetchall()


class BinlogInvalidator(threading.Thread):
    """Tails the server's binlog from `start`, turns the table's row changes into change events
    the way the source does, and feeds them to the memcached sink in small batches. Stops once
    it has passed GTID position `stop_after` (set it, then commit one more transaction)."""

    def __init__(self, server: MariaDBFixture, table: str, start: str, sink: MemcachedSink) -> None:
        super().__init__(daemon=True)
        self.server, self.table, self.sink = server, table, sink
        self.position = MariaDBPosition.parse(start)
        self.stop_after: MariaDBPosition | None = None
        self.events = 0
        self.written = 0
        self.batches = 0
        self.error: BaseException | None = None

    def _past_the_end(self) -> bool:
        """Is this the transaction after the last write?"""
        target = self.stop_after
        return target is not None and self.position != target and self.position.contains(target)

    def flush(self, batch: list[ChangeEvent]) -> None:
        if batch:
            self.written += self.sink.write_batch(
                batch, BatchContext("t", "-", self.batches)
            ).written
            self.batches += 1

    def change(self, event: Any, index: int, row: dict[str, Any], token: str) -> ChangeEvent:
        op: Op
        if isinstance(event, UpdateRowsEvent):
            op, before, after = "update", row["before_values"], row["after_values"]
        elif isinstance(event, WriteRowsEvent):
            op, before, after = "insert", None, row["values"]
        else:
            op, before, after = "delete", row["values"], None
        self.events += 1
        return ChangeEvent(
            keyspace="items",
            shard=SHARD,
            op=op,
            table=self.table,
            pk=encode_row({"id": (after or before)["id"]}),
            keyspace_id=None,
            before=None if before is None else encode_row(before),
            after=None if after is None else encode_row(after),
            token=token,
            timestamp=EventToken.loads(token).timestamp,
            gtid=str(self.position),
            tx_index=index,
        )

    def run(self) -> None:
        stream = BinLogStreamReader(
            connection_settings={
                "host": self.server.host,
                "port": self.server.port,
                "user": self.server.admin.username,
                "password": self.server.admin.password,
            },
            server_id=random.randrange(10_000, 2**31),
            blocking=True,
            is_mariadb=True,
            auto_position=str(self.position),
            only_events=[MariadbGtidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        )
        batch: list[ChangeEvent] = []
        token = ""
        try:
            for event in stream:
                if isinstance(event, MariadbGtidEvent):
                    if len(batch) >= 5:
                        self.flush(batch)
                        batch = []
                    self.position = self.position.advance(MariaDBGTID.parse(event.gtid))
                    token = EventToken(event.timestamp, SHARD, self.position).dumps()
                    if self._past_the_end():
                        break
                elif event.schema == DB and event.table == self.table:
                    batch += [self.change(event, i, row, token) for i, row in enumerate(event.rows)]
            self.flush(batch)
        except BaseException as exc:
            self.error = exc
        finally:
            stream.close()


@pytest.mark.parametrize("source", ["primary", "lagging replica"])
def test_concurrent_reads_never_keep_a_value_older_than_an_invalidation(
    mariadb_server: MariaDBFixture,
    replica: MariaDBFixture,
    memcached: MemcachedServer,
    items: str,
    client: CacheClient[Any],
    source: str,
) -> None:
    """A writer updates rows on the primary, the invalidator tails the primary's binlog, and
    application threads read through the cache from the primary, or from a replica whose
    applier is stopped and started all along (reads older than the invalidations)."""
    lagging = source == "lagging replica"
    read_from = replica if lagging else mariadb_server
    reader = SnapshotReader(lambda: read_from.connect(), SHARD, replica=lagging)
    keyspace = f"k{uuid.uuid4().hex[:6]}"
    template = keyspace + ":item:{id}"
    sink = MemcachedSink(
        spec.MemcachedSink.model_validate(
            {"type": "memcached", "servers": [memcached.address], "keyTemplate": {items: template}}
        ),
        keyspace=keyspace,
    )
    sink.open()
    start = str(sql(mariadb_server, "SELECT @@gtid_binlog_pos")[0][0])
    invalidator = BinlogInvalidator(mariadb_server, items, start, sink)
    invalidator.start()
    ids = 12
    done = threading.Event()  # the writer finished
    caught_up = threading.Event()  # the invalidator has applied every write
    errors: list[BaseException] = []

    def key(i: int) -> str:
        return template.format(id=i)

    def loader(i: int, rng: random.Random | None = None) -> Any:
        def value(rows: list[tuple[Any, ...]]) -> Any:
            if rng is not None and rng.random() < 0.3:
                time.sleep(rng.random() / 50)  # a slow application: a wider race window
            return rows[0][0]

        return reader.loader(f"SELECT v FROM {DB}.{items} WHERE id = %s", (i,), value)

    def writer() -> None:
        rng = random.Random(7)
        try:
            with mariadb_server.connect() as conn, conn.cursor() as cur:
                for n in range(600):
                    cur.execute(
                        f"UPDATE {DB}.{items} SET v = v + 1 WHERE id = %s", (rng.randrange(ids),)
                    )
                    if n % 50 == 0:
                        time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def lag() -> None:
        try:
            with replica.connect() as conn, conn.cursor() as cur:
                while not done.is_set():
                    cur.execute("STOP SLAVE SQL_THREAD")
                    time.sleep(0.08)
                    cur.execute("START SLAVE SQL_THREAD")
                    time.sleep(0.02)
        except BaseException as exc:
            errors.append(exc)

    def app(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not caught_up.is_set():
                i = rng.randrange(ids)
                client.get(key(i), loader(i, rng))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + (
        [threading.Thread(target=lag)] if lagging else []
    )
    apps = [threading.Thread(target=app, args=(s,)) for s in range(3)]
    for t in threads + apps:
        t.start()
    done.wait(timeout=120)
    # the application keeps reading while the invalidator catches up with every write
    invalidator.stop_after = MariaDBPosition.parse(
        str(sql(mariadb_server, "SELECT @@gtid_binlog_pos")[0][0])
    )
    sql(mariadb_server, f"UPDATE {DB}.{items} SET v = v + 1 WHERE id = 39")
    invalidator.join(timeout=120)
    wait_replicated(mariadb_server, replica)
    caught_up.set()
    for t in threads + apps:
        t.join()
    assert not invalidator.is_alive() and invalidator.error is None, invalidator.error
    assert not errors, errors
    truth = dict(sql(mariadb_server, f"SELECT id, v FROM {DB}.{items}"))
    stale = {}
    for i in range(ids):
        found = client.lookup(key(i))
        if found is not None and found[2] and found[1] != truth[i]:
            stale[i] = (found[1], truth[i])
    assert stale == {}, f"stale cached values (cached, database): {stale}"
    for i in range(ids):
        assert client.get(key(i), loader(i)) == truth[i]
    assert invalidator.events >= 600 and invalidator.written > 0
    assert client.stats.stored > 0 and client.stats.hits > 0, client.stats
    if lagging:  # a read from the replica older than an invalidation is never stored
        refused = client.stats.not_fresh
        invalidate_while_the_replica_lags(mariadb_server, replica, items, sink)
        assert client.get(key(0), loader(0)) == truth[0]  # the replica's value, not kept
        assert client.stats.not_fresh == refused + 1, client.stats
        sql(replica, "START SLAVE SQL_THREAD")
        wait_replicated(mariadb_server, replica)
        assert client.get(key(0), loader(0)) == truth[0] + 1
    sink.close()
    reader.close()


def invalidate_while_the_replica_lags(
    primary: MariaDBFixture, replica: MariaDBFixture, items: str, sink: MemcachedSink
) -> None:
    """Stop the replica's applier, update row 0 on the primary and write its invalidation: the
    replica still serves the row's value from before it."""
    sql(replica, "STOP SLAVE SQL_THREAD")
    start = str(sql(primary, "SELECT @@gtid_binlog_pos")[0][0])
    invalidator = BinlogInvalidator(primary, items, start, sink)
    invalidator.start()
    sql(primary, f"UPDATE {DB}.{items} SET v = v + 1 WHERE id = 0")
    invalidator.stop_after = MariaDBPosition.parse(
        str(sql(primary, "SELECT @@gtid_binlog_pos")[0][0])
    )
    sql(primary, f"UPDATE {DB}.{items} SET v = v + 1 WHERE id = 39")
    invalidator.join(timeout=60)
    assert not invalidator.is_alive() and invalidator.error is None, invalidator.error
    assert invalidator.written > 0


def test_a_value_is_stored_only_when_fresher_than_the_invalidation(
    mariadb_server: MariaDBFixture,
    memcached: MemcachedServer,
    items: str,
    reader: SnapshotReader,
    client: CacheClient[Any],
) -> None:
    key = f"k{uuid.uuid4().hex[:6]}:item:5"
    query = f"SELECT v FROM {DB}.{items} WHERE id = %s"
    old_rows, old_token = reader.read(query, (5,))
    sql(mariadb_server, f"UPDATE {DB}.{items} SET v = v + 100 WHERE id = 5")
    position = MariaDBPosition.parse(str(sql(mariadb_server, "SELECT @@gtid_binlog_pos")[0][0]))
    change = EventToken(old_token.timestamp + 1, SHARD, position)
    client._client(key).set(key, b"T" + change.dumps().encode(), noreply=False)

    def stale_loader(cached: EventToken | None) -> tuple[Any, EventToken]:
        assert cached == change
        return old_rows[0][0], EventToken(cached.timestamp, SHARD, old_token.position)

    assert client.get(key, stale_loader) == old_rows[0][0]  # returned, but not cached
    assert client.stats.not_fresh == 1
    assert client.lookup(key) == (change, None, False)
    fresh = client.get(key, reader.loader(query, (5,), lambda r: r[0][0]))
    assert fresh == old_rows[0][0] + 100
    token, value, has_value = client.lookup(key) or (None, None, False)
    assert has_value and value == fresh
    assert token is not None and token.timestamp == change.timestamp  # stamped to compare by GTID
    assert isinstance(token.position, MariaDBPosition) and token.position.contains(position)
    assert client.get(key, stale_loader) == fresh  # a hit: the loader is not called


def test_snapshot_position_is_that_of_the_rows_read(
    mariadb_server: MariaDBFixture, items: str, reader: SnapshotReader
) -> None:
    sql(mariadb_server, f"UPDATE {DB}.{items} SET v = v + 1 WHERE id = 6")
    rows, token = reader.read(f"SELECT v FROM {DB}.{items} WHERE id = 6")
    after = str(sql(mariadb_server, "SELECT @@gtid_binlog_pos")[0][0])
    assert rows[0][0] == sql(mariadb_server, f"SELECT v FROM {DB}.{items} WHERE id = 6")[0][0]
    assert str(token.position) == after  # idle meanwhile: exactly the server's position
    assert token.shard == SHARD
    now = int(sql(mariadb_server, "SELECT UNIX_TIMESTAMP()")[0][0])
    assert now - 4 <= token.timestamp <= now - 2  # no cached token: the conservative stamp


def test_sink_and_client_agree_on_the_server_of_each_key(memcached: MemcachedServer) -> None:
    second = MemcachedServer().start()
    try:
        servers = [memcached.address, second.address]
        keyspace = f"k{uuid.uuid4().hex[:6]}"
        sink = MemcachedSink(
            spec.MemcachedSink.model_validate({"type": "memcached", "servers": servers}),
            keyspace=keyspace,
        )
        log = ShardLog("-80", 1)
        events = []
        for uid in range(40):
            row = {"id": uid, "name": "n", "visits": 0}
            events += log.transaction(500, [("insert", "users", None, row)])
        sink.write_batch(events, BatchContext("t", "-", 0))
        sink.close()
        cache: CacheClient[Any] = CacheClient(servers)
        for uid in range(40):
            found = cache.lookup(f"{keyspace}:users:{uid}")
            assert found is not None and found[0] == EventToken.loads(events[uid].token)
        only_second = Client(("127.0.0.1", second.port))
        on_second = sum(only_second.get(f"{keyspace}:users:{uid}") is not None for uid in range(40))
        only_second.close()
        assert 0 < on_second < 40  # the keys are spread over both servers
        cache.close()
    finally:
        second.stop()
