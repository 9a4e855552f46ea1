"""The local MySQL 8 server and its fixtures, against real mysqld processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from updatestream_cli.devcluster.errors import ServerError
from updatestream_cli.devcluster.local_server import check_bind_address
from updatestream_cli.devcluster.mysql_server import MySQLNotInstalled, MySQLServer, mysqld

from tests.conftest import ServerFactory, ServerFixture

REQUIRED = {
    "gtid_mode": "ON",
    "enforce_gtid_consistency": "ON",
    "log_bin": "1",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "bind_address": "127.0.0.1",
    "innodb_flush_log_at_trx_commit": "2",
    "sync_binlog": "0",
    "character_set_server": "utf8mb4",
    "collation_server": "utf8mb4_0900_ai_ci",
    "default_authentication_plugin": "caching_sha2_password",
}


def test_server_runs_with_the_settings_a_change_stream_needs(mysql_server: ServerFixture) -> None:
    server = mysql_server.server
    assert server.variable("version") == "8.0.31"
    assert {name: server.variable(name) for name in REQUIRED} == REQUIRED
    assert server.variable("server_id") == str(server.server_id)
    plugins = server.query(
        "SELECT plugin_status FROM information_schema.plugins WHERE plugin_name = 'mysqlx'"
    )
    assert plugins == [("DISABLED",)]  # the X Protocol is off: no second port
    with mysql_server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS t_server")
        cur.execute("CREATE TABLE IF NOT EXISTS t_server.t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t_server.t VALUES (1)")
    uuid = server.variable("server_uuid")
    position = server.gtid_position()
    assert position.startswith(f"{uuid}:1-") and "," not in position
    files = server.binlog_files()
    assert files and files[0][0].startswith("mysql-bin.") and files[-1][1] > 0


def test_every_server_has_its_own_uuid(
    mysql_server: ServerFixture, mysql_server_factory: ServerFactory
) -> None:
    """Datadirs are copies of one template; each server still makes its own server_uuid."""
    other = mysql_server_factory.start()
    uuids = {mysql_server.server.variable("server_uuid"), other.server.variable("server_uuid")}
    template = (other.server.template() / "auto.cnf").read_text()
    assert len(uuids) == 2 and not any(uuid in template for uuid in uuids)


def test_accounts_use_caching_sha2_and_stay_out_of_the_binlog(
    mysql_server_factory: ServerFactory,
) -> None:
    """An account of the cluster authenticates with caching_sha2_password over TCP without TLS,
    also in full (an empty cache: after FLUSH PRIVILEGES); its password, and the statement that
    set it, never reach the binlog."""
    fixture = mysql_server_factory.start()
    server = fixture.server
    grants = ["GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO {user}"]
    server.create_account("reader_t", "first-pw-3c9d", grants)
    server.create_account("reader_t", "second-pw-7e1a", grants)
    server.query("FLUSH PRIVILEGES")  # the next login cannot take the cache's fast path
    with server.connect("reader_t", "second-pw-7e1a") as conn, conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone() == ("reader_t@127.0.0.1",)
        cur.execute("SHOW GRANTS")
        shown = " ".join(str(r[0]) for r in cur.fetchall())
        assert "REPLICATION SLAVE, REPLICATION CLIENT" in shown and "SELECT" in shown
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone() == ("Ssl_cipher", "")  # not over TLS
    plugin = server.query("SELECT plugin FROM mysql.user WHERE user = 'reader_t'")
    assert plugin == [("caching_sha2_password",)]
    with fixture.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE t_accounts")  # something that is logged, for contrast
        cur.execute("FLUSH BINARY LOGS")
    raw = b"".join(p.read_bytes() for p in sorted(server.datadir.glob("mysql-bin.[0-9]*")))
    assert b"t_accounts" in raw
    for secret in ("first-pw-3c9d", "second-pw-7e1a", fixture.admin.password):
        assert secret.encode() not in raw
    assert b"reader_t" not in raw and b"IDENTIFIED" not in raw


def test_a_missing_mysql_is_a_typed_error_that_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPDATESTREAM_MYSQL_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(MySQLNotInstalled, match=r"nowhere/bin/mysqld.*make mysql"):
        mysqld()
    server = MySQLServer(base_dir=tmp_path / "server", server_id=7)
    with pytest.raises(MySQLNotInstalled, match="UPDATESTREAM_MYSQL_DIR"):
        server.start()
    assert server.pid is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("localhost", "not an IPv4 address"),
        ("0.0.0.0", "not a wildcard"),
        ("::1", "one IPv4 address"),
        ("192.0.2.1", "is it an address of this machine"),
    ],
)
def test_bind_addresses_a_server_cannot_use_are_refused(address: str, reason: str) -> None:
    with pytest.raises(ServerError, match=reason):
        check_bind_address(address)
