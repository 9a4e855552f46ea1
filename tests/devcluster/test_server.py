"""The local MariaDB server and the shared fixtures, against real mariadbd processes (and mysqld
where a test is run on both flavors)."""

from __future__ import annotations

import pymysql
import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import pid_alive

from tests.conftest import MariaDBFixture, MariaDBServerFactory, ServerFactory
from tests.devcluster.binlog_secrets import (
    binlog_files,
    decoded_binlog,
    secrets_in_binlogs,
)


def test_server_logs_row_events_with_its_domain(mariadb_server: MariaDBFixture) -> None:
    server = mariadb_server.server
    assert server.variable("binlog_format") == "ROW"
    assert server.variable("binlog_row_metadata") == "FULL"
    assert server.variable("binlog_row_image") == "FULL"
    with mariadb_server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS t_server")
        cur.execute("CREATE TABLE IF NOT EXISTS t_server.t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t_server.t VALUES (1)")
        cur.execute("SELECT @@last_gtid")
        row = cur.fetchone()
        assert row is not None
        last_gtid = row[0]
    position = server.gtid_position()
    assert position.startswith(f"{server.domain_id}-{server.server_id}-")
    assert position == last_gtid
    files = server.binlog_files()
    assert files and files[0][0].startswith("mariadb-bin.") and files[-1][1] > 0


def test_accounts_stay_out_of_the_binlog(mariadb_server_factory: MariaDBServerFactory) -> None:
    """The fixture's admin account (as the sink servers of the tests, demo and benchmarks make
    theirs) and an account set again with a new password leave no password in the binlog."""
    fixture = mariadb_server_factory.start()
    server = fixture.server
    server.create_account("app", "first-pw-3c9d", ["GRANT SELECT ON *.* TO {user}"])
    server.create_account("app", "second-pw-7e1a", ["GRANT SELECT ON *.* TO {user}"])
    with server.connect("app", "second-pw-7e1a") as conn, conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone() == ("app@127.0.0.1",)
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE t_accounts")  # something that is logged, for contrast
    binlogs = binlog_files(server.datadir)
    assert any("t_accounts" in decoded_binlog(path) for path in binlogs)
    secrets = {
        "admin": fixture.admin.password,
        "first": "first-pw-3c9d",
        "second": "second-pw-7e1a",
    }
    assert secrets_in_binlogs(binlogs, secrets) == []


@pytest.mark.parametrize(
    ("flavor", "variable", "value"),
    [("mariadb", "binlog_format", "STATEMENT"), ("mysql", "binlog_row_metadata", "MINIMAL")],
)
def test_misconfigured_server_and_stop(
    request: pytest.FixtureRequest, flavor: str, variable: str, value: str
) -> None:
    factory: ServerFactory = request.getfixturevalue(f"{flavor}_server_factory")
    fixture = factory.start(extra_args=[f"--{variable.replace('_', '-')}={value}"])
    server = fixture.server
    assert server.variable(variable) == value
    pid = server.pid
    assert pid is not None and pid_alive(pid)
    server.stop()
    assert not pid_alive(pid)
    with pytest.raises(pymysql.err.OperationalError):
        fixture.connect()


def test_devcluster_fixture_serves_two_shards(devcluster: DevCluster) -> None:
    keyspace = devcluster.keyspace()
    assert keyspace.spec.serving_shards == ["-80", "80-"]
    secrets = [s.credentials_secret.name for s in keyspace.spec.shards]
    assert secrets == ["commerce-binlog-reader"] * 2
    domains = {devcluster.server(s).domain_id for s in ("-80", "80-")}
    assert len(domains) == 2
    with devcluster.connect("80-", role="app", database="commerce") as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM users")
        assert cur.fetchone() == (0,)
