"""The comparison over hand-built records: clean, lost, duplicate, out of order, stale."""

from __future__ import annotations

from updatestream_cli.devcluster.ledger import LedgerEntry, LedgerOp
from updatestream_cli.verify.compare import (
    CachedEntry,
    Delivered,
    FinalRow,
    RowUpdate,
    compare_cache,
    compare_changes,
    compare_final,
    transaction_gtids,
)

from updatestream.core.gtid import MariaDBPosition
from updatestream.core.token import EventToken, SourceProvenance

PK1, PK2 = '{"id":1}', '{"id":2}'


def committed(
    order: int, pk: str, op: LedgerOp, digest: str | None, shard: str, gtid: str, at: float = 0.0
) -> LedgerEntry:
    """A ledger entry of table `users`, one transaction per entry."""
    return LedgerEntry(order, order, "users", pk, op, digest, shard, "00", gtid, at)


def ledger() -> list[LedgerEntry]:
    """users 1: insert a, update b (tx 1-1-2), users 2: insert c then delete (on 80-)."""
    return [
        committed(0, PK1, "insert", "a", "-80", "1-1-1", 100.2),
        committed(1, PK2, "insert", "c", "80-", "2-2-1", 100.4),
        committed(2, PK1, "update", "b", "-80", "1-1-2", 101.5),
        committed(3, PK2, "delete", None, "80-", "2-2-2", 102.0),
    ]


def delivered() -> list[Delivered]:
    return [
        Delivered(0, "users", PK1, "a", "-80", "1-1-1"),
        Delivered(1, "users", PK2, "c", "80-", "2-2-1"),
        Delivered(2, "users", PK1, "b", "-80", "1-1-2"),
        Delivered(3, "users", PK2, None, "80-", "2-2-2"),
    ]


def test_clean_change_stream() -> None:
    report = compare_changes(ledger(), delivered())
    assert report.to_json() == {
        "committed": 4,
        "delivered": 4,
        "lost": 0,
        "duplicates_delivered": 0,
        "duplicates_dropped": 0,
        "duplicates_dropped_by_cause": {},
        "out_of_order_keys": 0,
    }
    assert report.ok


def test_missing_version_is_lost() -> None:
    report = compare_changes(ledger(), [d for d in delivered() if d.seq != 2])
    assert (report.lost, report.duplicates_delivered) == (1, 0)
    assert report.examples["lost"] == ['users:{"id":1}']
    assert not report.ok


def test_second_version_of_one_change_is_a_duplicate() -> None:
    copy = Delivered(4, "users", PK1, "b", "-80", "1-1-2")
    report = compare_changes(ledger(), [*delivered(), copy])
    assert (report.lost, report.duplicates_delivered, report.delivered) == (0, 1, 5)
    assert not report.ok


def test_copy_with_provenance_on_another_shard_and_multi_domain_position() -> None:
    # the original's origin position holds two domains: its own GTID is one of them
    first = [Delivered(0, "users", PK1, "a", "-80", "1-1-1,7-7-40"), *delivered()[1:]]
    assert compare_changes(ledger(), first).ok
    # a copy whose origin is a destination shard (provenance lost) is caught by content
    copy = Delivered(4, "users", PK1, "b", "-40", "3-3-9")
    report = compare_changes(ledger(), [*delivered(), copy])
    assert report.duplicates_delivered == 1


def test_same_content_in_two_transactions_needs_both() -> None:
    changes = [
        committed(0, PK1, "insert", "a", "-80", "1-1-1"),
        committed(1, PK1, "update", "a", "-80", "1-1-2"),
    ]
    one = [Delivered(0, "users", PK1, "a", "-80", "1-1-1")]
    assert compare_changes(changes, one).lost == 1
    twice = [*one, Delivered(1, "users", PK1, "a", "-80", "1-1-1")]
    report = compare_changes(changes, twice)
    assert (report.lost, report.duplicates_delivered) == (1, 1)


def test_versions_out_of_commit_order() -> None:
    swapped = delivered()
    swapped[0], swapped[2] = swapped[2], swapped[0]
    report = compare_changes(ledger(), swapped)
    assert (report.lost, report.duplicates_delivered, report.out_of_order_keys) == (0, 0, 1)
    assert report.ok  # out of order is reported but is not a loss


def test_wrong_image_is_lost_and_unexpected() -> None:
    wrong = [*delivered()[:2], Delivered(2, "users", PK1, "zz", "-80", "1-1-2"), delivered()[3]]
    report = compare_changes(ledger(), wrong)
    assert (report.lost, report.unexpected) == (1, 1)


def test_transaction_gtids() -> None:
    assert transaction_gtids("1-1-5,2-2-9") == ["1-1-5", "2-2-9"]
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert transaction_gtids(f"{uuid}:1-5:7-9") == [f"{uuid}:9"]


# -- CDCv2 ------------------------------------------------------------------------------------


