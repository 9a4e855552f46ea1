"""The Debezium peer: its embedded engine in a small Java harness, driven from Python.

The harness (`bench/peers/debezium`, built by `make debezium-peer` into the cache directory,
once per connector) runs each flavor's own Debezium connector: the MariaDB connector 3.5.0
(the newest the package registry serves) on MariaDB, the MySQL connector 3.6.1 on MySQL 8, with
offsets and schema history in memory, and prints one JSON line per row change
(`bench.peertools` parses them). `bench-peers` and `bench-snapshot` start it from here.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from updatestream_cli.devcluster.local_server import LocalServer

from bench.peertools import CatchUp, HarnessOutput, catch_up, parse_lines

HARNESS_CLASS = "io.updatestream.bench.DebeziumPeer"
# per flavor: what the report names, and the connector's own properties
DEBEZIUM = {
    "mariadb": "3.5.0.Final, embedded engine, MariaDB connector",
    "mysql": "3.6.1.Final, embedded engine, MySQL connector",
}
_CONNECTOR = {
    "mariadb": {
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.ssl.mode": "disable",
    },
    "mysql": {
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "database.ssl.mode": "disabled",
        # MySQL 8's caching_sha2_password without TLS: the driver takes the server's RSA key
        "driver.allowPublicKeyRetrieval": "true",
    },
}


def debezium_properties(
    port: int,
    user: str,
    password: str,
    database: str,
    server_id: int,
    snapshot_mode: str,
    poll_interval_ms: int | None = None,
    flavor: str = "mariadb",
) -> dict[str, str]:
    """The engine's and the connector's properties: one server of `flavor` on 127.0.0.1, memory
    offsets and schema history, row changes of `database` only."""
    props = {
        "name": f"peer-{server_id}",
        **_CONNECTOR[flavor],
        "database.hostname": "127.0.0.1",
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.server.id": str(server_id),
        "topic.prefix": "peer",
        "database.include.list": database,
        "snapshot.mode": snapshot_mode,
        "snapshot.locking.mode": "none",
        "include.schema.changes": "false",
        "tombstones.on.delete": "false",
        "offset.storage": "org.apache.kafka.connect.storage.MemoryOffsetBackingStore",
        "offset.flush.interval.ms": "60000",
        "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
    }
    if poll_interval_ms is not None:
        props["poll.interval.ms"] = str(poll_interval_ms)
    return props


def harness_command(
    build_dir: Path, props: dict[str, str], expect: int | None, seed_offset: str | None = None
) -> list[str]:
    classpath = f"{build_dir / 'debezium-peer.jar'}{os.pathsep}{build_dir / 'lib' / '*'}"
    command = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
               HARNESS_CLASS]  # fmt: skip
    if expect is not None:
        command += ["--expect", str(expect)]
    if seed_offset is not None:
        command += ["--seed-offset", seed_offset]
    return command + [f"{key}={value}" for key, value in props.items()]


def from_gtid_set(
    props: dict[str, str], server: LocalServer, offsets: Path, executed: str
) -> tuple[dict[str, str], str]:
    """Properties and a seeded offset that make a MySQL connector read every transaction after
    the GTID set `executed`, without a snapshot: Debezium 3's MySQL connector has no
    `snapshot.mode=never` (its MariaDB connector 3.5 still has), so the engine's file offset
    store is written first, and `recovery` rebuilds only the schema before streaming."""
    first = str(server.query("SHOW BINARY LOGS")[0][0])
    offsets.unlink(missing_ok=True)
    seeded = props | {
        "snapshot.mode": "recovery",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(offsets),
    }
    return seeded, json.dumps({"file": first, "pos": 4, "gtids": executed})


class Harness:
    """The Debezium harness streaming in the background; `stop()` closes its input and waits."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.output = HarnessOutput()
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,))
        self._reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.output.add(line)

    def wait_for(self, what: str, ready: Callable[[HarnessOutput], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready(self.output):
            if self.output.errors:
                raise SystemExit(f"Debezium failed: {self.output.errors[0]}")
            if self.process.poll() is not None:
                raise SystemExit(f"the Debezium harness exited ({self.process.returncode})")
            if time.monotonic() > deadline:
                raise SystemExit(f"Debezium: no {what} within {timeout:.0f}s")
            time.sleep(0.2)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)
        self._log.close()


def debezium_catch_up(
    build_dir: Path,
    server: LocalServer,
    user: str,
    password: str,
    rows: int,
    log: Path,
    start: str,
) -> CatchUp:
    """Debezium reading the `rows` row changes after the position `start` (MySQL: its GTID
    set; MariaDB's connector reads the whole binlog, which holds nothing else)."""
    props = debezium_properties(
        int(server.port or 0), user, password, "bench", 5400, "never", flavor=server.flavor
    )
    seed = None
    if server.flavor == "mysql":
        props, seed = from_gtid_set(props, server, log.with_name("debezium-offsets.dat"), start)
    with log.open("ab") as err:
        done = subprocess.run(
            harness_command(build_dir, props, rows, seed), stdout=subprocess.PIPE, stderr=err,
            text=True, timeout=900, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        causes = [line for line in log.read_text(errors="replace").splitlines()
                  if line.startswith("Caused by:")]  # fmt: skip
        raise SystemExit(
            f"the Debezium harness exited with {done.returncode}: "
            + (causes[-1] if causes else "see its log")
        )
    return catch_up(parse_lines(done.stdout.splitlines()), rows)
