"""Appenders of one stream queue on its lock instead of deadlocking (real MariaDB)."""

from __future__ import annotations

import json
import threading
import uuid

import pymysql

from tests.conftest import MariaDBFixture
from updatestream.versionstream import Record, VersionStreamRepository


def test_concurrent_appenders_wait_in_turn_without_deadlocks(
    mariadb_server: MariaDBFixture,
) -> None:
    def connect() -> pymysql.connections.Connection:
        return mariadb_server.connect(autocommit=False)

    repository = VersionStreamRepository(
        connect, table=f"l_{uuid.uuid4().hex[:10]}", database="us_vslock", stream=3
    )
    repository.create_table()
    repository.append([Record("seed", "0")])  # an empty stream's first appenders share a gap
    errors: list[BaseException] = []

    def append(writer: int) -> None:
        try:
            for n in range(25):
                repository.append([Record(f"w{writer}:{n % 3}", json.dumps(n))])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert repository.conflicts == 0  # no deadlock, no lock wait timeout: nothing ran twice
    assert repository.fetch_last_version() == 8 * 25
    history = repository.fetch_history("w5:1")
    assert [data for _, data in history] == [n for n in range(25) if n % 3 == 1]
    repository.close()
