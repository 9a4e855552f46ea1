"""Assertions over a development cluster's data shared by the tests (test helper)."""

from __future__ import annotations

from typing import Any

import pymysql.cursors

from updatestream.core.vschema import VSchema
from updatestream.devcluster import schema
from updatestream.devcluster.cluster import DevCluster
from updatestream.devcluster.ledger import RowKey, table_state


def shard_rows(cluster: DevCluster, shard: str) -> list[tuple[str, dict[str, Any]]]:
    """Every row of the sample tables on one shard, as (table, row dict)."""
    found: list[tuple[str, dict[str, Any]]] = []
    with (
        cluster.connect(shard, "admin", schema.DATABASE) as conn,
        conn.cursor(pymysql.cursors.DictCursor) as cur,
    ):
        for table in schema.COLUMNS:
            cur.execute(f"SELECT * FROM `{table}`")
            found += [(table, row) for row in cur.fetchall()]
    return found


def shard_state(cluster: DevCluster, shard: str) -> dict[RowKey, str]:
    return table_state(shard_rows(cluster, shard))


def assert_rows_on_their_shard(cluster: DevCluster, shards: list[str]) -> None:
    """Every row sits on the shard its primary vindex maps it to."""
    vschema = VSchema.from_dict(cluster.keyspace().spec.vschema)
    from updatestream.core.keyrange import KeyRange

    for shard in shards:
        key_range = KeyRange.parse(shard)
        for table, row in shard_rows(cluster, shard):
            ksid = vschema.keyspace_id_for(table, row)
            assert ksid is not None and key_range.contains(ksid), (shard, table, row)
