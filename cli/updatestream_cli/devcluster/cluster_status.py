"""What `devcluster status` reports: the serving shard map and, per shard, its server's state."""

from __future__ import annotations

from typing import Any

import pymysql

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import LocalServer


def _server_state(server: LocalServer) -> dict[str, Any]:
    """GTID position, binlog files and read_only of a running server; an error text instead
    when it cannot be queried."""
    try:
        return {
            "gtid_position": server.gtid_position(),
            "binlog_files": [{"name": n, "size": s} for n, s in server.binlog_files()],
            "read_only": server.variable("read_only") in ("1", "ON"),
        }
    except pymysql.err.MySQLError as exc:
        return {"error": f"cannot query: {exc.args[-1] if exc.args else exc}"}


def cluster_status(cluster: DevCluster) -> dict[str, Any]:
    """Serving shard map and, per shard, address, pid, GTID position and binlog files."""
    keyspace = cluster.keyspace()
    shards: list[dict[str, Any]] = []
    for name in cluster.shard_names():
        server = cluster.server(name)
        entry: dict[str, Any] = {
            "shard": name,
            "address": server.address,
            "serving": name in keyspace.spec.serving_shards,
            "running": server.is_running(),
            "pid": server.pid,
            "server_id": server.server_id,
            "domain_id": getattr(server, "domain_id", None),
        }
        if entry["running"]:
            entry.update(_server_state(server))
        shards.append(entry)
    return {
        "keyspace": keyspace.metadata.name,
        "flavor": cluster.flavor,
        "dir": str(cluster.dir),
        "manifest": str(cluster.manifest_path),
        "serving_shards": list(keyspace.spec.serving_shards),
        "shard_map_history": [e.model_dump() for e in keyspace.spec.shard_map_history],
        "shards": shards,
    }
