"""MySQL's binary JSON, as it arrives in row events, written out as MySQL's own JSON text.

A MySQL 8 JSON column is stored (and logged) in a binary form. A `SELECT` of the column gives
the server's text of the document; the change stream must give exactly that text for the same
row, so that a row read by the snapshot and the binlog's image of it encode to the same bytes,
and so that a JSON column is one kind of value on both flavors (MariaDB's JSON is LONGTEXT and
arrives as its text).

python-mysql-replication decodes the binary form to Python objects, losing what the text needs
(the opaque type of a temporal or binary value, bytes it cannot decode), so `to_text` reads the
binary form itself and writes MySQL's text:

- objects `{"k": v, "k2": v2}` in stored key order (shorter keys first, then by bytes), arrays
  `[1, 2]`: `", "` and `": "` separators;
- strings quoted with `"`, `\\` and control characters escaped (`\\n`, `\\u001f`), everything
  else raw (non-ASCII, DEL, `/`);
- integers in decimal; doubles with the shortest digits that read back as the same double,
  fixed-point from 1e-15 to below 1e15 (and any double with a fraction below 1e17), otherwise
  `<digits>e<exponent>` (`1e21`, `1.5e-16`); a double without fraction or exponent ends in `.0`;
- opaque values: DECIMAL unquoted with its scale (`1.50`), DATE `"2020-01-02"`, DATETIME and
  TIMESTAMP `"2020-01-02 03:04:05.000000"`, TIME `"03:04:05.000000"`, anything else
  `"base64:type<field type>:<base64>"`.

`install()` makes the library hand JSON columns over as that text (a partial JSON update, which
the source refuses, keeps the library's own decoding). The tests compare it with the server's
text for every kind of value.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import Callable
from typing import Any

from pymysqlreplication.util.bytes import parse_decimal_from_bytes

_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0x0, 0x1, 0x2, 0x3
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64 = 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xA
_DOUBLE, _STRING, _OPAQUE = 0xB, 0xC, 0xF
_LITERALS = {0: "null", 1: "true", 2: "false"}
_FIXED = {_INT16: "<h", _UINT16: "<H", _INT32: "<i", _UINT32: "<I", _INT64: "<q", _UINT64: "<Q"}

# field types of opaque values (binary_log_types.h)
_TIMESTAMP, _DATE, _TIME, _DATETIME, _NEWDECIMAL, _DECIMAL = 7, 10, 11, 12, 246, 0


class MySQLJSONError(ValueError):
    """A binary JSON value that does not follow MySQL's format."""


def to_text(data: bytes) -> str:
    """MySQL's JSON text of a binary JSON document (its type byte first)."""
    if not data:
        raise MySQLJSONError("an empty binary JSON value")
    parts: list[str] = []
    _value(data[0], memoryview(data)[1:], parts)
    return "".join(parts)


def _value(kind: int, data: memoryview, out: list[str]) -> None:
    if kind in (_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY):
        _container(kind, data, out)
    elif kind == _LITERAL:
        out.append(_LITERALS[data[0]])
    elif kind in _FIXED:
        out.append(str(struct.unpack_from(_FIXED[kind], data)[0]))
    elif kind == _DOUBLE:
        out.append(format_double(struct.unpack_from("<d", data)[0]))
    elif kind == _STRING:
        length, used = _varlen(data)
        out.append(quote(bytes(data[used : used + length]).decode("utf-8")))
    elif kind == _OPAQUE:
        field_type = data[0]
        length, used = _varlen(data[1:])
        out.append(opaque_text(field_type, bytes(data[1 + used : 1 + used + length])))
    else:
        raise MySQLJSONError(f"unknown binary JSON type {kind:#x}")


def _container(kind: int, data: memoryview, out: list[str]) -> None:
    small = kind in (_SMALL_OBJECT, _SMALL_ARRAY)
    is_object = kind in (_SMALL_OBJECT, _LARGE_OBJECT)
    width = 2 if small else 4
    unpack = "<H" if small else "<I"
    count = struct.unpack_from(unpack, data)[0]
    key_entry, value_entry = width + 2, 1 + width
    values_at = 2 * width + (count * key_entry if is_object else 0)
    out.append("{" if is_object else "[")
    for index in range(count):
        if index:
            out.append(", ")
        if is_object:
            at = 2 * width + index * key_entry
            key_offset = struct.unpack_from(unpack, data, at)[0]
            key_length = struct.unpack_from("<H", data, at + width)[0]
            out.append(quote(bytes(data[key_offset : key_offset + key_length]).decode("utf-8")))
            out.append(": ")
        entry = values_at + index * value_entry
        value_kind = data[entry]
        if _inlined(value_kind, small):
            _value(value_kind, data[entry + 1 : entry + value_entry], out)
        else:
            offset = struct.unpack_from(unpack, data, entry + 1)[0]
            _value(value_kind, data[offset:], out)
    out.append("}" if is_object else "]")


