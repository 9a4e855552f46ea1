"""Column values of change events back to SQL parameters.

Events carry JSON-safe values (:func:`updatestream.binlog.events.encode_value`); the mirror
writes them into columns of the source's types. :func:`to_sql` undoes the encoding with the
column's ``DATA_TYPE`` (information_schema): ``{"$base64": ...}`` back to bytes, a SET's list
of labels back to ``a,b``, ISO date-times with a space instead of ``T``. A JSON column arrives
as the document's text on both flavors (MySQL's binary JSON is written out as the server's
text, ``updatestream.binlog.mysql_json``; MariaDB's JSON is LONGTEXT) and is passed as it is,
like everything else (numbers, DECIMAL and TIME text, ENUM labels).
"""

from __future__ import annotations

import base64
import json
from typing import Any

_DATETIME_TYPES = frozenset({"datetime", "timestamp"})
_TEXT_SPECIAL = _DATETIME_TYPES | {"json"}  # types whose text values are rewritten


def to_sql(value: Any, data_type: str) -> Any:
    """The parameter that stores ``value`` (as an event carries it) in a ``data_type`` column."""
    kind = type(value)
    if value is None or kind is int or (kind is str and data_type not in _TEXT_SPECIAL):
        return value
    if data_type == "json":  # the document's text; a decoded value from an older reader
        return value if isinstance(value, str) else json.dumps(value)
    if isinstance(value, dict) and set(value) == {"$base64"}:
        return base64.b64decode(value["$base64"])
    if isinstance(value, list):
        if data_type == "set":
            return ",".join(str(item) for item in value)
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return int(value)
    if data_type in _DATETIME_TYPES and isinstance(value, str):
        return value.replace("T", " ", 1)
    return value
