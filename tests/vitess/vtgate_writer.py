"""A small writer of `users` rows through vtgate, for tests that need traffic during a Reshard.

Single-row transactions (BEGIN, an insert of a new user or an update of a known one, COMMIT), at
a steady pace from a thread, plus `burst(n)` for many small transactions at once. Errors while
vtgate buffers a SwitchTraffic are retried; any other error stops the thread and is raised by
`stop()`.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time

import pymysql

from updatestream.spec import Credentials

_RETRYABLE = (1105, 2003, 2006, 2013)
# vtgate v24 sometimes answers an autocommit DML sent while SwitchTraffic moves the primaries
# with "VT13001: [BUG] unexpected 'autocommitted' state in transaction"; the statement may or
# may not have been applied (a retried insert then finds its own row).
_VTGATE_BUG = 1815


class VtgateWriter:
    def __init__(self, port: int, creds: Credentials, database: str, first_id: int) -> None:
        self.port, self.creds, self.database = port, creds, database
        self.next_id = first_id
        self.ids: list[int] = []
        self.committed = 0
        self.retries = 0
        self.anomalies: list[tuple[float, str]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._conn = self._connect()
        self._rng = random.Random(first_id)

    def _connect(self) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.creds.username,
            password=self.creds.password,
            database=self.database,
            autocommit=False,
            connect_timeout=10,
            read_timeout=60,
        )

    def write_one(self) -> None:
        with self._lock:
            retried = False
            for _attempt in range(100):
                try:
                    inserted = self._write(self._conn, retried)
                    self._conn.commit()
                    self.committed += 1
                    if inserted:
                        self.ids.append(self.next_id)
                        self.next_id += 1
                    return
                except pymysql.err.MySQLError as exc:
                    with contextlib.suppress(pymysql.err.MySQLError):
                        self._conn.rollback()
                    code = exc.args[0] if exc.args else 0
                    if code == _VTGATE_BUG:
                        self.anomalies.append((time.time(), str(exc.args[-1])))
                    elif code not in _RETRYABLE:
                        raise
                    self.retries += 1
                    retried = True
                    time.sleep(0.2)
                    try:
                        self._conn.close()
                    finally:
                        self._conn = self._connect()
            raise TimeoutError("vtgate refused writes for 20 s")

    def _write(self, conn: pymysql.connections.Connection, retried: bool) -> bool:
        """One change in the open transaction; True when it inserts `next_id`."""
        with conn.cursor() as cur:
            if self.ids and self._rng.random() < 0.5 and not retried:
                cur.execute(
                    "UPDATE users SET visits = visits + 1 WHERE id = %s",
                    (self._rng.choice(self.ids),),
                )
                return False
            try:
                cur.execute(
                    "INSERT INTO users (id, name, created_at) VALUES (%s, %s, UTC_TIMESTAMP(6))",
                    (self.next_id, f"user {self.next_id}"),
                )
            except pymysql.err.IntegrityError:
                if not retried:
                    raise  # a retried insert may find the row its first attempt committed
            return True

    def burst(self, transactions: int) -> None:
        for _ in range(transactions):
            self.write_one()

    def start(self, per_second: float = 50.0) -> VtgateWriter:
        def run() -> None:
            try:
                while not self._stop.is_set():
                    self.write_one()
                    self._stop.wait(1.0 / per_second)
            except BaseException as exc:  # raised again by stop()
                self.error = exc

        self._thread = threading.Thread(target=run, name="vtgate-writer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
            self._thread = None
        self._stop.clear()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.stop()
        self._conn.close()
