"""`updatestream devcluster up/status/traffic/check/down` as a user runs them, on MariaDB and on
MySQL 8 shards."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pymysql
import pytest
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import pid_alive


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "updatestream_cli", "devcluster", *args],
        capture_output=True,
        text=True,
        check=check,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_up_is_idempotent_status_reports_down_stops(tmp_path: Path) -> None:
    directory = str(tmp_path / "dc")
    first = _cli("up", "--dir", directory)
    cluster = DevCluster(directory)
    try:
        pids = {s: cluster.server(s).pid for s in ("-80", "80-")}
        manifest = cluster.manifest_path.read_bytes()
        second = _cli("up", "--dir", directory)
        assert "nothing changed" in second.stderr
        assert {s: cluster.server(s).pid for s in ("-80", "80-")} == pids
        assert cluster.manifest_path.read_bytes() == manifest

        report = json.loads(_cli("status", "--json", "--dir", directory).stdout)
        assert report["serving_shards"] == ["-80", "80-"]
        for shard in report["shards"]:
            assert shard["running"] and shard["gtid_position"].startswith(
                f"{shard['domain_id']}-{shard['server_id']}-"
            )
            assert shard["binlog_files"][0]["name"].startswith("mariadb-bin.")

        outputs = first.stdout + first.stderr + second.stdout + second.stderr + json.dumps(report)
        for role in ("reader", "app", "admin"):
            creds = cluster.credentials(role)
            assert creds.password not in outputs
            assert creds.password not in cluster.manifest_path.read_text()
            folder = (
                cluster.secrets_dir / f"commerce-{'binlog-reader' if role == 'reader' else role}"
            )
            for key in ("username", "password"):
                assert stat.S_IMODE((folder / key).stat().st_mode) == 0o600

        with cluster.connect("-80", "admin") as conn, conn.cursor() as cur:
            cur.execute("SHOW GRANTS FOR 'commerce_reader'@'127.0.0.1'")
            grants = " ".join(str(r[0]) for r in cur.fetchall())
            assert "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.*" in grants
            cur.execute("SHOW GRANTS FOR 'commerce_app'@'127.0.0.1'")
            app = " ".join(str(r[0]) for r in cur.fetchall())
            assert "SUPER" not in app and "READ_ONLY ADMIN" not in app and "ON `commerce`.*" in app
    finally:
        down = _cli("down", "--dir", directory)
    assert "stopped -80, 80-" in down.stderr
    assert not any(pid_alive(pid) for pid in pids.values() if pid)


def test_mysql_cluster_on_another_address_takes_traffic_and_checks_clean(tmp_path: Path) -> None:
    """`up --flavor mysql --host 127.0.0.2`: MySQL 8 shards listening on that address only, a
    manifest naming it and the flavor, accounts that accept other hosts; traffic with a ledger
    and `check` as on MariaDB; an existing cluster keeps its flavor; reshard is refused."""
    directory = str(tmp_path / "dc")
    ledger = tmp_path / "ledger.jsonl"
    pids: dict[str, int | None] = {}
    try:
        _cli("up", "--flavor", "mysql", "--host", "127.0.0.2", "--dir", directory)
        cluster = DevCluster(directory)
        pids = {s: cluster.server(s).pid for s in ("-80", "80-")}
        manifest = cluster.keyspace()
        assert {(s.flavor, s.mysql.host) for s in manifest.spec.shards} == {("mysql", "127.0.0.2")}
        report = json.loads(_cli("status", "--json", "--dir", directory).stdout)
        assert report["flavor"] == "mysql"
        for shard in report["shards"]:
            assert shard["address"].startswith("127.0.0.2:")
            assert shard["binlog_files"][0]["name"].startswith("mysql-bin.")
        port = cluster.server("-80").port
        with pytest.raises(pymysql.err.OperationalError):  # not on loopback's 127.0.0.1
            pymysql.connect(host="127.0.0.1", port=port, user="x", password="x", connect_timeout=3)
        with cluster.connect("-80", "admin") as conn, conn.cursor() as cur:
            cur.execute("SELECT host FROM mysql.user WHERE user LIKE 'commerce%'")
            assert {row[0] for row in cur.fetchall()} == {"%"}
            cur.execute("SHOW GRANTS FOR 'commerce_reader'@'%'")
            grants = " ".join(str(r[0]) for r in cur.fetchall())
            assert "GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.*" in grants

        traffic = _cli(
            "traffic", "--rate", "300", "--duration", "3", "--preload", "200",
            "--ledger", str(ledger), "--seed", "3", "--dir", directory,
        )  # fmt: skip
        assert "committed" in traffic.stderr
        gtids = {json.loads(line)["gtid"].partition(":")[0] for line in ledger.open()}
        assert gtids == {cluster.server(s).variable("server_uuid") for s in ("-80", "80-")}
        check = _cli("check", "--ledger", str(ledger), "--dir", directory)
        assert "OK: the serving shards hold exactly the ledger's rows" in check.stderr

        again = _cli("up", "--flavor", "mariadb", "--dir", directory, check=False)
        assert again.returncode != 0 and "was made with --flavor mysql" in again.stderr
        split = _cli("reshard", "--from=-80", "--to=-40,40-80", "--dir", directory, check=False)
        assert split.returncode != 0 and "not yet MySQL" in split.stderr
        assert cluster.keyspace().spec.serving_shards == ["-80", "80-"]
    finally:
        down = _cli("down", "--dir", directory)
    assert "stopped -80, 80-" in down.stderr
    assert not any(pid_alive(pid) for pid in pids.values() if pid)
