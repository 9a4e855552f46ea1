"""Change-event rows as Arrow record batches: what every partition of the source hands Spark.

The binlog library produces rows as tuples in `ChangeEvent` field order without the last field,
the dedup verdict; `record_batches` groups them into record batches of the source's schema with
the verdict of each row added.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from updatestream.binlog.events import SPARK_SCHEMA_DDL, ChangeEvent
from updatestream.binlog.row_converter import EventRow

ALL_FIELDS = tuple(ChangeEvent.__dataclass_fields__)
FIELDS = ALL_FIELDS[:-1]  # what a reader's row tuples hold; the dedup verdict is added last
assert ALL_FIELDS[-1] == "dedup"
_ARROW_TYPES = {"STRING": pa.string(), "BIGINT": pa.int64(), "INT": pa.int32()}
ARROW_SCHEMA = pa.schema(
    [
        pa.field(name, _ARROW_TYPES[kind])
        for name, kind in (part.strip().split(" ") for part in SPARK_SCHEMA_DDL.split(","))
    ]
)
_MAX_BATCH_BYTES = 8 * 1024 * 1024
_BEFORE, _AFTER = FIELDS.index("before"), FIELDS.index("after")

Classifier = Callable[[EventRow], str | None]


def _batch(rows: list[tuple[Any, ...]], classify: Classifier | None = None) -> pa.RecordBatch:
    # Lists, not tuples: pyarrow converts a tuple of strings ~300 times slower.
    columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in FIELDS]
    columns.append([classify(row) for row in rows] if classify else [None] * len(rows))
    return pa.RecordBatch.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(columns, ARROW_SCHEMA, strict=True)],
        schema=ARROW_SCHEMA,
    )


def record_batches(
    rows: Iterator[EventRow], max_rows: int, classify: Classifier | None = None
) -> Iterator[pa.RecordBatch]:
    """Group event rows into Arrow record batches of at most `max_rows` rows (and ~8 MB),
    with the dedup verdict of each row from `classify` (none without it)."""
    batch: list[EventRow] = []
    size = 0
    for row in rows:
        batch.append(row)
        size += len(row[_AFTER] or "") + len(row[_BEFORE] or "") + 256
        if len(batch) >= max_rows or size >= _MAX_BATCH_BYTES:
            yield _batch(batch, classify)
            batch, size = [], 0
    if batch:
        yield _batch(batch, classify)
