"""Compare a traffic ledger with the rows on the serving shards, and check row placement."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql.cursors

from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.ledger import RowKey, final_state, read_ledger, table_state


def shard_rows(cluster: DevCluster, shard: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every row of the sample tables on one shard, as (table, row dict), streamed."""
    with cluster.connect(shard, "admin", sample_schema.DATABASE) as conn:
        for table in sample_schema.COLUMNS:
            with conn.cursor(pymysql.cursors.SSDictCursor) as cur:
                cur.execute(f"SELECT * FROM `{table}`")
                for row in cur:
                    yield table, row


def shard_state(cluster: DevCluster, shard: str) -> dict[RowKey, str]:
    """Row digest per (table, primary key) on one shard, comparable with the ledger."""
    return table_state(shard_rows(cluster, shard))


def misplaced_rows(cluster: DevCluster, shards: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """Rows whose keyspace id (primary vindex) falls outside the shard holding them."""
    vschema = VSchema.from_dict(cluster.keyspace().spec.vschema)
    wrong = []
    for shard in shards:
        key_range = KeyRange.parse(shard)
        for table, row in shard_rows(cluster, shard):
            ksid = vschema.keyspace_id_for(table, row)
            if ksid is None or not key_range.contains(ksid):
                wrong.append((shard, table, row))
    return wrong


@dataclass
class LedgerCheck:
    ledger_rows: int = 0
    database_rows: int = 0
    missing: list[RowKey] = field(default_factory=list)  # in the ledger, not in the database
    unexpected: list[RowKey] = field(default_factory=list)  # in the database, not in the ledger
    different: list[RowKey] = field(default_factory=list)
    duplicated: list[RowKey] = field(default_factory=list)  # on more than one serving shard
    misplaced: int = 0

    @property
    def ok(self) -> bool:
        return not (
            self.missing or self.unexpected or self.different or self.duplicated or self.misplaced
        )


def check_ledger(cluster: DevCluster, ledger: Path) -> LedgerCheck:
    """The ledger's final state against the serving shards' rows, row by row."""
    expected = final_state(read_ledger(ledger))
    serving = list(cluster.keyspace().spec.serving_shards)
    actual: dict[RowKey, str] = {}
    result = LedgerCheck(ledger_rows=len(expected))
    for shard in serving:
        for key, digest in shard_state(cluster, shard).items():
            if key in actual:
                result.duplicated.append(key)
            actual[key] = digest
    result.database_rows = len(actual)
    result.missing = sorted(k for k in expected if k not in actual)
    result.unexpected = sorted(k for k in actual if k not in expected)
    result.different = sorted(k for k in expected if k in actual and actual[k] != expected[k])
    result.misplaced = len(misplaced_rows(cluster, serving))
    return result
