"""Table-driven tests of MariaDB positions and MySQL GTID sets."""

from __future__ import annotations

import pickle

import pytest

from tests.core.builders import refusal
from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import (
    Comparison,
    Flavor,
    GTIDParseError,
    MariaDBGTID,
    MariaDBPosition,
    MySQLGTIDSet,
    PositionError,
    compare_positions,
    parse_position,
    position_contains,
    position_union,
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "8a94f357-aab4-11df-86ab-c80aa9429562"
MAX32 = 2**32 - 1
MAX64 = 2**64 - 1


# --- MariaDB -----------------------------------------------------------------------------------


def test_mariadb_gtid_parse_and_format() -> None:
    gtid = MariaDBGTID.parse("0-1-5")
    assert gtid == MariaDBGTID(domain=0, server=1, seq=5)
    assert str(gtid) == "0-1-5"


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   ", ""),
        ("0-1-100", "0-1-100"),
        ("1-2-7,0-1-100", "0-1-100,1-2-7"),
        (" 0-1-100 , 1-2-7 ", "0-1-100,1-2-7"),
        (f"{MAX32}-{MAX32}-{MAX64}", f"{MAX32}-{MAX32}-{MAX64}"),
    ],
)
def test_mariadb_position_parse_format(text: str, canonical: str) -> None:
    position = MariaDBPosition.parse(text)
    assert str(position) == canonical
    assert MariaDBPosition.parse(str(position)) == position
    assert position.flavor is Flavor.MARIADB


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("0-1", "'0-1' is not a 'domain-server-seq'"),
        ("0-1-x", "'0-1-x'"),
        ("0-1-5,", "'' is not"),
        ("0-1-5,0-2-6", "two GTIDs for domain 0"),
        ("4294967296-1-1", "domain must be an integer in 0..4294967295"),
        ("0-1-18446744073709551616", "seq must be"),
        ("-1-1-1", "'-1-1-1'"),
        (f"{U1}:1-5", "is not a 'domain-server-seq'"),
    ],
)
def test_mariadb_position_malformed(text: str, fragment: str) -> None:
    message = refusal(GTIDParseError, lambda: MariaDBPosition.parse(text))
    assert fragment in message
    assert repr(text) in message  # the bad text is quoted
    assert "domain-server-seq" in message  # the expected form is shown
    assert issubclass(GTIDParseError, UpdateStreamError)


@pytest.mark.parametrize(
    ("mine", "other", "expected"),
    [
        ("0-1-100", "0-1-100", True),
        ("0-1-100", "0-1-99", True),
        ("0-1-100", "0-1-101", False),
        ("0-1-100", "", True),
        ("", "0-1-1", False),
        ("0-1-100,1-2-7", "1-2-7", True),
        ("0-1-100", "0-1-50,1-2-1", False),
        ("0-1-100", "0-9-100", True),  # only the sequence number counts
    ],
)
def test_mariadb_contains(mine: str, other: str, expected: bool) -> None:
    assert MariaDBPosition.parse(mine).contains(MariaDBPosition.parse(other)) is expected


@pytest.mark.parametrize(
    ("a", "b", "union"),
    [
        ("0-1-100", "0-1-50", "0-1-100"),
        ("0-1-50", "0-1-100", "0-1-100"),
        ("0-1-100", "1-2-7", "0-1-100,1-2-7"),
        ("0-1-5,1-2-9", "0-3-8,1-2-3", "0-3-8,1-2-9"),
        ("0-1-5", "0-3-5", "0-3-5"),  # tie on seq: the higher server id, whichever side
        ("0-3-5", "0-1-5", "0-3-5"),
        ("", "0-1-1", "0-1-1"),
    ],
)
def test_mariadb_union(a: str, b: str, union: str) -> None:
    assert str(MariaDBPosition.parse(a).union(MariaDBPosition.parse(b))) == union


def test_mariadb_advance_and_domain_seq() -> None:
    position = MariaDBPosition.parse("0-1-100,1-2-7")
    after = position.advance(MariaDBGTID(1, 3, 8))
    assert str(after) == "0-1-100,1-3-8"
    assert str(position) == "0-1-100,1-2-7"  # immutable
    assert after.domain_seq(1) == 8
    assert after.domain_seq(0) == 100
    assert after.domain_seq(5) is None
    assert str(MariaDBPosition().advance(MariaDBGTID(2, 1, 1))) == "2-1-1"
    assert dict(after.entries) == {0: MariaDBGTID(0, 1, 100), 1: MariaDBGTID(1, 3, 8)}


