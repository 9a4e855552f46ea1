"""The order of changes to one row in a mirror: which of two changes is newer.

A mirror row stores the order token of the change that wrote it, in sortable columns:

* ``_us_ts``: the origin timestamp (the source timestamp when the change came through filtered
  replication, so a change and its copy compare equal);
* ``_us_shard``: the origin's lineage: the origin shard (the source shard of a copy, else the
  shard read from) and the servers of its GTIDs (:func:`lineage`), since a merge can give a
  shard's name to a new server whose sequence numbers start again;
* ``_us_seq``: the origin shard's GTID ordinal after the transaction: the sum of the sequence
  numbers over the position's domains (MariaDB) or the number of transactions in the GTID set
  (MySQL). Along one shard's binlog it grows with every transaction;
* ``_us_idx``: the change's index among the changes to this key in its transaction
  (``SNAPSHOT_INDEX`` for a snapshot or re-read row: after all of them).

The rule (:func:`classify`), for an incoming change ``new`` against the stored ``old``:

1. Same origin lineage (shard and GTID servers): (seq, idx) decides: NEWER, OLDER or EQUAL
   (EQUAL: the change the row holds already, replayed or copied). One shard's binlog is the
   truth about the order of its own changes; timestamps are not (a transaction's timestamp is
   when it began, so one that began earlier may commit a later change to the same row, and a
   snapshot row's timestamp is when its batch was planned).
2. Different origin lineages (a key that moved in a reshard, a shard name on a new server):
   ``new.ts > old.ts``: NEWER; ``new.ts < old.ts``: OLDER; the same second: their order is
   unknown and the change that arrives later wins (UNKNOWN, applied and counted). The stream
   delivers one key's changes across shards in hop order (sources before destinations), so
   arrival order is the best evidence there is; a replayed batch arrives as it did the first
   time.

:func:`guard_sql` is the same rule as SQL over the incoming row and the stored columns, for
``INSERT ... ON DUPLICATE KEY UPDATE``. The incoming row is ``VALUES(col)`` on MariaDB; MySQL
8.0.20 deprecates that function (a warning per statement, and it may go), so on MySQL the
statement names the row instead (``INSERT ... VALUES (...) AS _us_new``, 8.0.19 and later) and
the rule reads ``_us_new.col``.
"""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

from updatestream.binlog.events import SNAPSHOT_OPS, ChangeEvent
from updatestream.core.gtid import GTIDParseError, MySQLGTIDSet, ordinal, parse_position

TOKEN_COLUMNS = ("_us_ts", "_us_shard", "_us_seq", "_us_idx")
# A snapshot row is the key's state after every change of the transaction at its position:
# at an equal sequence it comes after them (a repair overwrites a row the mirror holds at that
# very position), and every later change has a larger sequence.
SNAPSHOT_INDEX = 2**31 - 1
_MARIADB = re.compile(r"^\d+-\d+-\d+(,\d+-\d+-\d+)*$")


