"""memcached connections: which server holds a key, and pipelined conditional stores.

Keys are spread over servers by rendezvous hashing (pymemcache's ``RendezvousHash`` over the
``host:port`` names), the same in the invalidator and in the application client.

pymemcache has pipelined reads (``gets_many``) but sends one conditional store per round trip.
:class:`PipelinedClient` adds :meth:`~PipelinedClient.store_many`: a run of ``add`` / ``cas``
commands, each with its own CAS unique, written at once and answered in order. It reuses
pymemcache's connection handling and line reader; pymemcache is pinned in requirements.lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymemcache.client.base import Client, _readline
from pymemcache.client.rendezvous import RendezvousHash
from pymemcache.exceptions import MemcacheUnexpectedCloseError, MemcacheUnknownError

from updatestream.core.errors import UpdateStreamError

# (command, key, value, cas unique or None)
StoreOp = tuple[bytes, str, bytes, bytes | None]
STORED = b"STORED"
RESULTS = {b"STORED", b"NOT_STORED", b"EXISTS", b"NOT_FOUND"}
# How every connection of ours talks to memcached, the invalidator's and the application's:
# no Nagle delay, every reply awaited (conditional stores need them), keys as text.
CLIENT_OPTIONS: dict[str, Any] = {
    "no_delay": True,
    "default_noreply": False,
    "allow_unicode_keys": True,
}


class CacheAddressError(UpdateStreamError):
    """A memcached server address is not host:port."""


def parse_server(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CacheAddressError(
            f"memcached server {text!r} must be host:port, e.g. 127.0.0.1:11211"
        )
    return host, int(port)


class PipelinedClient(Client):  # type: ignore[misc]
    """A pymemcache client (bytes in, bytes out) with pipelined conditional stores."""

    def __init__(self, server: str, *, timeout: float = 5.0, connect_timeout: float = 2.0) -> None:
        super().__init__(
            parse_server(server), connect_timeout=connect_timeout, timeout=timeout, **CLIENT_OPTIONS
        )
        self.address = server

    def store_many(self, ops: Sequence[StoreOp], expire: int = 0) -> list[bytes]:
        """Send every op, then read one reply per op: STORED, NOT_STORED, EXISTS, NOT_FOUND."""
        if not ops:
            return []
        parts: list[bytes] = []
        exp = str(expire).encode()
        for command, key, value, cas in ops:
            name = self.check_key(key, self.key_prefix)
            line = b"%s %s 0 %s %d" % (command, name, exp, len(value))
            if cas is not None:
                line += b" " + cas
            parts += [line, b"\r\n", value, b"\r\n"]
        if self.sock is None:
            self._connect()
        try:
            self.sock.sendall(b"".join(parts))
            replies: list[bytes] = []
            buf = b""
            for _ in ops:
                buf, line = _readline(self.sock, buf)
                self._raise_errors(line, ops[0][0])
                if line not in RESULTS:
                    raise MemcacheUnknownError(line[:32])
                replies.append(line)
            return replies
        except (MemcacheUnexpectedCloseError, Exception):
            self.close()
            raise


class Servers:
    """Routes keys to servers; one :class:`PipelinedClient` per server (not thread safe)."""

    def __init__(self, servers: Sequence[str], **client_args: Any) -> None:
        if not servers:
            raise CacheAddressError("at least one memcached server (host:port) is needed")
        for server in servers:
            parse_server(server)
        self.names = list(servers)
        self._hash = RendezvousHash(nodes=list(servers))
        self.clients = {s: PipelinedClient(s, **client_args) for s in servers}

    def server_of(self, key: str) -> str:
        if len(self.names) == 1:
            return self.names[0]
        return str(self._hash.get_node(key))

    def split(self, keys: Sequence[str]) -> dict[str, list[str]]:
        by_server: dict[str, list[str]] = {}
        for key in keys:
            by_server.setdefault(self.server_of(key), []).append(key)
        return by_server

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