def test_mariadb_value_semantics() -> None:
    a = MariaDBPosition.parse("1-2-7,0-1-100")
    b = MariaDBPosition.parse("0-1-100,1-2-7")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != MariaDBPosition.parse("0-1-100")
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.foo = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        a.entries[3] = MariaDBGTID(3, 1, 1)  # type: ignore[index]


# --- MySQL -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        (f"{U1}:1-5", f"{U1}:1-5"),
        (f"{U1}:1-5:7-9", f"{U1}:1-5:7-9"),
        (f"{U1}:7-9:1-5", f"{U1}:1-5:7-9"),
        (f"{U1}:1-5:6-9", f"{U1}:1-9"),  # adjacent intervals merge
        (f"{U1}:1-5:3-4:5", f"{U1}:1-5"),  # overlapping intervals merge
        (f"{U1}:3:3", f"{U1}:3"),
        (f"{U1.upper()}:1", f"{U1}:1"),  # the uuid is lower-cased
        (f"{U1.replace('-', '')}:1", f"{U1}:1"),  # MySQL also accepts the uuid without dashes
        (f"{U2}:1,{U1}:2", f"{U1}:2,{U2}:1"),  # sorted by uuid
        (f"{U1}:1-3,\n{U2}:1-2,\n{U1}:4", f"{U1}:1-4,{U2}:1-2"),  # as MySQL prints, repeated
        (f"  {U1}:1-3 ,\n  {U2}:5\n", f"{U1}:1-3,{U2}:5"),
    ],
)
def test_mysql_parse_format(text: str, canonical: str) -> None:
    gtid_set = MySQLGTIDSet.parse(text)
    assert str(gtid_set) == canonical
    assert MySQLGTIDSet.parse(canonical) == gtid_set
    assert gtid_set.flavor is Flavor.MYSQL


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (U1, "has no ':'"),
        (f"{U1}:", "'' in"),
        (f"{U1}:0", "1 <= N <= M"),
        (f"{U1}:5-3", "1 <= N <= M"),
        (f"{U1}:1-x", "not an interval"),
        (f"{U1}:tag:1-5", "tagged GTIDs"),
        (f"{U1}:9223372036854775808", "1 <= N <= M"),
        ("not-a-uuid:1", "is not a server UUID"),
        (f"{U1}:1,,{U2}:1", "empty part"),
        ("0-1-5", "has no ':'"),
    ],
)
def test_mysql_malformed(text: str, fragment: str) -> None:
    message = refusal(GTIDParseError, lambda: MySQLGTIDSet.parse(text))
    assert fragment in message
    assert repr(text) in message
    assert "uuid:N[-M]" in message


@pytest.mark.parametrize(
    ("mine", "other", "expected"),
    [
        (f"{U1}:1-9", f"{U1}:1-9", True),
        (f"{U1}:1-9", f"{U1}:2-3:5", True),
        (f"{U1}:1-5:7-9", f"{U1}:4-7", False),  # the hole at 6
        (f"{U1}:1-5:7-9", f"{U1}:7-9", True),
        (f"{U1}:1-5", f"{U1}:1-5,{U2}:1", False),
        (f"{U1}:1-5,{U2}:1-2", f"{U2}:2", True),
        (f"{U1}:1-5", "", True),
        ("", f"{U1}:1", False),
        (f"{U1}:3-5", f"{U1}:1-2", False),
        (f"{U1}:1-2:4-5:7-8", f"{U1}:1:4:8", True),
    ],
)
def test_mysql_contains(mine: str, other: str, expected: bool) -> None:
    assert MySQLGTIDSet.parse(mine).contains(MySQLGTIDSet.parse(other)) is expected


def test_mysql_union_add_contains_gtid() -> None:
    a = MySQLGTIDSet.parse(f"{U1}:1-5")
    b = MySQLGTIDSet.parse(f"{U1}:7-9,{U2}:1")
    assert str(a.union(b)) == f"{U1}:1-5:7-9,{U2}:1"
    assert str(a.union(b).add(U1, 6)) == f"{U1}:1-9,{U2}:1"
    assert str(a.add(U2.upper(), 3)) == f"{U1}:1-5,{U2}:3"
    assert str(a) == f"{U1}:1-5"  # immutable
    assert a.contains_gtid(U1, 5)
    assert not a.contains_gtid(U1, 6)
    assert not a.contains_gtid(U2, 1)
    assert dict(b.entries) == {U1: ((7, 9),), U2: ((1, 1),)}
    with pytest.raises(GTIDParseError, match="is not a server UUID"):
        a.add("nope", 1)
    with pytest.raises(GTIDParseError, match="1 <= N <= M"):
        a.add(U1, 0)


