"""Cache keys of rows, shared by the invalidation sink and the application.

Per table, a *key template* names the key of a row from its primary key, e.g.
``{"users": "user:{id}"}``; tables without one use ``<keyspace>:<table>:<pk values joined by
':'>``. *Extra templates* name more keys to invalidate when a row changes, such as composite
objects addressed by part of the primary key (``{"order_items": ["order:{order_id}"]}`` for a
table keyed by ``(order_id, line)``). Templates may name any column; the invalidator renders
them from the row's images before and after the change, so moving a row from one composite
object to another invalidates both.

Values are rendered as text (strings as they are, numbers in decimal, null as ``null``, other
JSON values as compact JSON), with ``%``, whitespace and control characters percent-encoded,
since memcached keys cannot hold them. A key longer than memcached's 250 bytes is shortened to
its first 200 bytes plus ``#`` and a 32-hex-digit BLAKE2b digest of the whole key.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from updatestream.core.errors import UpdateStreamError

MAX_KEY_BYTES = 250
_UNSAFE = re.compile(r"[%\s\x00-\x1f\x7f]")
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


class KeyTemplateError(UpdateStreamError):
    """A key template is malformed or names a column the row does not have."""


def render_value(value: Any) -> str:
    if type(value) is int:  # the common case, and never unsafe
        return str(value)
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool) or value is None or not isinstance(value, int | float):
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    else:
        text = str(value)
    return _UNSAFE.sub(lambda m: f"%{ord(m.group()):02X}", text)


def fit(key: str) -> str:
    """A memcached-safe length: long keys become a prefix plus a digest."""
    raw = key.encode("utf-8")
    if len(raw) <= MAX_KEY_BYTES:
        return key
    digest = hashlib.blake2b(raw, digest_size=16).hexdigest()
    return raw[:200].decode("utf-8", "ignore") + "#" + digest


@dataclass(frozen=True)
class KeyTemplate:
    text: str
    literals: tuple[str, ...]
    fields: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, table: str, *, constant: bool = False) -> KeyTemplate:
        """Parse a template; ``constant`` allows one without columns (a composite object that
        every row of the table is part of)."""
        literals: list[str] = []
        fields: list[str] = []
        if not text:
            raise KeyTemplateError(f"key template of table {table!r} is empty")
        try:
            parts = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise KeyTemplateError(f"key template {text!r} of table {table!r}: {exc}") from None
        for literal, field, spec, conversion in parts:
            if _UNSAFE.search(literal.replace("%", "")):
                raise KeyTemplateError(
                    f"key template {text!r} of table {table!r} has whitespace or control "
                    "characters, which memcached keys cannot hold"
                )
            literals.append(literal)
            if field is None:
                continue
            if not _FIELD.match(field) or spec or conversion:
                raise KeyTemplateError(
                    f"key template {text!r} of table {table!r}: {{{field}}} must be a plain "
                    "column name such as {id}"
                )
            fields.append(field)
        if not fields and not constant:
            raise KeyTemplateError(
                f"key template {text!r} of table {table!r} names no column; every row would "
                "share one key"
            )
        if len(literals) == len(fields):
            literals.append("")
        return cls(text, tuple(literals), tuple(fields))

    def render(self, values: Mapping[str, Any], table: str) -> str:
        out = [self.literals[0]]
        for field, literal in zip(self.fields, self.literals[1:], strict=True):
            if field not in values:
                raise KeyTemplateError(
                    f"key template {self.text!r} names column {field!r}, which rows of table "
                    f"{table!r} do not have (columns: {', '.join(values)})"
                )
            out.append(render_value(values[field]))
            out.append(literal)
        return fit("".join(out))


class KeyTemplates:
    """The key templates of one keyspace's tables."""

    def __init__(
        self,
        keyspace: str,
        templates: Mapping[str, str] | None = None,
        extra: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.keyspace = keyspace
        self._primary = {t: KeyTemplate.parse(x, t) for t, x in (templates or {}).items()}
        self._extra = {
            t: tuple(KeyTemplate.parse(x, t, constant=True) for x in xs)
            for t, xs in (extra or {}).items()
        }

    def key(self, table: str, pk: Mapping[str, Any]) -> str:
        """The key of the row with primary key ``pk`` (columns in key order)."""
        template = self._primary.get(table)
        if template is not None:
            return template.render(pk, table)
        values = ":".join(render_value(v) for v in pk.values())
        return fit(f"{render_value(self.keyspace)}:{render_value(table)}:{values}")

    def extra_keys(self, table: str, row: Mapping[str, Any]) -> list[str]:
        """The composite-object keys of a row image."""
        return [t.render(row, table) for t in self._extra.get(table, ())]

    def needs_images(self, table: str) -> bool:
        """Do the keys of this table's changes depend on more than the primary keys?"""
        return table in self._extra

    def keys_of_change(
        self, table: str, pk: Mapping[str, Any], images: Iterable[Mapping[str, Any] | None]
    ) -> list[str]:
        """Every key a row change invalidates: the row's key for its primary key in each image
        (a key change moves it), and the extra keys of each image, without repeats."""
        keys = {self.key(table, pk): None}
        for image in images:
            if image is None:
                continue
            image_pk = {c: image.get(c, v) for c, v in pk.items()}
            if image_pk != pk:
                keys[self.key(table, image_pk)] = None
            for key in self.extra_keys(table, image):
                keys[key] = None
        return list(keys)
