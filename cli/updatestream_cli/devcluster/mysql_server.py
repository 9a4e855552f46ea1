"""One local MySQL 8 server: `mysqld --no-defaults` with its own datadir, socket and pid file.

The server is the MySQL Community 8.0.31 `mysqld` that `scripts/install-mysql.sh` (`make mysql`)
unpacks into the cache directory, or the one in `$UPDATESTREAM_MYSQL_DIR/bin`. It runs with
what a change stream needs from MySQL: GTID mode on (`gtid_mode=ON`,
`enforce_gtid_consistency=ON`), row-based binlogs with full row images and full row metadata
(column names in the table-map events), its own `server_id`, and the X Protocol off. Buffers are
small and durability relaxed, as for the MariaDB servers.

A datadir template is made once per MySQL version by `mysqld --initialize-insecure` (root
without a password over the socket) and copied per server. The copy loses the template's
`auto.cnf`, so every server makes its own `server_uuid` at first start: the GTIDs of two shards
never share a UUID.

Accounts use MySQL 8's default `caching_sha2_password` (the only password plugin MySQL 8.4 enables
by default). A client without TLS authenticates in full (after a server restart or a password
change) through an RSA key exchange, which PyMySQL does with the `cryptography` package; later
connections take the fast path of the server's cache.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from updatestream_cli.devcluster.errors import ServerError
from updatestream_cli.devcluster.local_server import (
    LocalServer,
    ServerFlavor,
    cache_dir,
    cached_template,
    run_installer,
    server_version,
)

MYSQL_VERSION = "8.0.31"  # what scripts/install-mysql.sh installs
MYSQL_DIR_VARIABLE = "UPDATESTREAM_MYSQL_DIR"

# Flags used both to create the template datadir and to run servers: InnoDB file sizes must agree.
_STORAGE_ARGS: tuple[str, ...] = (
    "--innodb-buffer-pool-size=32M",
    "--innodb-redo-log-capacity=8M",
)
_SERVER_ARGS: tuple[str, ...] = (
    "--gtid-mode=ON",
    "--enforce-gtid-consistency=ON",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--mysqlx=OFF",
    "--skip-name-resolve",
    "--performance-schema=OFF",
    "--max-binlog-size=64M",
    "--innodb-flush-log-at-trx-commit=2",
    "--sync-binlog=0",
    "--character-set-server=utf8mb4",
    "--default-time-zone=+00:00",
    "--max-connections=200",
    "--key-buffer-size=1M",
    "--table-open-cache=400",
    "--temptable-max-ram=32M",
)


class MySQLNotInstalled(ServerError):
    """No MySQL 8 `mysqld` where the development cluster looks for one."""


def mysql_dir() -> Path:
    """The MySQL installation: `$UPDATESTREAM_MYSQL_DIR`, or the installer's cache directory."""
    configured = os.environ.get(MYSQL_DIR_VARIABLE)
    return Path(configured) if configured else cache_dir() / "mysql" / MYSQL_VERSION


def mysqld() -> Path:
    """The `mysqld` program; `MySQLNotInstalled` saying how to get it when it is missing."""
    program = mysql_dir() / "bin" / "mysqld"
    if not os.access(program, os.X_OK):
        where = f"${MYSQL_DIR_VARIABLE}" if os.environ.get(MYSQL_DIR_VARIABLE) else "the cache"
        raise MySQLNotInstalled(
            f"no MySQL server at {program} ({where}); run `make mysql` (or "
            f"`bash scripts/install-mysql.sh`) to install MySQL {MYSQL_VERSION}, or set "
            f"{MYSQL_DIR_VARIABLE} to a MySQL 8.0 or 8.4 directory holding bin/mysqld"
        )
    return program


def mysql_version() -> str:
    fix = "reinstall it with `make mysql`"
    return server_version([str(mysqld()), "--no-defaults"], fix, MySQLNotInstalled)


def _install(datadir: Path) -> None:
    command = [
        str(mysqld()),
        "--no-defaults",
        "--initialize-insecure",
        "--user=root",
        f"--datadir={datadir}",
        f"--log-error={datadir.parent / 'initialize.log'}",
        *_STORAGE_ARGS,
    ]
    try:
        run_installer(command, datadir, "reinstall MySQL with `make mysql`")
    except ServerError:
        log = datadir.parent / "initialize.log"
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
        raise ServerError(
            f"mysqld --initialize-insecure failed for {datadir}: {tail}; reinstall MySQL "
            "with `make mysql`"
        ) from None


@dataclass(kw_only=True)
class MySQLServer(LocalServer):
    """One MySQL 8 `mysqld`; its GTIDs are `server_uuid:N`."""

    flavor: ClassVar[ServerFlavor] = "mysql"
    program: ClassVar[str] = "mysqld"

    def template(self) -> Path:
        """A freshly initialised datadir to copy from; created once per MySQL version and flags."""
        return cached_template("mysql", [mysql_version(), *_STORAGE_ARGS], _install)

    def prepare_datadir(self, datadir: Path) -> None:
        # auto.cnf holds the template's server_uuid; without it mysqld makes a new one.
        (datadir / "auto.cnf").unlink(missing_ok=True)

    def command(self) -> list[str]:
        return [
            str(mysqld()),
            *self.local_args(),
            *_STORAGE_ARGS,
            *_SERVER_ARGS,
            *self.extra_args,
        ]

    def gtid_position(self) -> str:
        """`@@global.gtid_executed`: every GTID this server has committed (`uuid:1-N[,...]`)."""
        text = str(self.query("SELECT @@GLOBAL.gtid_executed")[0][0] or "")
        return text.replace("\n", "")

    def server_uuid(self) -> str:
        return self.variable("server_uuid")