def test_mysql_value_semantics() -> None:
    a = MySQLGTIDSet.parse(f"{U2}:1,{U1}:1-3")
    b = MySQLGTIDSet.parse(f"{U1}:1-2:3,{U2}:1")
    assert a == b
    assert hash(a) == hash(b)
    assert pickle.loads(pickle.dumps(a)) == a
    assert a != MariaDBPosition()
    assert MySQLGTIDSet() == MySQLGTIDSet.parse("")


# --- flavour-independent -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "flavor", "kind", "canonical"),
    [
        ("0-1-5", None, MariaDBPosition, "0-1-5"),
        (" 0-1-5,1-1-1 ", None, MariaDBPosition, "0-1-5,1-1-1"),
        (f"{U1}:1-5", None, MySQLGTIDSet, f"{U1}:1-5"),
        ("", Flavor.MARIADB, MariaDBPosition, ""),
        ("", Flavor.MYSQL, MySQLGTIDSet, ""),
        ("0-1-5", Flavor.MARIADB, MariaDBPosition, "0-1-5"),
    ],
)
def test_parse_position(text: str, flavor: Flavor | None, kind: type, canonical: str) -> None:
    position = parse_position(text, flavor)
    assert isinstance(position, kind)
    assert str(position) == canonical


@pytest.mark.parametrize(
    ("text", "flavor", "fragment"),
    [
        ("", None, "pass flavor="),
        ("hello", None, "neither flavour"),
        ("0-1-5", Flavor.MYSQL, "has no ':'"),
        (f"{U1}:1", Flavor.MARIADB, "domain-server-seq"),
    ],
)
def test_parse_position_errors(text: str, flavor: Flavor | None, fragment: str) -> None:
    with pytest.raises(GTIDParseError, match=fragment):
        parse_position(text, flavor)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("0-1-5", "0-1-5", Comparison.EQUAL),
        ("0-1-5", "0-1-6", Comparison.BEFORE),
        ("0-1-6", "0-1-5", Comparison.AFTER),
        ("0-1-6,1-1-1", "0-1-5,1-1-2", Comparison.UNKNOWN),
        ("0-1-5", "1-1-5", Comparison.UNKNOWN),
        ("0-1-5", "0-1-5,1-1-1", Comparison.BEFORE),
        ("0-1-5", "0-2-5", Comparison.EQUAL),  # same seq from another server: mutual containment
        (f"{U1}:1-5", f"{U1}:1-6", Comparison.BEFORE),
        (f"{U1}:1-6", f"{U1}:1-5", Comparison.AFTER),
        (f"{U1}:1-5", f"{U1}:1-5", Comparison.EQUAL),
        (f"{U1}:1-5:7", f"{U1}:1-6", Comparison.UNKNOWN),
        (f"{U1}:1-5", f"{U2}:1-5", Comparison.UNKNOWN),
    ],
)
def test_compare_positions(a: str, b: str, expected: Comparison) -> None:
    pa, pb = parse_position(a), parse_position(b)
    assert compare_positions(pa, pb) is expected
    assert compare_positions(pb, pa) is expected.mirror()


def test_mixing_flavours_is_a_typed_error() -> None:
    maria, mysql = parse_position("0-1-5"), parse_position(f"{U1}:1")
    for call in (
        lambda: compare_positions(maria, mysql),
        lambda: position_contains(mysql, maria),
        lambda: position_union(maria, mysql),
        lambda: maria.contains(mysql),  # type: ignore[arg-type]
        lambda: mysql.union(maria),  # type: ignore[arg-type]
    ):
        with pytest.raises(PositionError, match="one flavour") as info:
            call()
        assert isinstance(info.value, GTIDParseError)
        assert "mariadb" in str(info.value)
        assert "mysql" in str(info.value)


def test_position_helpers_dispatch() -> None:
    assert position_contains(parse_position("0-1-9"), parse_position("0-1-3"))
    assert str(position_union(parse_position(f"{U1}:1"), parse_position(f"{U1}:2"))) == f"{U1}:1-2"


def test_comparison_mirror() -> None:
    assert Comparison.BEFORE.mirror() is Comparison.AFTER
    assert Comparison.AFTER.mirror() is Comparison.BEFORE
    assert Comparison.EQUAL.mirror() is Comparison.EQUAL
    assert Comparison.UNKNOWN.mirror() is Comparison.UNKNOWN
