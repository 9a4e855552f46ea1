"""The mirror: a MySQL/MariaDB copy of the source tables that only ever moves forward.

* :mod:`updatestream.mirror.order`: the order of two changes to one row, in Python and in SQL;
* :mod:`updatestream.mirror.changes`: change events as per-key row states, collapsed per batch;
* :mod:`updatestream.mirror.mirror_tables`: mirror tables from the source's columns, created,
  checked, extended; the ``<table>_live`` view without tombstones;
* :mod:`updatestream.mirror.mirror_writer`: apply-if-newer in bulk, tombstones and their purge.
"""

from updatestream.mirror.changes import Change, Collapsed, changes_of, collapse
from updatestream.mirror.mirror_tables import (
    LIVE_SUFFIX,
    Column,
    MirrorSchemaError,
    SourceSchemas,
    TableSchema,
)
from updatestream.mirror.mirror_writer import ApplyResult, MirrorWriter
from updatestream.mirror.order import Order, Verdict, classify, order_of

__all__ = [
    "LIVE_SUFFIX",
    "ApplyResult",
    "Change",
    "Collapsed",
    "Column",
    "MirrorSchemaError",
    "MirrorWriter",
    "Order",
    "SourceSchemas",
    "TableSchema",
    "Verdict",
    "changes_of",
    "classify",
    "collapse",
    "order_of",
]