def _inlined(kind: int, small: bool) -> bool:
    return kind in (_LITERAL, _INT16, _UINT16) or (not small and kind in (_INT32, _UINT32))


def _varlen(data: memoryview) -> tuple[int, int]:
    """A string's or opaque value's length (7 bits a byte, low first) and the bytes it took."""
    length = 0
    for index in range(5):
        byte = data[index]
        length |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return length, index + 1
    raise MySQLJSONError("a binary JSON length longer than 5 bytes")


def quote(text: str) -> str:
    """A JSON string as MySQL writes it: `"` and `\\` escaped, control characters as `\\n`,
    `\\t`, `\\b`, `\\f`, `\\r` or `\\u00XX`, everything else raw (as Python's `json.dumps`
    does without `ensure_ascii`)."""
    return json.dumps(text, ensure_ascii=False)


def format_double(value: float) -> str:
    """A double as MySQL's JSON text writes it (see the module docstring)."""
    if math.isnan(value) or math.isinf(value):  # JSON cannot hold them; MySQL never stores them
        raise MySQLJSONError(f"a binary JSON double that is not finite: {value}")
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    digits, exponent = _shortest(abs(value))
    point = exponent + len(digits)  # the decimal point's place after the first digit's
    if -14 <= point <= 15 or len(digits) > point > 0:
        if point <= 0:
            text = "0." + "0" * -point + digits
        elif point < len(digits):
            text = digits[:point] + "." + digits[point:]
        else:
            text = digits + "0" * (point - len(digits)) + ".0"
        return sign + text
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{point - 1}"


def _shortest(value: float) -> tuple[str, int]:
    """(significant digits, exponent) of the shortest decimal that reads back as `value`:
    `value == int(digits) * 10 ** exponent`."""
    if value == 0:
        return "0", 0
    mantissa, _, exp = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exponent = int(exp or 0) - len(fraction)
    stripped = digits.rstrip("0")
    return stripped, exponent + len(digits) - len(stripped)


def opaque_text(field_type: int, data: bytes) -> str:
    """An opaque value (a DECIMAL, a temporal value, or other bytes) as MySQL writes it."""
    if field_type in (_NEWDECIMAL, _DECIMAL):
        return format(parse_decimal_from_bytes(data[2:], data[0], data[1]), "f")
    if field_type in (_DATE, _DATETIME, _TIMESTAMP) and len(data) >= 8:
        return '"' + _datetime_text(struct.unpack_from("<q", data)[0], field_type) + '"'
    if field_type == _TIME and len(data) >= 8:
        return '"' + _time_text(struct.unpack_from("<q", data)[0]) + '"'
    return f'"base64:type{field_type}:{base64.b64encode(data).decode("ascii")}"'


def _datetime_text(packed: int, field_type: int) -> str:
    whole, fraction = divmod(abs(packed), 1 << 24)
    ymd, hms = divmod(whole, 1 << 17)
    year_month, day = divmod(ymd, 1 << 5)
    year, month = divmod(year_month, 13)
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if field_type == _DATE:
        return date
    hour, rest = divmod(hms, 1 << 12)
    minute, second = divmod(rest, 1 << 6)
    return f"{date} {hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def _time_text(packed: int) -> str:
    sign = "-" if packed < 0 else ""
    whole, fraction = divmod(abs(packed), 1 << 24)
    hour = (whole >> 12) % (1 << 10)
    minute, second = (whole >> 6) % (1 << 6), whole % (1 << 6)
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def _read_binary_json_as_text(original: Callable[..., Any]) -> Callable[..., Any]:
    def read_binary_json(packet: Any, size: int, is_partial: bool) -> Any:
        if is_partial:  # a JSON diff (binlog_row_value_options=PARTIAL_JSON): refused later
            return original(packet, size, is_partial)
        length = packet.read_uint_by_size(size)
        if length == 0:
            return None
        return to_text(packet.read(length))

    read_binary_json.updatestream_json_text = True  # type: ignore[attr-defined]
    return read_binary_json


def install() -> None:
    """Make python-mysql-replication hand MySQL JSON columns over as MySQL's text (once)."""
    from pymysqlreplication.packet import BinLogPacketWrapper

    current = BinLogPacketWrapper.read_binary_json
    if not getattr(current, "updatestream_json_text", False):
        BinLogPacketWrapper.read_binary_json = _read_binary_json_as_text(current)
