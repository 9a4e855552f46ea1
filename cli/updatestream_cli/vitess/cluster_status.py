"""What a local Vitess cluster runs: processes, ports, tablets, positions, workflows."""

from __future__ import annotations

from typing import Any

import pymysql

from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.errors import VtctldCommandError
from updatestream_cli.vitess.tablets import Tablet


def cluster_status(cluster: VitessCluster) -> dict[str, Any]:
    env = cluster.env()
    vtgate = cluster.vtgate
    status: dict[str, Any] = {
        "keyspace": cluster.keyspace,
        "dir": str(cluster.dir),
        "manifest": str(cluster.manifest_path),
        "serving_shards": cluster.serving_shards_recorded(),
        "etcd": {"address": cluster.etcd.address, "running": cluster.etcd.is_running()},
        "vtctld": {"address": cluster.vtctld.address, "running": cluster.vtctld.is_running(env)},
        "vtgate": {
            "mysql": f"127.0.0.1:{vtgate.mysql_port}",
            "grpc": vtgate.grpc_address,
            "running": vtgate.is_running(env),
        },
        "tablets": [_tablet_status(cluster, t) for t in cluster.tablets()],
    }
    if status["vtctld"]["running"]:
        try:
            status["workflows"] = cluster.vtctl().json(
                "Workflow", "--keyspace", cluster.keyspace, "list"
            )
        except VtctldCommandError as exc:
            status["workflows_error"] = str(exc)
    return status


def _tablet_status(cluster: VitessCluster, tablet: Tablet) -> dict[str, Any]:
    env = cluster.env()
    entry: dict[str, Any] = {
        "alias": tablet.alias(env.cell),
        "shard": tablet.shard,
        "mysql": f"127.0.0.1:{tablet.mysql_port}",
        "vttablet_running": tablet.vttablet_running(env),
        "mysqld_running": tablet.mysqld_running(env),
    }
    if entry["mysqld_running"]:
        try:
            with tablet.dba_connect(env) as conn, conn.cursor() as cur:
                cur.execute("SELECT @@global.server_uuid, @@global.gtid_executed")
                uuid, executed = cur.fetchone()
                cur.execute("SHOW BINARY LOGS")
                files = [{"name": row[0], "size": int(row[1])} for row in cur.fetchall()]
            entry.update(server_uuid=uuid, gtid_executed=executed, binlog_files=files)
        except pymysql.err.MySQLError as exc:
            entry["error"] = f"cannot query: {exc.args[-1] if exc.args else exc}"
    return entry
