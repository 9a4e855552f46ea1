"""How filtered replication marks the transactions it copies, as real Vitess writes it.

Vitess's vplayer applies the copied rows of one or more source transactions and ends the
destination transaction with `UPDATE _vt.vreplication SET pos=..., time_updated=...,
transaction_timestamp=... WHERE id=<stream>` before it commits, so the marker is the LAST
statement. Its images say:

* `pos` (after image): the source's whole GTID position after the last copied transaction,
  encoded as Vitess encodes positions (`MySQL56/<uuid>:1-42`, `MariaDB/0-1-42`), stored either
  as text or compressed with MySQL's COMPRESS();
* `pos` (before image): the position before the first copied transaction. When several source
  commits were fetched together the vplayer groups them into one destination transaction: the
  source transactions it copies are exactly those in the after position and not in the before;
* `transaction_timestamp`: the source commit time (seconds) of the last copied transaction (the
  events carry the destination's own time; there is no `SET TIMESTAMP`);
* `source`: the workflow's `BinlogSource`, protobuf text naming the source keyspace and shard
  (`keyspace:"commerce" shard:"-80" filter:{...}`);
* `workflow`: its name; after `SwitchTraffic` the reverse workflow (`<name>_reverse`) copies the
  new shards' transactions back into the old shards with the same kind of marker.

The development cluster's filtered replication writes the same marker (`encode_position`,
`binlog_source`), so one reader serves both. `SwitchTraffic` also writes a journal into each
source shard (`_vt.resharding_journal`), naming where every target shard stood at the switch
(`journal_positions`).
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import (
    Flavor,
    GTIDPosition,
    MariaDBPosition,
    MySQLGTIDSet,
    parse_position,
)
from updatestream.core.keyrange import KeyRange

VT_SCHEMA = "_vt"
VREPLICATION_TABLE = "vreplication"
JOURNAL_TABLE = "resharding_journal"
REVERSE_SUFFIX = "_reverse"  # Vitess names a workflow's reverse workflow so

_PREFIXES = {"MySQL56": Flavor.MYSQL, "MariaDB": Flavor.MARIADB}


def _field(name: str) -> re.Pattern[str]:
    """A top-level `name:"value"` of protobuf text (the value's escapes kept)."""
    return re.compile(r"(?:^|[\s{])" + re.escape(name) + r':\s*"((?:[^"\\]|\\.)*)"')


_KEYSPACE, _SHARD = _field("keyspace"), _field("shard")


class MarkerError(UpdateStreamError):
    """A `_vt.vreplication` row or journal that cannot be read as what Vitess writes."""


def column_text(value: Any) -> str:
    """A `_vt` column's value as text (bytes decoded, a COMPRESS()ed value uncompressed)."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        return _uncompress(raw) if _looks_compressed(raw) else raw.decode("utf-8")
    return "" if value is None else str(value)


def _looks_compressed(raw: bytes) -> bool:
    # MySQL COMPRESS(): a 4-byte little-endian length, then a zlib stream (0x78 ...)
    return len(raw) > 5 and raw[4] == 0x78 and not raw[:1].isalpha()


def _uncompress(raw: bytes) -> str:
    (length,) = struct.unpack("<I", raw[:4])
    try:
        text = zlib.decompress(raw[4:]).decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as exc:
        raise MarkerError(
            f"a compressed vreplication position does not decompress: {exc}"
        ) from None
    if len(text.encode()) != length:
        raise MarkerError("a compressed vreplication position has the wrong length")
    return text


def decode_position(value: Any, flavor: Flavor | None = None) -> GTIDPosition:
    """A Vitess-encoded position (`MySQL56/...`, `MariaDB/...`, possibly compressed)."""
    text = column_text(value).strip()
    prefix, slash, rest = text.partition("/")
    if not slash:
        if flavor is None:
            raise MarkerError(f"position {text!r} names no flavor (MySQL56/ or MariaDB/)")
        return parse_position(text, flavor)
    found = _PREFIXES.get(prefix)
    if found is None:
        raise MarkerError(
            f"position {text!r} is of flavor {prefix}; a change stream needs GTID positions "
            "(MySQL56 or MariaDB), not file positions"
        )
    return parse_position(rest, found)


def encode_position(position: GTIDPosition) -> str:
    """A position as Vitess encodes it in `_vt.vreplication.pos`."""
    if isinstance(position, MySQLGTIDSet):
        return f"MySQL56/{position}"
    assert isinstance(position, MariaDBPosition)
    return f"MariaDB/{position}"


def binlog_source(keyspace: str, shard: str, key_range: str) -> str:
    """A workflow's `source` as Vitess writes it for a Reshard stream into `key_range`."""
    return (
        f'keyspace:"{keyspace}" shard:"{shard}" '
        f'filter:{{rules:{{match:"/.*" filter:"{key_range}"}}}}'
    )


def source_fields(text: str) -> tuple[str, str]:
    """(keyspace, shard) of a workflow's `source` (BinlogSource protobuf text)."""
    found = []
    for name, pattern in (("keyspace", _KEYSPACE), ("shard", _SHARD)):
        match = pattern.search(text)
        if match is None:
            raise MarkerError(f"workflow source {text!r} names no {name}")
        found.append(match.group(1))
    return found[0], found[1]


@dataclass(frozen=True, slots=True)
class CopyMarker:
    """What the marker that ends a copied destination transaction says (module docstring)."""

    workflow: str
    source_keyspace: str
    source_shard: str
    position: GTIDPosition
    covered_from: GTIDPosition | None
    timestamp: int

    @property
    def reverse(self) -> bool:
        return self.workflow.endswith(REVERSE_SUFFIX)


def read_marker(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any],
    flavor: Flavor,
    *,
    fallback_timestamp: int,
) -> CopyMarker | None:
    """The copy marker of one `_vt.vreplication` row update; None when it moves no position
    (a heartbeat, a state change)."""
    if "pos" not in after:
        raise MarkerError(
            "a _vt.vreplication row image has no pos column; the shard must log full row "
            "images with metadata (binlog_row_image=FULL, binlog_row_metadata=FULL)"
        )
    position = decode_position(after["pos"], flavor)
    covered = None
    if before is not None and before.get("pos"):
        covered = decode_position(before["pos"], flavor)
        if covered == position:
            return None
    keyspace, shard = source_fields(column_text(after.get("source")))
    stamp = after.get("transaction_timestamp")
    return CopyMarker(
        workflow=column_text(after.get("workflow")),
        source_keyspace=keyspace,
        source_shard=KeyRange.parse(shard).name,
        position=position,
        covered_from=covered,
        timestamp=int(stamp) if stamp else fallback_timestamp,
    )


_SHARD_GTID = re.compile(
    r'shard_gtids:\s*\{[^{}]*?keyspace:\s*"([^"]*)"[^{}]*?shard:\s*"([^"]*)"[^{}]*?'
    r'gtid:\s*"((?:[^"\\]|\\.)*)"[^{}]*\}'
)


def journal_positions(value: Any, flavor: Flavor) -> dict[str, GTIDPosition]:
    """Target shard -> its position at the switch, from a `_vt.resharding_journal` value."""
    text = column_text(value)
    found = {
        KeyRange.parse(shard).name: decode_position(gtid, flavor)
        for _, shard, gtid in _SHARD_GTID.findall(text)
    }
    if not found:
        raise MarkerError(f"resharding journal {text[:200]!r} names no shard positions")
    return found
