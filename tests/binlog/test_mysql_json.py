"""MySQL's binary JSON written out as MySQL's text, without a server: binary values a MySQL
8.0.31 logged in row events, each with the text the same server gave back for it
(`SELECT CAST(col AS CHAR)`); the tests beside the servers compare many more
(`tests/jobs/test_column_types.py`)."""

from __future__ import annotations

import struct

import pytest

from updatestream.binlog.mysql_json import MySQLJSONError, format_double, to_text

LOGGED = [
    ("0b50efe2d6e41a4b44", "1e21"),
    ("0bf168e388b5f8e43e", "0.00001"),
    ("0b0000000000000080", "-0.0"),
    ("0b000000000000f03f", "1.0"),
    ("0c0b61011f225c2fc3a97f090a", '"a\\u0001\\u001f\\"\\\\/é\x7f\\t\\n"'),
    (
        "0003002a00190001001a0001001b000200050200050100021d006162616103000d00040100040200040000",
        '{"a": 2, "b": 1, "aa": [true, false, null]}',
    ),
    ("0affffffffffffffff", "18446744073709551615"),
    ("090000000000000080", "-9223372036854775808"),
    ("0ff60403028132", "1.50"),
    ("0f0a08000000000044a519", '"2020-01-02"'),
    ("0f0c08000000053144a519", '"2020-01-02 03:04:05.000000"'),
    ("0f0c0820a107053144a519", '"2020-01-02 03:04:05.500000"'),
    ("0f0b080000000531000000", '"03:04:05.000000"'),
    ("0f0f0300ff41", '"base64:type15:AP9B"'),
    ("05e407", "2020"),
    (
        "0003003800190001001a0001001b0001000f1c000f26000f2e0078797af6080c03800000000000f606090080"
        "000064f6080c037ffffffffe0b",
        '{"x": 0.000, "y": 100, "z": -0.500}',
    ),
]


@pytest.mark.parametrize(("logged", "text"), LOGGED)
def test_a_logged_value_reads_as_the_servers_text(logged: str, text: str) -> None:
    assert to_text(bytes.fromhex(logged)) == text


def large_array(values: list[int]) -> bytes:
    """A large array (4-byte counts and offsets) of int32 values, which it inlines."""
    entries = b"".join(struct.pack("<BI", 0x7, value & 0xFFFFFFFF) for value in values)
    size = 8 + len(entries)
    return b"\x03" + struct.pack("<II", len(values), size) + entries


def test_the_large_format_inlines_32_bit_integers() -> None:
    assert to_text(large_array([1, -2, 70000])) == "[1, -2, 70000]"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"), (100.0, "100.0"), (1e15, "1e15"), (1e14, "100000000000000.0"),
        (1234567890123456.8, "1234567890123456.8"), (1e-15, "0.000000000000001"),
        (1e-16, "1e-16"), (2.5e-7, "0.00000025"), (-1.5e21, "-1.5e21"), (5e-324, "5e-324"),
    ],
)  # fmt: skip
def test_doubles_take_mysqls_notation(value: float, text: str) -> None:
    assert format_double(value) == text


def test_a_malformed_value_is_a_typed_error() -> None:
    with pytest.raises(MySQLJSONError):
        to_text(b"")
    with pytest.raises(MySQLJSONError):
        to_text(b"\x0e\x00")
