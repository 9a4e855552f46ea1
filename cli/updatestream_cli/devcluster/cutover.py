"""The write cut-over of a reshard, on the servers and the manifest.

Freeze the sources (`read_only=ON`; on MySQL also `super_read_only=ON`, which holds back
administrative writers too) and read their final positions (`@@gtid_binlog_pos` on MariaDB,
`@@GLOBAL.gtid_executed` on MySQL; both settings wait for commits in progress, so nothing
commits after the position is read); once every destination has
applied those, rewrite the manifest's serving shards and history in one atomic write; then mark
the destinations' `_vt.vreplication` rows stopped. Each step is idempotent, so a rerun after a
crash repeats what it has to.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from updatestream.core.keyrange import KeyRange
from updatestream_cli.devcluster.cluster import DevCluster


def freeze_sources(cluster: DevCluster, sources: Sequence[str]) -> dict[str, str]:
    """Set the sources read-only; their GTID positions after the last write, by shard."""
    finals: dict[str, str] = {}
    mysql = cluster.flavor == "mysql"
    for source in sources:
        with cluster.connect(source, "admin") as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL read_only = ON")
            if mysql:
                cur.execute("SET GLOBAL super_read_only = ON")
            cur.execute(f"SELECT @@GLOBAL.{'gtid_executed' if mysql else 'gtid_binlog_pos'}")
            row = cur.fetchone()
            finals[source] = str(row[0] if row else "").replace("\n", "")
    return finals


def switch_serving(
    cluster: DevCluster, sources: Sequence[str], targets: Sequence[str]
) -> tuple[list[str], float] | None:
    """Serve the targets instead of the sources: the new serving shards and the time of the
    switch, or None when the manifest serves the targets already (switched before a crash)."""
    with cluster.locked():
        keyspace = cluster.keyspace()
        if set(targets) <= set(keyspace.spec.serving_shards):
            return None
        kept = [n for n in keyspace.spec.serving_shards if n not in sources]
        serving = [r.name for r in sorted(KeyRange.parse(n) for n in [*kept, *targets])]
        history = [e.model_dump() for e in keyspace.spec.shard_map_history]
        at = max(time.time(), history[-1]["at"] if history else 0.0)
        history.append({"at": at, "shards": serving})
        cluster.write_manifest(serving=serving, history=history)
        return serving, at


def mark_stopped(cluster: DevCluster, targets: Sequence[str], workflow: str) -> None:
    """Mark the vreplication rows stopped, without a binlog event (not a data change)."""
    for target in targets:
        with cluster.connect(target, "admin") as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(
                "UPDATE `_vt`.`vreplication` SET state = 'Stopped', time_updated = %s "
                "WHERE workflow = %s",
                (int(time.time()), workflow),
            )
