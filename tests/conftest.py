"""Session fixtures with real MariaDB and MySQL 8 servers, shared by every test package.

- `mariadb_server` / `mysql_server`: one started mariadbd / mysqld with an admin user
  (`ServerFixture`).
- `mariadb_server_factory` / `mysql_server_factory`: start more servers, e.g. a deliberately
  misconfigured one with `extra_args=["--binlog-format=STATEMENT"]`; all are stopped at the
  end of the session.
- `devcluster`: a two-shard (`-80,80-`) MariaDB development cluster with the sample schema
  (`updatestream_cli.devcluster.cluster.DevCluster`), shared by the session; `cluster`: one
  like it of each test module's own, for tests that reshard it or change its data.
- `flavor`: the server flavor of `cluster`, `mariadb` unless the module asks for others:
  `pytestmark = pytest.mark.parametrize("flavor", FLAVORS, indirect=True, scope="module")`
  (`FLAVORS` from `updatestream_cli.devcluster.local_server`)
  runs every test of the module on a MariaDB cluster and on a MySQL one.

Datadirs are copied from a template installed once per server version (see
`updatestream_cli.devcluster.local_server.cached_template`), so each server costs a second or
two. MySQL comes from `make mysql` (`scripts/install-mysql.sh`).
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
from updatestream_cli.devcluster.local_server import Connection, LocalServer, ServerFlavor
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.mysql_server import MySQLServer

from harness import threadsafe_ast
from harness.accounts import write_secret
from tests.lanes import LaneScheduling, order_lanes
from updatestream.spec import Credentials

# Tracebacks are formatted in many threads here (servers, Spark's callbacks, pytest's report):
# one parse at a time, or CPython 3.11.7 can end the session with an INTERNALERROR.
threadsafe_ast.install()

_server_ids = itertools.count(100)

# py4j logs at INFO from finalizers that run after pytest has closed its capture streams; the
# "Logging error" tracebacks they print would follow pytest's summary line.
logging.getLogger("py4j").setLevel(logging.WARNING)


@dataclass
class ServerFixture:
    """A running server plus an admin account (ALL PRIVILEGES over TCP on 127.0.0.1)."""

    server: LocalServer
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

    def admin_secret(self, secrets_dir: Path, name: str) -> str:
        """The admin account as the Secret `name` under `secrets_dir`; returns its name."""
        return write_secret(secrets_dir, name, self.admin.username, self.admin.password)


MariaDBFixture = MySQLFixture = ServerFixture  # the names the test modules use


class ServerFactory:
    """Starts servers of one flavor under one directory; `stop_all()` stops exactly those."""

    def __init__(self, root: Path, flavor: ServerFlavor) -> None:
        self.root = root
        self.flavor = flavor
        self.servers: list[LocalServer] = []

    def start(
        self,
        name: str | None = None,
        *,
        extra_args: Sequence[str] = (),
        server_id: int | None = None,
        domain_id: int | None = None,
    ) -> ServerFixture:
        """A started server; `domain_id` is MariaDB's GTID domain (the server id by default)."""
        ident = server_id if server_id is not None else next(_server_ids)
        base_dir = self.root / (name or f"server-{ident}")
        server: LocalServer
        if self.flavor == "mysql":
            assert domain_id is None, "MySQL has no GTID domains"
            server = MySQLServer(base_dir=base_dir, server_id=ident, extra_args=tuple(extra_args))
        else:
            server = MariaDBServer(
                base_dir=base_dir,
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
        return ServerFixture(server=server, admin=admin)

    def stop_all(self) -> None:
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()


MariaDBServerFactory = MySQLServerFactory = ServerFactory  # the names the test modules use


def _servers(
    tmp_path_factory: pytest.TempPathFactory, flavor: ServerFlavor
) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path_factory.mktemp(flavor), flavor)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def mariadb_server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    yield from _servers(tmp_path_factory, "mariadb")


@pytest.fixture(scope="session")
def mariadb_server(mariadb_server_factory: ServerFactory) -> ServerFixture:
    """One running mariadbd (ROW binlog, full metadata) with an admin user."""
    return mariadb_server_factory.start("shared")


@pytest.fixture(scope="session")
def mysql_server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    yield from _servers(tmp_path_factory, "mysql")


@pytest.fixture(scope="session")
def mysql_server(mysql_server_factory: ServerFactory) -> ServerFixture:
    """One running MySQL 8 mysqld (GTID mode, ROW binlog, full metadata) with an admin user."""
    return mysql_server_factory.start("shared")


@pytest.fixture(scope="session")
def devcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A running two-shard (`-80,80-`) cluster with the sample schema and its manifest.

    Shared by the session: tests that reshard it or change its data use `cluster` instead.
    """
    with DevCluster(tmp_path_factory.mktemp("devcluster")).running("-80,80-") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def flavor(request: pytest.FixtureRequest) -> ServerFlavor:
    """The server flavor of `cluster`: `mariadb`, or the module's parameter (see the top)."""
    value: ServerFlavor = getattr(request, "param", "mariadb")
    return value


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, flavor: ServerFlavor
) -> Iterator[DevCluster]:
    """A running two-shard (`-80,80-`) cluster of `flavor`, of the requesting test module's
    own, for tests that reshard it or change its data."""
    name = request.module.__name__.rpartition(".")[2]
    directory = tmp_path_factory.mktemp(f"{name}-{flavor}")
    with DevCluster(directory, flavor=flavor).running("-80,80-") as dev:
        yield dev


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long lanes first, so that both workers of `make test` start on one (tests/lanes.py)."""
    order_lanes(items)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LaneScheduling | None:
    """`-n 2 --dist loadscope` (`make test`) hands out lanes rather than modules."""
    return LaneScheduling(config, log) if config.getvalue("dist") == "loadscope" else None