class Verdict(enum.Enum):
    NEWER = "newer"
    OLDER = "older"
    EQUAL = "equal"
    UNKNOWN = "unknown"  # same second, different origin shards: applied (arrival order)

    @property
    def applies(self) -> bool:
        return self in (Verdict.NEWER, Verdict.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Order:
    ts: int
    shard: str
    seq: int
    idx: int

    def as_row(self) -> tuple[int, str, int, int]:
        return (self.ts, self.shard, self.seq, self.idx)


@lru_cache(maxsize=1024)
def lineage(shard: str, position_text: str) -> str:
    """The origin as the order compares it: the shard's name with the servers its GTIDs come
    from (MariaDB domain-server pairs, MySQL server UUIDs). A merge can bring back a shard name
    on a new server whose sequence numbers start again; only one lineage's ordinals compare."""
    servers: list[str] = []
    if _MARIADB.match(position_text):
        servers = sorted(gtid.rpartition("-")[0] for gtid in position_text.split(","))
    elif position_text:
        try:
            position = parse_position(position_text)
        except GTIDParseError:
            position = None
        if isinstance(position, MySQLGTIDSet):
            servers = sorted(str(uuid) for uuid in position.entries)
    text = f"{shard}/{','.join(servers)}"
    if len(text) > 64:  # the column's width: the name and a digest of the servers
        digest = hashlib.sha1(text.encode()).hexdigest()[:16]
        text = f"{shard[: 64 - 18]}/~{digest}"
    return text


def order_of(event: ChangeEvent) -> Order:
    """The order token of a change: its origin's timestamp, lineage and GTID ordinal."""
    if event.source_shard is not None and event.source_gtid is not None:
        ts = event.source_timestamp if event.source_timestamp is not None else event.timestamp
        origin = lineage(event.source_shard, event.source_gtid)
        return Order(ts, origin, ordinal(event.source_gtid), event.tx_index)
    origin = lineage(event.shard, event.gtid)
    index = SNAPSHOT_INDEX if event.op in SNAPSHOT_OPS else event.tx_index
    return Order(event.timestamp, origin, ordinal(event.gtid), index)


def classify(new: Order, old: Order) -> Verdict:
    """Is the change ``new`` newer than the stored ``old`` (see the module for the rule)?"""
    if new.shard != old.shard:
        if new.ts == old.ts:
            return Verdict.UNKNOWN
        return Verdict.NEWER if new.ts > old.ts else Verdict.OLDER
    mine, theirs = (new.seq, new.idx), (old.seq, old.idx)
    if mine == theirs:
        return Verdict.EQUAL
    return Verdict.NEWER if mine > theirs else Verdict.OLDER


def ignore_cause(verdict: Verdict, new: Order) -> str:
    """Why a change that does not apply is ignored: its verdict, or ``unchanged`` for a snapshot
    or re-read row EQUAL to the stored row (a read at the position the row was read at before,
    such as a second re-read of a quiet table): the mirror holds that state; it is no change
    delivered twice."""
    if verdict is Verdict.EQUAL and new.idx == SNAPSHOT_INDEX:
        return "unchanged"
    return verdict.value


ROW_ALIAS = "_us_new"  # the incoming row's name on MySQL


def incoming(column: str, row_alias: str | None = None) -> str:
    """The incoming row's value of ``column``: ``VALUES(col)``, or ``alias.col`` on MySQL."""
    return f"`{row_alias}`.`{column}`" if row_alias else f"VALUES(`{column}`)"


def stored(column: str, table: str | None = None) -> str:
    """The stored row's value of ``column`` (qualified by its table beside a row alias, where a
    bare name would be ambiguous)."""
    return f"`{table}`.`{column}`" if table else f"`{column}`"


def guard_sql(row_alias: str | None = None, table: str | None = None) -> str:
    """The rule as an SQL condition: true when the incoming row is to be applied over the
    stored one. Valid only while the token columns still hold their stored values: assign them
    last (see :func:`update_assignments`). With ``row_alias`` (MySQL), ``table`` names the
    mirror table."""
    names = ("_us_shard", "_us_seq", "_us_idx", "_us_ts")
    shard, seq, idx, ts = (incoming(c, row_alias) for c in names)
    old_shard, old_seq, old_idx, old_ts = (stored(c, table) for c in names)
    return (
        f"(({shard} = {old_shard} AND ({seq} > {old_seq} OR "
        f"({seq} = {old_seq} AND {idx} > {old_idx}))) OR "
        f"({shard} <> {old_shard} AND {ts} >= {old_ts}))"
    )


def update_assignments(
    columns: list[str], row_alias: str | None = None, table: str | None = None
) -> str:
    """The ``ON DUPLICATE KEY UPDATE`` list: every column guarded by the rule.

    MySQL and MariaDB evaluate the assignments left to right and a later one sees the values
    assigned before it. So the data and provenance ``columns`` come first, then the token in
    the order ``_us_ts``, ``_us_idx``, ``_us_seq``, ``_us_shard``. Between rows of one shard
    the guard does not read the timestamp, and a new index leaves it as it was while the
    sequence number is the stored one (once both are the new ones it may turn false, but
    then only the shard, which is equal, is left). Between shards the guard reads only the
    timestamp, true again once it holds the new one, and the shard, assigned last.
    """
    guard = guard_sql(row_alias, table)
    ordered = [*columns, "_us_ts", "_us_idx", "_us_seq", "_us_shard"]
    return ", ".join(
        f"{stored(c, table)} = IF({guard}, {incoming(c, row_alias)}, {stored(c, table)})"
        for c in ordered
    )
