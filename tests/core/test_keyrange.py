"""Table-driven tests of key range parsing, formatting and algebra."""

from __future__ import annotations

import pickle

import pytest

from tests.core.builders import kr, refusal
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import (
    FULL_RANGE,
    InvalidKeyRange,
    KeyRange,
    are_contiguous,
    format_keyspace_id,
    parse_keyspace_id,
    parse_shard_name_list,
    parse_shard_names,
    sort_key,
)


def kid(text: str) -> bytes:
    return bytes.fromhex(text)


@pytest.mark.parametrize(
    ("text", "start", "end", "name"),
    [
        ("-", b"", b"", "-"),
        ("-80", b"", b"\x80", "-80"),
        ("80-", b"\x80", b"", "80-"),
        ("40-80", b"\x40", b"\x80", "40-80"),
        ("0000-8000", b"", b"\x80", "-80"),
        ("00-80", b"", b"\x80", "-80"),
        ("4000-80", b"\x40", b"\x80", "40-80"),
        ("40-8001", b"\x40", b"\x80\x01", "40-8001"),
        ("0001-", b"\x00\x01", b"", "0001-"),
        ("C0-", b"\xc0", b"", "c0-"),
        (" 40-80 ", b"\x40", b"\x80", "40-80"),
        ("-ff", b"", b"\xff", "-ff"),
    ],
)
def test_parse_normalises_and_names(text: str, start: bytes, end: bytes, name: str) -> None:
    parsed = KeyRange.parse(text)
    assert (parsed.start, parsed.end) == (start, end)
    assert parsed.name == name
    assert str(parsed) == name
    assert KeyRange.parse(name) == parsed


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("8-", "odd number of hex digits"),
        ("-800", "odd number of hex digits"),
        ("zz-", "not hex"),
        ("40-4g", "not hex"),
        ("80-40", "start is not below its end"),
        ("40-40", "start is not below its end"),
        ("4000-40", "start is not below its end"),
        ("-00", "end is the lowest keyspace id"),
        ("0", "exactly one '-'"),
        ("", "exactly one '-'"),
        ("40-80-c0", "exactly one '-'"),
        ("40_80", "exactly one '-'"),
    ],
)
def test_parse_rejects_with_a_message_naming_the_text(text: str, fragment: str) -> None:
    message = refusal(InvalidKeyRange, lambda: KeyRange.parse(text))
    assert repr(text) in message
    assert fragment in message
    assert issubclass(InvalidKeyRange, UpdateStreamError)


def test_constructor_normalises_and_refuses_empty_ranges() -> None:
    assert KeyRange(b"\x40\x00", b"\x80\x00\x00") == kr("40-80")
    assert hash(KeyRange(b"\x40\x00", b"\x80")) == hash(kr("40-80"))
    with pytest.raises(InvalidKeyRange, match="not below"):
        KeyRange(b"\x80", b"\x40")
    with pytest.raises(InvalidKeyRange, match="must be bytes"):
        KeyRange("40", "80")  # type: ignore[arg-type]


def test_full_range() -> None:
    assert FULL_RANGE == kr("-") == KeyRange()
    assert FULL_RANGE.is_complete
    assert not kr("-80").is_complete
    assert not kr("80-").is_complete


@pytest.mark.parametrize(
    ("key_range", "keyspace_id", "expected"),
    [
        ("-", "", True),
        ("-", "ffffffffffffffff", True),
        ("-80", "00", True),
        ("-80", "", True),
        ("-80", "7fffffffffffffff", True),
        ("-80", "80", False),
        ("-80", "8000000000000000", False),
        ("-80", "8000000000000001", False),
        ("80-", "8000000000000000", True),
        ("80-", "80", True),
        ("80-", "7fffffffffffffff", False),
        ("40-80", "40", True),
        ("40-80", "3fff", False),
        ("40-80", "4000000000000001", True),
        ("40-80", "80", False),
        ("40-8001", "8000ffff", True),
        ("40-8001", "8001", False),
        ("0001-", "00", False),
        ("0001-", "0001", True),
        ("0001-", "000000ff", False),
    ],
)
def test_contains(key_range: str, keyspace_id: str, expected: bool) -> None:
    assert kr(key_range).contains(kid(keyspace_id)) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected", "common"),
    [
        ("-", "40-80", True, "40-80"),
        ("-80", "80-", False, None),
        ("-80", "40-c0", True, "40-80"),
        ("40-c0", "80-", True, "80-c0"),
        ("-40", "80-", False, None),
        ("-80", "-40", True, "-40"),
        ("80-", "c0-", True, "c0-"),
        ("40-80", "40-80", True, "40-80"),
        ("40-8001", "80-", True, "80-8001"),
        ("-", "-", True, "-"),
    ],
)
def test_intersects_and_intersection(a: str, b: str, expected: bool, common: str | None) -> None:
    assert kr(a).intersects(kr(b)) is expected
    assert kr(b).intersects(kr(a)) is expected
    expected_range = None if common is None else kr(common)
    assert kr(a).intersection(kr(b)) == expected_range
    assert kr(b).intersection(kr(a)) == expected_range


