"""Column values of change events back to SQL parameters.

Events carry JSON-safe values (:func:`updatestream.binlog.events.encode_value`); the mirror
writes them into columns of the source's types. :func:`to_sql` undoes the encoding with the
column's ``DATA_TYPE`` (information_schema): ``{"$base64": ...}`` back to bytes, a SET's list
of labels back to ``a,b``, a MySQL JSON value back to JSON text, ISO date-times with a space
instead of ``T``. Everything else (numbers, DECIMAL and TIME text, ENUM labels, MariaDB JSON,
which is LONGTEXT and arrives as its text) is passed as it is.
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
    if data_type == "json":
        return value if isinstance(value, str) and _is_json_text(value) else json.dumps(value)
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


def _is_json_text(text: str) -> bool:
    """MySQL's JSON columns arrive decoded, so a str is a JSON string value, except when the
    reader handed the column over as text (MariaDB): then it parses as a document."""
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "{[":
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
