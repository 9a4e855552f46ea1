"""The local Vitess cluster as a change stream finds it: settings, accounts, manifest, users."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import psutil
import pymysql
import pytest
from updatestream_cli.vitess import runtime
from updatestream_cli.vitess.cluster import VitessCluster

from tests.vitess.conftest import credentials
from updatestream import spec

# `_vt.vreplication` as Vitess v24 creates it on every tablet (name, type, nullable).
VREPLICATION_COLUMNS = [
    ("id", "int", "NO"),
    ("workflow", "varbinary(1000)", "YES"),
    ("source", "mediumblob", "NO"),
    ("pos", "longblob", "NO"),
    ("stop_pos", "longblob", "YES"),
    ("max_tps", "bigint", "NO"),
    ("max_replication_lag", "bigint", "NO"),
    ("cell", "varbinary(1000)", "YES"),
    ("tablet_types", "varbinary(100)", "YES"),
    ("time_updated", "bigint", "NO"),
    ("transaction_timestamp", "bigint", "NO"),
    ("state", "varbinary(100)", "NO"),
    ("message", "varbinary(1000)", "YES"),
    ("db_name", "varbinary(255)", "NO"),
    ("rows_copied", "bigint", "NO"),
    ("tags", "varbinary(1024)", "NO"),
    ("time_heartbeat", "bigint", "NO"),
    ("workflow_type", "int", "NO"),
    ("time_throttled", "bigint", "NO"),
    ("component_throttled", "varchar(255)", "NO"),
    ("reason_throttled", "varchar(1000)", "NO"),
    ("workflow_sub_type", "int", "NO"),
    ("defer_secondary_keys", "tinyint(1)", "NO"),
    ("options", "json", "NO"),
]


def reader_query(cluster: VitessCluster, shard: str, sql: str) -> list[tuple[object, ...]]:
    """A query on a primary tablet's mysqld, as the manifest's reader account."""
    keyspace = spec.load_keyspace(cluster.manifest_path)
    endpoint = keyspace.spec.shard(shard)
    creds = spec.read_credentials(cluster.secrets_dir, endpoint.credentials_secret)
    conn = pymysql.connect(
        host=endpoint.mysql.host,
        port=endpoint.mysql.port,
        user=creds.username,
        password=creds.password,
    )
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def test_the_pinned_vitess_is_the_one_built() -> None:
    go_mod = (Path(__file__).parents[2] / "tools" / "vitess" / "go.mod").read_text()
    assert re.search(rf"^\s*vitess\.io/vitess {runtime.VITESS_VERSION}\b", go_mod, re.M)
    out = subprocess.run(
        [str(runtime.vitess_bin_dir() / "vtgate"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Version: 24.0.4" in out.stdout + out.stderr


def test_manifest_names_each_primary_mysqld(vitess_cluster: VitessCluster) -> None:
    keyspace = spec.load_keyspace(vitess_cluster.manifest_path)
    assert keyspace.spec.serving_shards == ["-80", "80-"]
    assert {s.name: s.mysql.port for s in keyspace.spec.shards} == {
        t.shard: t.mysql_port for t in vitess_cluster.tablets()
    }
    assert {s.flavor for s in keyspace.spec.shards} == {"mysql"}
    for shard in keyspace.spec.serving_shards:
        ((uuid,),) = reader_query(vitess_cluster, shard, "SELECT @@server_uuid")
        assert re.fullmatch(r"[0-9a-f-]{36}", str(uuid))


def test_tablets_log_full_row_images_with_gtids(vitess_cluster: VitessCluster) -> None:
    wanted = {
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
        "gtid_mode": "ON",
        "enforce_gtid_consistency": "ON",
        "binlog_transaction_compression": "OFF",
    }
    names = ", ".join(f"'{n}'" for n in wanted)
    for shard in ("-80", "80-"):
        rows = reader_query(
            vitess_cluster, shard, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"
        )
        assert dict(rows) == wanted  # type: ignore[arg-type]


def test_reader_account_has_exactly_the_replication_grants(
    vitess_cluster: VitessCluster,
) -> None:
    (grant,) = reader_query(vitess_cluster, "-80", "SHOW GRANTS")
    assert str(grant[0]).startswith(
        "GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `commerce_reader`@"
    )
    with pytest.raises(pymysql.err.OperationalError) as denied:
        reader_query(vitess_cluster, "-80", "CREATE DATABASE not_allowed")
    assert denied.value.args[0] in (1044, 1227)


def test_vreplication_table_of_vitess_24(vitess_cluster: VitessCluster) -> None:
    rows = reader_query(
        vitess_cluster,
        "-80",
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = '_vt' AND TABLE_NAME = 'vreplication' ORDER BY ORDINAL_POSITION",
    )
    assert [tuple(r) for r in rows] == VREPLICATION_COLUMNS


def test_processes_run_unprivileged_on_loopback(vitess_cluster: VitessCluster) -> None:
    env = vitess_cluster.env()
    pids = [vitess_cluster.etcd.pid, vitess_cluster.vtctld.pid, vitess_cluster.vtgate.pid]
    for tablet in vitess_cluster.tablets():
        pids += [tablet.pid, tablet.mysqld_pid(env)]
    assert None not in pids and len(pids) == 3 + 2 * len(vitess_cluster.tablets())
    for pid in pids:
        process = psutil.Process(pid)
        assert process.uids().real == env.user.uid != 0
        listening = [c for c in process.net_connections("inet") if c.status == "LISTEN"]
        assert listening, f"{process.name()} listens nowhere"
        assert {c.laddr.ip for c in listening} == {"127.0.0.1"}, process.name()


def test_vtgate_serves_the_keyspace_with_the_app_account(vitess_cluster: VitessCluster) -> None:
    app = credentials(vitess_cluster, "app")
    conn = pymysql.connect(
        host="127.0.0.1",
        port=vitess_cluster.vtgate.mysql_port,
        user=app.username,
        password=app.password,
        database=vitess_cluster.keyspace,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW VITESS_SHARDS")
            shards = {row[0] for row in cur.fetchall()}
    finally:
        conn.close()
    assert {"commerce/-80", "commerce/80-"} <= shards


def test_a_vttablet_whose_port_was_taken_starts_again_on_new_ports(
    vitess_cluster: VitessCluster,
) -> None:
    """Another process listens on a stopped tablet's gRPC port: `up` starts its vttablet on new
    ports, records them, and vtgate reaches the shard through the tablet record's new port."""
    cluster, env = vitess_cluster, vitess_cluster.env()
    tablet = cluster.tablet("-80")
    taken = tablet.grpc_port
    with cluster.locked():
        assert tablet.stop_vttablet(env)
        cluster.save()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        cluster.up()
    moved = VitessCluster(cluster.dir).tablet("-80")
    assert moved.grpc_port != taken and moved.pid == cluster.tablet("-80").pid is not None
    assert "address already in use" in tablet.vttablet_log(env).read_text()
    record = cluster.vtctl().json("GetTablet", tablet.alias(env.cell))
    assert record["port_map"]["grpc"] == moved.grpc_port
    assert record["port_map"]["vt"] == moved.http_port
    cluster.wait_vtgate_serving(timeout=60)
