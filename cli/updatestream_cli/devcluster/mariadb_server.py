"""One local MariaDB server: `mariadbd --no-defaults` with its own datadir, socket and pid file.

Row-based binlogs with full metadata and full row images, its own `server_id` and
`gtid_domain_id`, and small buffers so several fit on a laptop. Datadirs are copied from a
template made once by `mariadb-install-db` (the install is the slow part), cached per MariaDB
version under the UpdateStream cache directory.

Durability is relaxed on purpose (`innodb_flush_log_at_trx_commit=2`, `sync_binlog=0`): these
servers hold throw-away development data, and a crash of mariadbd itself is not something the
development cluster simulates. Killing the *workflow* (not the server) is what the tests do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from updatestream_cli.devcluster.local_server import (
    LocalServer,
    ServerFlavor,
    cached_template,
    run_installer,
    server_version,
)

MARIADBD = os.environ.get("UPDATESTREAM_MARIADBD", "/usr/sbin/mariadbd")
INSTALL_DB = os.environ.get("UPDATESTREAM_MARIADB_INSTALL_DB", "mariadb-install-db")

# Flags used both to create the template datadir and to run servers: InnoDB file sizes must agree.
_STORAGE_ARGS: tuple[str, ...] = (
    "--innodb-buffer-pool-size=48M",
    "--innodb-log-file-size=16M",
    "--innodb-data-file-path=ibdata1:10M:autoextend",
)
_SERVER_ARGS: tuple[str, ...] = (
    "--skip-name-resolve",
    "--performance-schema=OFF",
    "--binlog-format=ROW",
    "--binlog-row-metadata=FULL",
    "--binlog-row-image=FULL",
    "--max-binlog-size=64M",
    "--innodb-flush-log-at-trx-commit=2",
    "--sync-binlog=0",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
    "--default-time-zone=+00:00",
    "--max-connections=200",
    "--key-buffer-size=1M",
    "--table-open-cache=400",
)


def mariadb_version() -> str:
    return server_version([MARIADBD], "install mariadb-server (make system-deps)")


def _install(datadir: Path) -> None:
    command = [
        INSTALL_DB,
        "--no-defaults",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--user=root",
        f"--datadir={datadir}",
        *_STORAGE_ARGS,
    ]
    run_installer(command, datadir, "check that mariadb-server is installed (make system-deps)")


@dataclass(kw_only=True)
class MariaDBServer(LocalServer):
    """One `mariadbd`; its GTIDs are `domain-server-seq` with its own `gtid_domain_id`."""

    flavor: ClassVar[ServerFlavor] = "mariadb"
    program: ClassVar[str] = "mariadbd"

    domain_id: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.domain_id is None:
            self.domain_id = self.server_id

    def template(self) -> Path:
        """A freshly installed datadir to copy from; created once per MariaDB version and flags."""
        return cached_template("mariadb", [mariadb_version(), *_STORAGE_ARGS], _install)

    def prepare_datadir(self, datadir: Path) -> None:
        """Nothing to adjust: a MariaDB datadir holds no identity of its server."""

    def command(self) -> list[str]:
        return [
            MARIADBD,
            *self.local_args(),
            f"--gtid-domain-id={self.domain_id}",
            *_STORAGE_ARGS,
            *_SERVER_ARGS,
            *self.extra_args,
        ]

    def gtid_position(self) -> str:
        """`@@gtid_binlog_pos`: the GTID position of the last transaction in this binlog."""
        return str(self.query("SELECT @@gtid_binlog_pos")[0][0] or "")
