"""One value per column type, whichever way a row was read.

python-mysql-replication and a `SELECT` give some column types in different forms; a change
event must carry the same value for the same row either way (the snapshot's rows and the
binlog's images are compared byte for byte, and sinks write them back). The canonical forms:

- `BIT(n)`: the binlog gives a text of n `0`/`1` digits, SELECT big-endian bytes; canonical
  is the number (`b'101'` -> 5).
- `FLOAT`: the binlog gives the single-precision value widened to a double
  (`1.100000023841858`), MySQL's SELECT six digits (`1.23457`; the snapshot reads
  `CAST(.. AS DOUBLE)` instead); canonical is the shortest decimal that is the same
  single-precision value (`1.1`, `1.2345679`).
- `BINARY(n)`: the binlog drops trailing zero bytes, SELECT gives all n; canonical is all n.
- an empty binary value (`BINARY`, `VARBINARY`, `BLOB`): python-mysql-replication gives `""`,
  SELECT `b""`; canonical is bytes.
- MySQL `JSON`: binary in the binlog, the server's text from SELECT; canonical is that text
  (`updatestream.binlog.mysql_json`).

`binlog_fixes(columns)` says which columns of a rows event need their value made canonical;
most tables have none, and then nothing is done per row.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

Fix = tuple[str, Callable[[Any], Any]]


def float32_value(value: Any) -> Any:
    """The shortest decimal (as a float) that is the same single-precision value as `value`."""
    if not isinstance(value, float):
        return value
    single = struct.unpack("<f", struct.pack("<f", value))[0]
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == single:
            return float(text)
    return single


def bit_value(value: Any) -> Any:
    """A BIT value as its number: from the binlog's text of digits or from SELECT's bytes."""
    if isinstance(value, str):
        return int(value, 2) if value else 0
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big")
    return value


def _padded(length: int) -> Callable[[Any], Any]:
    def pad(value: Any) -> Any:
        value = empty_bytes(value)
        if isinstance(value, bytes) and len(value) < length:
            return value.ljust(length, b"\0")
        return value

    return pad


def empty_bytes(value: Any) -> Any:
    """An empty binary value as bytes (the library decodes an empty one to `""`)."""
    return b"" if value == "" else value


def binlog_fixes(columns: Sequence[Any]) -> tuple[Fix, ...]:
    """(column name, fix) for each column of a rows event whose binlog value is not canonical."""
    fixes: list[Fix] = []
    for column in columns:
        kind = column.type
        if kind == FIELD_TYPE.BIT:
            fixes.append((column.name, bit_value))
        elif kind == FIELD_TYPE.FLOAT:
            fixes.append((column.name, float32_value))
        elif kind == FIELD_TYPE.STRING and _is_binary(column):
            fixes.append((column.name, _padded(int(column.max_length))))
        elif kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB) and _is_binary(column):
            fixes.append((column.name, empty_bytes))
    return tuple(fixes)


def _is_binary(column: Any) -> bool:
    name = getattr(column, "character_set_name", None)
    return name is None or str(name).lower() == "binary"


def apply_fixes(image: dict[str, Any] | None, fixes: tuple[Fix, ...]) -> None:
    """Make the values of `fixes`' columns in a row image canonical, in place."""
    if image is None:
        return
    for name, fix in fixes:
        if name in image and image[name] is not None:
            image[name] = fix(image[name])
