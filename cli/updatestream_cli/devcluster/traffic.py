"""Live traffic for the development cluster, routed through the VSchema, with a ledger.

The generator is the only writer of the sample tables, so it keeps the rows it wrote in memory
and updates or deletes rows it knows. Every row goes to the shard its primary vindex and the
CURRENT serving shard map say; the manifest is re-read whenever it changes on disk. A write that
finds its shard frozen (`read_only`, during a reshard's write cut-over) is rolled back, the
generator waits for the manifest to change, and the transaction is retried on the new owner. If a
multi-row transaction's rows now belong to different shards, it is retried as one transaction per
shard. Only committed changes reach the ledger.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pymysql
import pymysql.cursors

from updatestream import spec
from updatestream_cli.devcluster import committed_gtid, sample_rows, sample_schema
from updatestream_cli.devcluster.errors import TrafficError
from updatestream_cli.devcluster.ledger import (
    LedgerEntry,
    LedgerOp,
    LedgerWriter,
    binlog_image,
    last_entry,
    pk_json,
    row_digest,
)
from updatestream_cli.devcluster.local_server import Connection
from updatestream_cli.devcluster.routing import Router

log = logging.getLogger(__name__)

_READ_ONLY = 1290  # ER_OPTION_PREVENTS_STATEMENT: the server runs with read_only
_CONNECTION_LOST = {2003, 2006, 2013, 2014, 2055}


@dataclass(frozen=True)
class Change:
    table: str
    op: LedgerOp
    image: dict[str, Any]  # after image; the before image for deletes
    updated: tuple[str, ...] = ()  # columns an update sets


class Gateway(Protocol):
    """One endpoint that routes every row itself (Vitess's vtgate), in place of the shards.

    `commit` COMMITs the open transaction and returns, for the ledger, the shard that
    committed it, its GTID there and when the COMMIT returned (the GTID's lookup comes after);
    `retryable`: did an error roll the transaction back, worth a retry (a Reshard's switch)."""

    address: tuple[str, int]

    def connect(self, creds: spec.Credentials) -> Connection: ...

    def commit(self, cur: Any, changes: Sequence[Change]) -> tuple[str, str, float]: ...

    def retryable(self, exc: pymysql.err.MySQLError) -> bool: ...


@dataclass
class TrafficOptions:
    rate: float = 100.0  # row changes per second; 0 = as fast as possible
    duration: float | None = None  # seconds; None = until stop()
    seed: int | None = None
    max_tx_rows: int = 5  # rows of an ordinary transaction: 1..max_tx_rows
    large_tx_rows: int = 0  # rows of an occasional large transaction; 0 = none
    large_tx_every: float = 30.0  # seconds between large transactions
    weights: tuple[float, float, float] = (0.5, 0.35, 0.15)  # insert, update, delete
    retry_timeout: float = 120.0  # give up on a frozen or unreachable shard after this


class _Rows:
    """Rows of one table: O(1) add, remove and random pick."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.index: dict[str, int] = {}
        self.images: dict[str, dict[str, Any]] = {}

    def put(self, key: str, image: dict[str, Any]) -> None:
        if key not in self.index:
            self.index[key] = len(self.keys)
            self.keys.append(key)
        self.images[key] = image

    def remove(self, key: str) -> None:
        pos = self.index.pop(key)
        last = self.keys.pop()
        if last != key:
            self.keys[pos] = last
            self.index[last] = pos
        del self.images[key]

    def pick(self, rng: random.Random) -> tuple[str, dict[str, Any]] | None:
        if not self.keys:
            return None
        key = self.keys[rng.randrange(len(self.keys))]
        return key, self.images[key]

    def __len__(self) -> int:
        return len(self.keys)


@dataclass
class TrafficStats:
    transactions: int = 0
    rows: int = 0
    retries: int = 0
    frozen_waits: int = 0
    by_op: dict[str, int] = field(default_factory=lambda: {"insert": 0, "update": 0, "delete": 0})
    by_shard: dict[str, int] = field(default_factory=dict)


class TrafficGenerator:
    """Writes random traffic to the serving shards; `start()`/`stop()` run it in a thread."""

    def __init__(
        self,
        manifest_path: Path | str,
        secrets_dir: Path | str,
        ledger: Path | str | LedgerWriter | None = None,
        options: TrafficOptions | None = None,
        on_commit: Callable[[list[LedgerEntry]], None] | None = None,
        gateway: Gateway | None = None,
    ) -> None:
        self.options = options or TrafficOptions()
        self.gateway = gateway
        self.router = Router(Path(manifest_path))
        self.secrets_dir = Path(secrets_dir)
        app = spec.SecretRef(
            name=sample_schema.secret_name(self.router.keyspace.metadata.name, "app")
        )
        self._creds = spec.read_credentials(self.secrets_dir, app)
        self.ledger = ledger if isinstance(ledger, LedgerWriter) else LedgerWriter(ledger)
        self.on_commit = on_commit
        self.rng = random.Random(self.options.seed)
        self.tables = {t: _Rows() for t in sample_schema.COLUMNS}
        self.stats = TrafficStats()
        self._conns: dict[tuple[str, int], Connection] = {}
        last = last_entry(self.ledger.path) if self.ledger.path is not None else None
        self._order = itertools.count(last.order + 1 if last else 1)
        self._tx = itertools.count(last.tx + 1 if last else 1)
        start = int(time.time() * 1000) % 10**9 * 1000 + self.rng.randrange(1000)
        self._ids = itertools.count(start)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # -- running --------------------------------------------------------------------------------

    def start(self) -> TrafficGenerator:
        self._thread = threading.Thread(target=self._run_safely, name="traffic", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 180.0) -> TrafficStats:
        """Stop after the current transaction, which may be retrying its commit for up to its
        retry window (a reshard's switch); re-raise an error the thread hit."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive() and self.error is None:
                self.error = TrafficError(
                    f"the traffic thread did not stop within {timeout:.0f} s: its current "
                    "transaction is still being retried"
                )
        self.close()
        if self.error is not None:
            raise self.error
        return self.stats

    def _run_safely(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # reported by stop()
            log.exception("traffic generator failed")
            self.error = exc

    def run(self, progress: Callable[[TrafficStats], None] | None = None) -> TrafficStats:
        opts = self.options
        began = time.monotonic()
        due = began
        next_large = began + opts.large_tx_every if opts.large_tx_rows else float("inf")
        while not self._stop.is_set():
            now = time.monotonic()
            if opts.duration is not None and now - began >= opts.duration:
                break
            if now >= next_large:
                changes = [self._insert("events") for _ in range(opts.large_tx_rows)]
                next_large = now + opts.large_tx_every
            else:
                changes = self._transaction()
            self.commit(changes)
            if progress is not None:
                progress(self.stats)
            if opts.rate > 0:
                due = max(due, time.monotonic() - 1.0) + len(changes) / opts.rate
                delay = due - time.monotonic()
                if delay > 0:
                    self._stop.wait(delay)
        return self.stats

    def preload(self, n_rows: int, batch: int = 1000) -> None:
        """Insert about `n_rows` rows (users, orders, events) in large batched transactions."""
        made = 0
        while made < n_rows:
            size = min(batch, n_rows - made)
            changes = [self._insert(self.rng.choice(("users", "users", "orders", "events")))
                       for _ in range(size)]  # fmt: skip
            self.commit(changes)
            made += size

    def adopt_existing_rows(self, keep: Callable[[str, str], bool] | None = None) -> int:
        """Learn the rows already on the serving shards, so updates and deletes reach them;
        with `keep`, only the rows (table, primary key JSON) it accepts."""
        adopted = 0
        for shard in self.router.shard_map.names:
            conn = self._connection(shard)
            for table in sample_schema.COLUMNS:
                with conn.cursor(pymysql.cursors.SSDictCursor) as cur:
                    cur.execute(f"SELECT * FROM `{table}`")
                    for row in cur:
                        key = pk_json(table, row)
                        if keep is None or keep(table, key):
                            self.tables[table].put(key, binlog_image(table, row))
                            adopted += 1
            conn.rollback()
        return adopted

    def close(self) -> None:
        # a thread that outlived stop() may still open a connection: close a snapshot
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()
        self.ledger.close()

    # -- generating -----------------------------------------------------------------------------

    def _insert(self, table: str) -> Change:
        if table == "users":
            image = sample_rows.new_user(self.rng, next(self._ids))
        elif table == "orders":
            picked = self.tables["users"].pick(self.rng)
            user_id = picked[1]["id"] if picked else next(self._ids)
            image = sample_rows.new_order(self.rng, next(self._ids), user_id)
        else:
            image = sample_rows.new_event(
                self.rng, f"ev-{next(self._ids):x}-{self.rng.randrange(16**4):04x}"
            )
        return Change(table, "insert", image)

    def _change(self) -> Change:
        table = self.rng.choice(("users", "users", "orders", "events"))
        op = self.rng.choices(("insert", "update", "delete"), weights=self.options.weights)[0]
        picked = self.tables[table].pick(self.rng) if op != "insert" else None
        if picked is None:
            return self._insert(table)
        _, before = picked
        if op == "delete":
            return Change(table, "delete", before)
        values = sample_rows.changed(self.rng, table, before)
        return Change(table, "update", {**before, **values}, tuple(values))

    def _transaction(self) -> list[Change]:
        size = self.rng.randint(1, max(1, self.options.max_tx_rows))
        first = self._change()
        shard = self.router.shard_for(first.table, first.image)
        changes, keys = [first], {(first.table, pk_json(first.table, first.image))}
        for _ in range(size * 4):
            if len(changes) >= size:
                break
            candidate = self._change()
            key = (candidate.table, pk_json(candidate.table, candidate.image))
            if key not in keys and self.router.shard_for(candidate.table, candidate.image) == shard:
                changes.append(candidate)
                keys.add(key)
        return changes

    # -- committing -----------------------------------------------------------------------------

    def commit(self, changes: Sequence[Change]) -> None:
        """Commit the changes, one transaction per owning shard, retrying across a cut-over."""
        self.router.refresh()
        pending = list(changes)
        deadline = time.monotonic() + self.options.retry_timeout
        while pending:
            groups: dict[str, list[Change]] = {}
            for change in pending:
                shard = self.router.shard_for(change.table, change.image)
                groups.setdefault(shard, []).append(change)
            pending, frozen = [], False
            for shard, group in groups.items():
                outcome = self._commit_on(shard, group, deadline)
                if outcome != "committed":
                    pending.extend(group)
                    frozen = frozen or outcome == "frozen"
            if pending:
                self.stats.retries += 1
                if frozen:
                    self._wait_for_new_map(deadline)
                else:
                    time.sleep(0.2)
                    self.router.refresh()

    def _connection(self, shard: str) -> Connection:
        if self.gateway is not None:
            if self.gateway.address not in self._conns:
                self._conns[self.gateway.address] = self.gateway.connect(self._creds)
            return self._conns[self.gateway.address]
        host, port = self.router.endpoints[shard]
        conn = self._conns.get((host, port))
        if conn is None:
            conn = pymysql.connect(
                host=host,
                port=port,
                user=self._creds.username,
                password=self._creds.password,
                database=sample_schema.DATABASE,
                autocommit=False,
                charset="utf8mb4",
                connect_timeout=10,
                client_flag=committed_gtid.client_flags(self.router.flavors[shard]),
                ssl_disabled=True,
            )
            committed_gtid.track_own_gtids(conn, self.router.flavors[shard])
            self._conns[(host, port)] = conn
        return conn

    def _drop(self, shard: str) -> None:
        key = self.gateway.address if self.gateway else self.router.endpoints.get(shard, ("", 0))
        conn = self._conns.pop(key, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _commit_on(self, shard: str, changes: list[Change], deadline: float) -> str:
        """`committed`, `frozen` (read_only: retry once the map changed) or `retry`."""
        conn = None
        try:
            conn = self._connection(shard)
            with conn.cursor() as cur:
                # autocommit is off: the first statement opens the transaction.
                self._apply(cur, changes)
                if self.gateway is not None:  # the gateway knows where the rows went
                    shard, gtid, committed_at = self.gateway.commit(cur, changes)
                else:
                    gtid = committed_gtid.commit(conn, cur, self.router.flavors[shard])
                    committed_at = time.time()
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.rollback()
            if code == _READ_ONLY:
                self.stats.frozen_waits += 1
                return "frozen"
            retry = self.gateway.retryable(exc) if self.gateway else code in _CONNECTION_LOST
            if retry and time.monotonic() < deadline:
                self._drop(shard)
                return "retry"
            raise TrafficError(
                f"cannot commit {len(changes)} row change(s) on shard {shard}: {exc}"
            ) from None
        self._record(shard, changes, gtid, committed_at)
        return "committed"

    def _apply(self, cur: Any, changes: Iterable[Change]) -> None:
        inserts: dict[str, list[Change]] = {}
        for change in changes:
            if change.op == "insert":
                inserts.setdefault(change.table, []).append(change)
                continue
            self._flush_inserts(cur, inserts)
            key = [change.image[k] for k in sample_rows.match_columns(change.table)]
            if change.op == "delete":
                count = cur.execute(sample_rows.delete_sql(change.table), key)
            else:
                sql, _ = sample_rows.update_sql(change.table, list(change.updated))
                params = [sample_rows.sql_value(change.image[c]) for c in change.updated]
                count = cur.execute(sql, params + key)
            if count != 1:
                raise TrafficError(
                    f"{change.op} of {change.table} {pk_json(change.table, change.image)} "
                    f"matched {count} rows, expected 1; is another writer changing the tables?"
                )
        self._flush_inserts(cur, inserts)

    @staticmethod
    def _flush_inserts(cur: Any, inserts: dict[str, list[Change]]) -> None:
        for table, batch in inserts.items():
            for start in range(0, len(batch), 500):
                chunk = batch[start : start + 500]
                params = [p for c in chunk for p in sample_rows.insert_params(table, c.image)]
                cur.execute(sample_rows.insert_sql(table, len(chunk)), params)
        inserts.clear()

    def _record(self, shard: str, changes: list[Change], gtid: str, at: float) -> None:
        tx = next(self._tx)
        entries: list[LedgerEntry] = []
        for change in changes:
            key = pk_json(change.table, change.image)
            if change.op == "delete":
                self.tables[change.table].remove(key)
            else:
                self.tables[change.table].put(key, change.image)
            entries.append(
                LedgerEntry(
                    order=next(self._order),
                    tx=tx,
                    table=change.table,
                    pk=key,
                    op=change.op,
                    digest=None if change.op == "delete" else row_digest(change.image),
                    shard=shard,
                    keyspace_id=self.router.keyspace_id(change.table, change.image).hex(),
                    gtid=gtid,
                    commit_time=at,
                )
            )
            self.stats.by_op[change.op] += 1
        self.stats.transactions += 1
        self.stats.rows += len(changes)
        self.stats.by_shard[shard] = self.stats.by_shard.get(shard, 0) + len(changes)
        self.ledger.write_transaction(entries)
        if self.on_commit is not None:
            self.on_commit(entries)

    def _wait_for_new_map(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.router.refresh():
                return
            time.sleep(0.05)
        raise TrafficError(
            f"a shard stayed frozen (read_only) for {self.options.retry_timeout:.0f}s and"
            f" the manifest {self.router.manifest_path} did not change; is a reshard stuck?"
        )