@pytest.mark.parametrize(
    ("outer", "inner", "expected"),
    [
        ("-", "40-80", True),
        ("-", "-", True),
        ("-80", "-", False),
        ("-80", "-40", True),
        ("-80", "40-80", True),
        ("-80", "40-c0", False),
        ("40-80", "-80", False),
        ("80-", "c0-", True),
        ("80-", "80-c0", True),
        ("80-c0", "80-", False),
        ("40-80", "40-80", True),
        ("40-8001", "40-80", True),
        ("40-80", "40-8001", False),
    ],
)
def test_contains_range(outer: str, inner: str, expected: bool) -> None:
    assert kr(outer).contains_range(kr(inner)) is expected


@pytest.mark.parametrize(
    ("key_range", "n", "parts"),
    [
        ("-", 1, "-"),
        ("-", 2, "-80,80-"),
        ("-", 3, "-55,55-aa,aa-"),
        ("-", 4, "-40,40-80,80-c0,c0-"),
        ("-80", 2, "-40,40-80"),
        ("80-", 2, "80-c0,c0-"),
        ("40-80", 4, "40-50,50-60,60-70,70-80"),
        ("40-41", 2, "40-4080,4080-41"),
        ("fe-", 4, "fe-fe80,fe80-ff,ff-ff80,ff80-"),
    ],
)
def test_split(key_range: str, n: int, parts: str) -> None:
    result = kr(key_range).split(n)
    assert ",".join(part.name for part in result) == parts
    assert are_contiguous(result)
    assert result[0].start == kr(key_range).start
    assert result[-1].end == kr(key_range).end


@pytest.mark.parametrize("n", [0, -1, True])
def test_split_refuses_bad_counts(n: int) -> None:
    with pytest.raises(InvalidKeyRange, match="cannot split key range -80"):
        kr("-80").split(n)


def test_parse_shard_names() -> None:
    assert parse_shard_names("-40,40-80,80-") == [kr("-40"), kr("40-80"), kr("80-")]
    assert parse_shard_names(" -80 , 80- ") == [kr("-80"), kr("80-")]
    assert parse_shard_names("-") == [FULL_RANGE]
    assert parse_shard_name_list(["80-", "-80"]) == [kr("80-"), kr("-80")]
    assert parse_shard_name_list("-80,80-") == [kr("-80"), kr("80-")]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is empty"),
        (" , ", "is empty"),
        ("-80,,80-", "empty entry"),
        ("-80,8-", "odd number"),
    ],
)
def test_parse_shard_names_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidKeyRange, match=fragment):
        parse_shard_names(text)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ("-80,80-", True),
        ("80-,-80", True),
        ("-40,40-80", True),
        ("40-80", True),
        ("-40,80-", False),
        ("-80,40-", False),
        ("-80,-80", False),
        ("-,80-", False),
    ],
)
def test_are_contiguous(names: str, expected: bool) -> None:
    assert are_contiguous(parse_shard_names(names)) is expected


def test_are_contiguous_empty_is_false() -> None:
    assert are_contiguous([]) is False


def test_ordering_by_start_then_end() -> None:
    shuffled = parse_shard_names("c0-,40-80,-,-80,80-c0,-40,40-")
    expected = "-40,-80,-,40-80,40-,80-c0,c0-"
    assert ",".join(r.name for r in sorted(shuffled)) == expected
    assert ",".join(r.name for r in sorted(shuffled, key=sort_key)) == expected
    assert kr("-80") < kr("80-")
    assert kr("-80") <= kr("-80")
    assert kr("c0-") > kr("80-c0")


@pytest.mark.parametrize(
    ("text", "value"),
    [("80", b"\x80"), ("0x166B40B44ABA4BD6", kid("166b40b44aba4bd6")), ("", b"")],
)
def test_keyspace_id_hex(text: str, value: bytes) -> None:
    assert parse_keyspace_id(text) == value
    assert format_keyspace_id(value) == text.lower().removeprefix("0x")


@pytest.mark.parametrize(("text", "fragment"), [("8", "odd number"), ("zz", "not hex")])
def test_parse_keyspace_id_rejects(text: str, fragment: str) -> None:
    with pytest.raises(InvalidKeyRange, match=fragment):
        parse_keyspace_id(text)


def test_pickles_for_spark_tasks() -> None:
    for key_range in (kr("-"), kr("40-80"), kr("80-")):
        restored = pickle.loads(pickle.dumps(key_range))
        assert restored == key_range
        assert restored.contains(b"\x50") == key_range.contains(b"\x50")
