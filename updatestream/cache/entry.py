"""Cache entries: an Event Token and, optionally, a value.

The token says either which change last invalidated the entry or how fresh the value is (the
position the value was read at). An entry is stored in memcached as bytes::

    b"T" <token>                     token only: the value must be loaded again
    b"V" <token> b"\\n" <value>       token and value (value bytes as the application encodes)

``<token>`` is ``EventToken.dumps()``: compact JSON, which never contains a newline.
Applications do not need the memcached flags: any client that can read bytes can read entries.
The stream sets one flag bit, ``FAST_LANE_FLAG``, on the token-only entries its fast lane writes
(an invalidation applied as soon as the stream's binlog tail holds the change, ahead of the
micro-batch that records it): the micro-batch then knows that finding its own change there is
no duplicate. Writes by applications and by the micro-batch carry no flag.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock

from updatestream.core.errors import UpdateStreamError
from updatestream.core.token import EventToken, TokenError

TOKEN_ONLY = b"T"
WITH_VALUE = b"V"
# memcached flags bit of an entry written by the stream's fast lane; a bit no common client
# serializer uses (pymemcache's use bits 0-4), so their deserializers return the bytes as they are
FAST_LANE_FLAG = 1 << 16


class EntryError(UpdateStreamError):
    """Bytes in the cache are not an entry of this format."""


@dataclass(frozen=True, slots=True)
class Entry:
    token_text: str
    value: bytes | None  # None: token only

    def encode(self) -> bytes:
        return encode(self.token_text, self.value)


def encode(token_text: str, value: bytes | None = None) -> bytes:
    if value is None:
        return TOKEN_ONLY + token_text.encode("utf-8")
    return WITH_VALUE + token_text.encode("utf-8") + b"\n" + value


def decode(raw: bytes, key: str = "?") -> Entry:
    kind = raw[:1]
    if kind == TOKEN_ONLY:
        return Entry(raw[1:].decode("utf-8"), None)
    if kind == WITH_VALUE:
        token, sep, value = raw[1:].partition(b"\n")
        if sep:
            return Entry(token.decode("utf-8"), value)
    raise EntryError(
        f"cache key {key!r} holds {raw[:40]!r}, which is not an UpdateStream cache entry "
        "(b'T<token>' or b'V<token>\\n<value>'); another application writes the same key"
    )


class TokenCache:
    """Parsed Event Tokens by their text (parsing costs more than comparing)."""

    def __init__(self, size: int = 100_000) -> None:
        self.size = size
        self._tokens: OrderedDict[str, EventToken] = OrderedDict()
        self._lock = Lock()

    def get(self, text: str) -> EventToken:
        with self._lock:
            token = self._tokens.get(text)
        if token is None:
            try:
                token = EventToken.loads(text)
            except TokenError as exc:
                raise EntryError(f"cache entry holds an unreadable Event Token: {exc}") from None
            with self._lock:
                self._tokens[text] = token
                if len(self._tokens) > self.size:
                    self._tokens.popitem(last=False)
        return token
