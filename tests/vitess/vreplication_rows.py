"""Reading real VReplication's bookkeeping out of binlog transactions (test helpers)."""

from __future__ import annotations

import re
from typing import Any

from updatestream_cli.devcluster import sample_schema

from tests.vitess.binlog_transactions import BinlogRow, BinlogTransaction
from updatestream.core.gtid.mysql import MySQLGTIDSet
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema

VSCHEMA = VSchema.from_dict(sample_schema.VSCHEMA, keyspace="commerce")
POS = re.compile(rb"MySQL56/([0-9a-f-]{36}):1-(\d+)")


def is_vreplication(row: BinlogRow) -> bool:
    return row.schema == "_vt" and row.table == "vreplication"


def data_rows(tx: BinlogTransaction) -> list[BinlogRow]:
    return [r for r in tx.rows if r.schema == "commerce"]


def marker(tx: BinlogTransaction) -> BinlogRow | None:
    """The transaction's last row when it is an update of `_vt.vreplication`."""
    if tx.rows and is_vreplication(tx.rows[-1]) and tx.rows[-1].op == "update":
        return tx.rows[-1]
    return None


def marker_after(tx: BinlogTransaction) -> dict[str, Any]:
    """The after image of the transaction's `_vt.vreplication` update (which must be last)."""
    row = marker(tx)
    assert row is not None and row.after is not None, tx.tables()
    return row.after


def gtids(pos: Any) -> set[tuple[str, int]]:
    """Every GTID of a `pos` value (`MySQL56/<uuid>:<intervals>[,...]`), one by one."""
    text = pos.decode() if isinstance(pos, bytes) else str(pos)
    text = text.removeprefix("MySQL56/")
    if not text:
        return set()
    parsed = MySQLGTIDSet.parse(text)
    return {
        (uuid, gno)
        for uuid, intervals in parsed.entries.items()
        for start, end in intervals
        for gno in range(start, end + 1)
    }


def covered(tx: BinlogTransaction) -> set[tuple[str, int]]:
    """The source GTIDs a copied transaction applied: after-image `pos` minus before-image."""
    row = marker(tx)
    assert row is not None and row.before is not None and row.after is not None
    return gtids(row.after["pos"]) - gtids(row.before["pos"])


def in_range(row: BinlogRow, shard: str) -> bool:
    image = row.after if row.after is not None else row.before
    assert image is not None
    ksid = VSCHEMA.keyspace_id_for(row.table, image)
    return ksid is not None and KeyRange.parse(shard).contains(ksid)


def signature(row: BinlogRow) -> tuple[str, str, Any, Any]:
    """What a copy must reproduce of a row change: table, operation, both images."""
    return (row.table, row.op, _plain(row.before), _plain(row.after))


def _plain(image: dict[str, Any] | None) -> Any:
    return None if image is None else tuple(sorted((k, repr(v)) for k, v in image.items()))


def by_gtid(transactions: list[BinlogTransaction]) -> dict[tuple[str, int], BinlogTransaction]:
    out: dict[tuple[str, int], BinlogTransaction] = {}
    for tx in transactions:
        uuid, _, gno = tx.gtid.rpartition(":")
        out[(uuid, int(gno))] = tx
    return out
