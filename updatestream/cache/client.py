"""The application side of cache invalidation: read through the cache without poisoning it.

:meth:`CacheClient.get` returns the cached value when the entry has one. Otherwise it calls the
application's loader, which reads the data together with the position it was read at, and
returns ``(value, EventToken)``; the value is stored only when it is known to be at least as
fresh as the entry says it must be:

* no entry: ``add`` the value with the loaded token (if an invalidation added an entry in the
  meantime, ``add`` fails and the value is simply not cached);
* an entry with a token only (invalidated): ``cas`` the value in if ``compare(loaded, cached)``
  is AFTER, or EQUAL (the data was read exactly at the invalidating change, so it includes
  it); otherwise the value is returned without caching it. If the entry changed since it was
  read, ``cas`` fails and nothing is stored.

The loader receives the cached token (or None) so that it can stamp its token tightly; see
:class:`updatestream.cache.loader.SnapshotReader`, which reads the row and the shard's GTID
position in one consistent snapshot.

**Where this is exact.** When the loaded token is from the same shard as the cached one, the
decision is made on GTID positions: the value is stored only if its snapshot contains the
invalidating transaction. Tokens related by filtered-replication provenance are compared exactly
as well (``compare`` rule 1).

**Where it is conservative.** Otherwise (no entry, or the cached token was read from another
shard, e.g. before a resharding) the loader's token carries a timestamp ``slack`` seconds before
the read, so a later change of the same row is ordered after it as long as no transaction takes
longer than ``slack`` seconds between its first statement and its commit (MariaDB stamps
transactions with the start of their statements). Within a shard the Event Token order also
assumes that binlog timestamps do not go backwards (seed 000's order); a shard merged from two
sources by filtered replication can break that, which at worst keeps an invalidation from being
applied while an entry holds a token-only placeholder for the same second. Entries never expire
on their own: give memcached a bounded size (LRU) or delete keys to bound staleness further.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from threading import Lock
from typing import Any, Generic, TypeVar

from pymemcache.client.base import PooledClient
from pymemcache.client.rendezvous import RendezvousHash

from updatestream.cache.entry import Entry, TokenCache, decode, encode
from updatestream.cache.transport import CLIENT_OPTIONS, parse_server
from updatestream.core.gtid import Comparison, PositionError
from updatestream.core.token import EventToken, compare

V = TypeVar("V")
Loader = Callable[[EventToken | None], tuple[V, EventToken]]

__all__ = ["CacheClient", "CacheStats", "Loader"]


def _json_encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _json_decode(raw: bytes) -> Any:
    return json.loads(raw)


@dataclass
class CacheStats:
    hits: int = 0  # values served from the cache
    loads: int = 0  # loader calls
    stored: int = 0  # loaded values stored
    not_fresh: int = 0  # loaded values not stored: not known to be fresher than the entry
    lost_races: int = 0  # add/cas refused because the entry changed meanwhile


class CacheClient(Generic[V]):
    """Thread-safe read-through cache client over one or more memcached servers."""

    def __init__(
        self,
        servers: Sequence[str],
        *,
        encode_value: Callable[[V], bytes] = _json_encode,
        decode_value: Callable[[bytes], V] = _json_decode,
        pool_size: int = 16,
        timeout: float = 5.0,
    ) -> None:
        self._names = list(servers)
        self._hash = RendezvousHash(nodes=list(servers))
        self._clients = {
            s: PooledClient(
                parse_server(s),
                max_pool_size=pool_size,
                connect_timeout=timeout,
                timeout=timeout,
                **CLIENT_OPTIONS,
            )
            for s in servers
        }
        self._encode = encode_value
        self._decode = decode_value
        self._tokens = TokenCache()
        self._lock = Lock()
        self.stats = CacheStats()

    def _client(self, key: str) -> PooledClient:
        name = self._names[0] if len(self._names) == 1 else str(self._hash.get_node(key))
        return self._clients[name]

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    def lookup(self, key: str) -> tuple[EventToken, V | None, bool] | None:
        """The entry of ``key``: (token, value, has value), None if there is none."""
        raw, _ = self._client(key).gets(key)
        if raw is None:
            return None
        entry = decode(raw, key)
        value = None if entry.value is None else self._decode(entry.value)
        return self._tokens.get(entry.token_text), value, entry.value is not None

    def get(self, key: str, loader: Loader[V]) -> V:
        """The value of ``key``, read through ``loader`` on a miss (see the module docstring)."""
        client = self._client(key)
        raw, cas = client.gets(key)
        entry: Entry | None = None if raw is None else decode(raw, key)
        if entry is not None and entry.value is not None:
            self._count("hits")
            return self._decode(entry.value)
        cached = None if entry is None else self._tokens.get(entry.token_text)
        value, token = loader(cached)
        self._count("loads")
        stored_bytes = encode(token.dumps(), self._encode(value))
        if cached is None:
            ok = client.add(key, stored_bytes, noreply=False)
        elif self._fresh(token, cached):
            ok = client.cas(key, stored_bytes, cas, noreply=False)
        else:
            self._count("not_fresh")
            return value
        self._count("stored" if ok else "lost_races")
        return value

    @staticmethod
    def _fresh(loaded: EventToken, cached: EventToken) -> bool:
        try:
            result = compare(loaded, cached)
        except PositionError:
            return False
        return result in (Comparison.AFTER, Comparison.EQUAL)

    def delete(self, key: str) -> None:
        self._client(key).delete(key, noreply=False)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
