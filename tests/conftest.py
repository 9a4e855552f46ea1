"""Session fixtures with real MariaDB servers, shared by every test package.

- `mariadb_server`: one started mariadbd with an admin user (`MariaDBFixture`).
- `mariadb_server_factory`: start more servers, e.g. a deliberately misconfigured one with
  `extra_args=["--binlog-format=STATEMENT"]`; all are stopped at the end of the session.
- `devcluster`: a two-shard (`-80,80-`) development cluster with the sample schema
  (`updatestream_cli.devcluster.cluster.DevCluster`), shared by the session; `cluster`: one
  like it of each test module's own, for tests that reshard it or change its data.

Datadirs are copied from a template installed once per MariaDB version (see
`updatestream_cli.devcluster.mariadb_server.template_datadir`), so each server costs about a second.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import Connection
from updatestream_cli.devcluster.mariadb_server import MariaDBServer

from updatestream.spec import Credentials

_server_ids = itertools.count(100)

# py4j logs at INFO from finalizers that run after pytest has closed its capture streams; the
# "Logging error" tracebacks they print would follow pytest's summary line.
logging.getLogger("py4j").setLevel(logging.WARNING)


@dataclass
class MariaDBFixture:
    """A running server plus an admin account (ALL PRIVILEGES over TCP on 127.0.0.1)."""

    server: MariaDBServer
    admin: Credentials = field(repr=False)

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        assert self.server.port is not None
        return self.server.port

    def connect(self, database: str | None = None, **kwargs: Any) -> Connection:
        return self.server.connect(self.admin.username, self.admin.password, database, **kwargs)


class MariaDBServerFactory:
    """Starts servers under one directory; `stop_all()` stops exactly those."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.servers: list[MariaDBServer] = []

    def start(
        self,
        name: str | None = None,
        *,
        extra_args: Sequence[str] = (),
        server_id: int | None = None,
        domain_id: int | None = None,
    ) -> MariaDBFixture:
        ident = server_id if server_id is not None else next(_server_ids)
        server = MariaDBServer(
            base_dir=self.root / (name or f"server-{ident}"),
            server_id=ident,
            domain_id=domain_id,
            extra_args=tuple(extra_args),
        )
        server.start()
        self.servers.append(server)
        admin = Credentials(username="us_admin", password=secrets.token_urlsafe(18))
        server.create_account(
            admin.username,
            admin.password,
            ["GRANT ALL PRIVILEGES ON *.* TO {user} WITH GRANT OPTION"],
        )
        return MariaDBFixture(server=server, admin=admin)

    def stop_all(self) -> None:
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()


@pytest.fixture(scope="session")
def mariadb_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[MariaDBServerFactory]:
    factory = MariaDBServerFactory(tmp_path_factory.mktemp("mariadb"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def mariadb_server(mariadb_server_factory: MariaDBServerFactory) -> MariaDBFixture:
    """One running mariadbd (ROW binlog, full metadata) with an admin user."""
    return mariadb_server_factory.start("shared")


@pytest.fixture(scope="session")
def devcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A running two-shard (`-80,80-`) cluster with the sample schema and its manifest.

    Shared by the session: tests that reshard it or change its data use `cluster` instead.
    """
    with DevCluster(tmp_path_factory.mktemp("devcluster")).running("-80,80-") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevCluster]:
    """A running two-shard (`-80,80-`) cluster of the requesting test module's own, for tests
    that reshard it or change its data."""
    name = request.module.__name__.rpartition(".")[2]
    with DevCluster(tmp_path_factory.mktemp(name)).running("-80,80-") as dev:
        yield dev
