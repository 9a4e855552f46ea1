"""Keeping Secret values out of status, Kubernetes Events and logs.

kopf writes a failed handler's exception message into the object (its progress record) and
into Events and logs; a client error may quote what it sent. Every text the operator lets out
goes through `SCRUBBER.scrub`: it replaces the values of the Secrets the operator has read
(and their base64 forms, as the API returns them) and anything shaped like a credential
(`password=...`, `"password": "..."`, `user:pass@host`, `Bearer ...`) with `***`.
`install()` puts the same scrubber in front of every log handler and kopf's progress storage.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

REDACTED = "***"
_NOT_SECRET_KEYS = frozenset({"username", "user"})
MIN_SECRET_LENGTH = 4  # shorter values would redact ordinary words; such passwords are unsafe

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # "password": "value"  /  'password': 'value'
    (
        re.compile(
            r"""(["']?(?:password|passwd|pwd|secret|token)["']?\s*:\s*)(["'])(?:(?!\2).)*\2""", re.I
        ),
        rf"\1\2{REDACTED}\2",
    ),
    # password=value  /  --password value  /  PASSWORD: value
    (
        re.compile(
            r"""((?:password|passwd|pwd|secret|token)\s*[=:]\s*|--password[= ])[^\s,;'"&]+""", re.I
        ),
        rf"\1{REDACTED}",
    ),
    # scheme://user:password@host
    (re.compile(r"(\w+://[^/\s:@]+:)[^@\s/]+@"), rf"\1{REDACTED}@"),
    (re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.I), rf"\1{REDACTED}"),
)


class Scrubber:
    """Replaces registered Secret values and credential-shaped text with `***`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: tuple[str, ...] = ()

    def register(self, values: Iterable[str]) -> None:
        """Remember Secret values (and their base64 forms) to remove from any text."""
        new = set(self._values)
        for value in values:
            for form in (value, value.strip()):
                if len(form) >= MIN_SECRET_LENGTH:
                    new.add(form)
                    new.add(base64.b64encode(form.encode()).decode())
        with self._lock:
            self._values = tuple(sorted(new, key=len, reverse=True))

    def register_secret_data(self, data: dict[str, str] | None, *, encoded: bool) -> None:
        """Register the values of a Secret's `data` (base64) or `stringData`.

        User names are identifiers, not secrets (and often ordinary words): redacting them
        would mangle every message that names the user, so they are left out.
        """
        values = []
        for key, raw in (data or {}).items():
            if key.lower() in _NOT_SECRET_KEYS:
                continue
            if encoded:
                try:
                    values.append(base64.b64decode(raw).decode("utf-8", "replace"))
                except ValueError:
                    values.append(raw)
            else:
                values.append(raw)
        self.register(values)

    def scrub(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def scrub_any(self, value: Any) -> Any:
        """Scrub every string inside JSON-like data (dicts, lists)."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {k: self.scrub_any(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_any(v) for v in value]
        return value


SCRUBBER = Scrubber()


class ScrubbingFilter(logging.Filter):
    """Rewrites a record's message (and its traceback text) through the scrubber."""

    def __init__(self, scrubber: Scrubber = SCRUBBER) -> None:
        super().__init__()
        self.scrubber = scrubber

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep only the template
            message = str(record.msg)
        record.msg = self.scrubber.scrub(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrubber.scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self.scrubber.scrub(record.stack_info)
        return True


_FILTER = ScrubbingFilter()
# Loggers whose own handlers (not only the root's) must see scrubbed records: kopf's object
# logger feeds its Event poster directly.
_LOGGERS = ("kopf.objects", "kopf", "updatestream_operator", "kubernetes", "urllib3")


def install() -> None:
    """Scrub every record on the way to any handler of the root logger and kopf's loggers."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)
    for handler in logging.getLogger().handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
