"""Filtered replication's copy marker as real Vitess writes it: positions, sources, journals."""

from __future__ import annotations

import struct
import zlib

import pytest

from updatestream.binlog.vreplication import (
    MarkerError,
    binlog_source,
    decode_position,
    encode_position,
    journal_positions,
    read_marker,
    source_fields,
)
from updatestream.core.gtid import Flavor, parse_position

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def compressed(text: str) -> bytes:
    """What MySQL's COMPRESS() stores (Vitess's --vreplication-store-compressed-gtid)."""
    raw = text.encode()
    return struct.pack("<I", len(raw)) + zlib.compress(raw)


@pytest.mark.parametrize(
    ("stored", "flavor", "expected"),
    [
        (f"MySQL56/{UUID}:1-42", Flavor.MYSQL, f"{UUID}:1-42"),
        (f"MySQL56/{UUID}:1-42".encode(), Flavor.MYSQL, f"{UUID}:1-42"),
        (compressed(f"MySQL56/{UUID}:1-5:7-9"), Flavor.MYSQL, f"{UUID}:1-5:7-9"),
        ("MariaDB/0-1-42,1-2-7", Flavor.MARIADB, "0-1-42,1-2-7"),
        ("MariaDB/", Flavor.MARIADB, ""),
    ],
)
def test_positions_decode_as_vitess_encodes_them(
    stored: object, flavor: Flavor, expected: str
) -> None:
    position = decode_position(stored, flavor)
    assert str(position) == expected
    assert decode_position(encode_position(position), flavor) == position


def test_a_file_position_is_refused_by_name() -> None:
    with pytest.raises(MarkerError, match="FilePos; a change stream needs GTID positions"):
        decode_position("FilePos/mysql-bin.000003:1234", Flavor.MYSQL)


def test_the_source_names_keyspace_and_shard_whatever_the_spacing() -> None:
    assert source_fields(binlog_source("commerce", "-80", "-40")) == ("commerce", "-80")
    # Go's protobuf text puts one or two spaces between fields, at random
    text = 'keyspace:"ks"  shard:"80-"  filter:{rules:{match:"/.*"  filter:"80-c0"}}'
    assert source_fields(text) == ("ks", "80-")
    with pytest.raises(MarkerError, match="names no shard"):
        source_fields('keyspace:"ks"')


def test_a_marker_says_which_source_transactions_a_group_copies() -> None:
    source = binlog_source("commerce", "-80", "-40")
    before = {"pos": f"MySQL56/{UUID}:1-38", "source": source, "workflow": "split"}
    after = {**before, "pos": f"MySQL56/{UUID}:1-41", "transaction_timestamp": 1_700_000_123}
    marker = read_marker(before, after, Flavor.MYSQL, fallback_timestamp=5)
    assert marker is not None and not marker.reverse
    assert (marker.source_shard, marker.timestamp) == ("-80", 1_700_000_123)
    assert marker.position == parse_position(f"{UUID}:1-41")
    assert marker.covered_from == parse_position(f"{UUID}:1-38")
    # a heartbeat or a state change moves no position: no marker
    assert (
        read_marker(before, {**before, "time_updated": 9}, Flavor.MYSQL, fallback_timestamp=5)
        is None
    )
    reverse = read_marker(
        before, {**after, "workflow": "split_reverse"}, Flavor.MYSQL, fallback_timestamp=5
    )
    assert reverse is not None and reverse.reverse


def test_a_row_without_its_position_column_says_what_to_set() -> None:
    with pytest.raises(MarkerError, match="binlog_row_image=FULL"):
        read_marker(None, {"workflow": "w"}, Flavor.MYSQL, fallback_timestamp=0)


def test_the_journal_names_every_target_position() -> None:
    journal = (
        'id:7 migration_type:SHARDS tables:"users" local_position:"MySQL56/x" '
        f'shard_gtids:{{keyspace:"commerce" shard:"-40" gtid:"MySQL56/{UUID}:1-9"}} '
        f'shard_gtids:{{keyspace:"commerce"  shard:"40-80" gtid:"MySQL56/{UUID}:1-12"}} '
        'participants:{keyspace:"commerce" shard:"-80"}'
    )
    found = journal_positions(journal, Flavor.MYSQL)
    assert found == {
        "-40": parse_position(f"{UUID}:1-9"),
        "40-80": parse_position(f"{UUID}:1-12"),
    }
    with pytest.raises(MarkerError, match="names no shard positions"):
        journal_positions("id:7", Flavor.MYSQL)