def updates() -> list[RowUpdate]:
    return [
        RowUpdate("users", PK1, "a", 100, 1),
        RowUpdate("users", PK2, "c", 100, 1),
        RowUpdate("users", PK1, "a", 101, -1),
        RowUpdate("users", PK1, "b", 101, 1),
        RowUpdate("users", PK2, "c", 102, -1),
    ]


def test_final_contents_clean() -> None:
    report = compare_final(ledger(), [FinalRow("users", PK1, "b", 1)], updates())
    assert (report.lost, report.duplicates_delivered, report.out_of_order_keys) == (0, 0, 0)
    assert report.delivered == 5
    assert report.ok


def test_final_contents_missing_row_or_missed_delete_is_lost() -> None:
    assert compare_final(ledger(), [], updates()).lost == 1
    kept = [FinalRow("users", PK1, "b", 1), FinalRow("users", PK2, "c", 1)]
    assert compare_final(ledger(), kept, updates()).lost == 1
    stale = [FinalRow("users", PK1, "a", 1)]
    assert compare_final(ledger(), stale, updates()).lost == 1


def test_final_contents_multiplicity_is_a_duplicate() -> None:
    report = compare_final(ledger(), [FinalRow("users", PK1, "b", 2)], updates())
    assert (report.lost, report.duplicates_delivered) == (0, 1)
    twice_retracted = [FinalRow("users", PK1, "b", 1), FinalRow("users", PK1, "a", -1)]
    report = compare_final(ledger(), twice_retracted, updates())
    assert report.duplicates_delivered == 1
    assert not report.ok


def test_cdcv2_images_in_time_order_against_commit_order() -> None:
    backwards = [
        RowUpdate("users", PK1, "b", 100, 1),
        RowUpdate("users", PK1, "a", 101, 1),
    ]
    report = compare_final(ledger(), [FinalRow("users", PK1, "b", 1)], backwards)
    assert report.out_of_order_keys == 1
    same_second = [RowUpdate("users", PK1, "b", 100, 1), RowUpdate("users", PK1, "a", 100, 1)]
    report = compare_final(ledger(), [FinalRow("users", PK1, "b", 1)], same_second)
    assert report.out_of_order_keys == 0


# -- memcached --------------------------------------------------------------------------------


def token(shard: str, position: str, ts: int, source: SourceProvenance | None = None) -> EventToken:
    return EventToken(ts, shard, MariaDBPosition.parse(position), source)


def test_cache_entries_fresh_absent_and_stale() -> None:
    database = {("users", PK1): "b"}
    fresh = {
        ("users", PK1): CachedEntry(token("-80", "1-1-2", 101), None),
        ("users", PK2): CachedEntry(token("80-", "2-2-5", 102), None),
    }
    report = compare_cache(ledger(), fresh, database)
    assert (report.stale_keys, report.delivered) == (0, 2)
    assert report.to_json()["stale_keys"] == 0
    assert compare_cache(ledger(), {}, database).stale_keys == 0  # absent entries are fine
    older = {("users", PK1): CachedEntry(token("-80", "1-1-1", 101), None)}
    report = compare_cache(ledger(), older, database)
    assert report.stale_keys == 1
    assert not report.ok


def test_cache_tokens_from_other_shards() -> None:
    copied = SourceProvenance("-80", MariaDBPosition.parse("1-1-2"), 101)
    entry = CachedEntry(token("-40", "3-3-4", 101, copied), None)
    assert compare_cache(ledger(), {("users", PK1): entry}).stale_keys == 0
    older_copy = SourceProvenance("-80", MariaDBPosition.parse("1-1-1"), 100)
    entry = CachedEntry(token("-40", "3-3-4", 100, older_copy), None)
    assert compare_cache(ledger(), {("users", PK1): entry}).stale_keys == 1
    # no provenance: timestamps only
    assert (
        compare_cache(
            ledger(), {("users", PK1): CachedEntry(token("-40", "3-3-1", 90), None)}
        ).stale_keys
        == 1
    )
    assert (
        compare_cache(
            ledger(), {("users", PK1): CachedEntry(token("-40", "3-3-1", 101), None)}
        ).stale_keys
        == 0
    )


def test_cache_values_against_the_database() -> None:
    def digest(value: bytes) -> str | None:
        return None if value == b"null" else value.decode()

    good = {("users", PK1): CachedEntry(token("-80", "1-1-2", 101), b"b")}
    database = {("users", PK1): "b"}
    assert compare_cache(ledger(), good, database, value_digest=digest).stale_keys == 0
    old_value = {("users", PK1): CachedEntry(token("-80", "1-1-2", 101), b"a")}
    assert compare_cache(ledger(), old_value, database, value_digest=digest).stale_keys == 1
    deleted = {("users", PK2): CachedEntry(token("80-", "2-2-2", 102), b"null")}
    assert compare_cache(ledger(), deleted, database, value_digest=digest).stale_keys == 0
