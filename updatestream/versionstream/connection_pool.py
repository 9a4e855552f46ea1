"""The connections of a Version Stream's transactions: a small pool, REPEATABLE READ, no autocommit.

Appends rely on REPEATABLE READ: ``SELECT ... FOR UPDATE`` then locks the gap after a stream's
last version (see :mod:`updatestream.versionstream.repository`). A connection whose operation
raised is rolled back and closed, never reused (unless it lost a lock conflict, which leaves the
session sound); the others go back to the pool.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Iterator
from typing import Any

import pymysql

Connection = pymysql.connections.Connection  # generic only for the type checker
Connect = Callable[[], "Connection[Any]"]
LOCK_CONFLICTS = {1213, 1205}  # deadlock, lock wait timeout: the transaction can be run again


def _rolled_back(conn: Connection[Any]) -> bool:
    try:
        conn.rollback()
    except Exception:
        return False
    return True


def _discard(conn: Connection[Any]) -> None:
    with contextlib.suppress(Exception):
        conn.rollback()
    with contextlib.suppress(Exception):
        conn.close()


class ConnectionPool:
    """Borrow a connection with `connection()`; safe to share between threads."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._idle: queue.LifoQueue[Connection[Any]] = queue.LifoQueue()

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection[Any]]:
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = self._connect()
            conn.autocommit(False)
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        try:
            yield conn
        except pymysql.err.OperationalError as exc:
            # a deadlock or lock wait timeout rolled the transaction back and left the session
            # sound: keep it for the retry (a new connection costs a handshake)
            if exc.args and exc.args[0] in LOCK_CONFLICTS and _rolled_back(conn):
                self._idle.put(conn)
            else:
                _discard(conn)
            raise
        except BaseException:
            _discard(conn)
            raise
        self._idle.put(conn)

    def close(self) -> None:
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(Exception):
                conn.close()
