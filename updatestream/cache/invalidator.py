"""The invalidation process of seed 000, batched and pipelined.

For every changed key, with the tokens of its changes in stream order, the invalidator reads the
entry (``gets``) and decides, change by change:

* no entry: store the change's token without a value (``add``): the key must not be populated
  with data older than this change;
* the cached token is strictly older (BEFORE): replace it by the change's token, dropping the
  value;
* the cached token is strictly newer (AFTER) or the same (EQUAL: this change was already
  applied, or the value was read exactly at it): keep the entry, drop the change;
* the order is UNKNOWN (same second, different streams; or tokens of different GTID flavours):
  invalidate with the change's token, the safe choice: at worst a key is invalidated twice.

The outcome is written only if the entry is still the one read: ``add`` fails if someone
added meanwhile, ``cas`` if someone changed it (an application populating it, another
invalidator). Those keys are read again and decided again, at most ``max_attempts`` times.

All keys of a batch are read with pipelined ``gets`` and written with pipelined ``add``/``cas``
commands, grouped per server, in chunks worked on by ``connections`` connections per server at
once (a batch of one chunk in the calling thread); the connections are kept between batches. An
invalidator made with ``flags`` (``FAST_LANE_FLAG``: the stream's fast lane) writes its entries
with those memcached flags. Token comparison is :func:`updatestream.core.token.compare`.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pymemcache.exceptions import MemcacheError

from updatestream.cache.entry import FAST_LANE_FLAG, Entry, EntryError, TokenCache, decode, encode
from updatestream.cache.transport import STORED, PipelinedClient, Servers, StoreOp
from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import Comparison, PositionError
from updatestream.core.token import compare

log = logging.getLogger(__name__)

# Given the token text of an entry the fast lane wrote: was that change delivered by a
# micro-batch already (then finding it again is a repeat)?
Delivered = Callable[[str], bool]


class CacheServerError(UpdateStreamError):
    """A memcached server could not be reached or answered wrongly; names the server."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server


class CacheConflictError(UpdateStreamError):
    """Keys kept changing under the invalidator for every attempt."""


@dataclass(frozen=True, slots=True)
class InvalidationReport:
    keys: int  # keys the batch touched
    changed: int  # keys written: added, or replaced by a newer or unordered token
    unchanged: int  # keys whose cached token was newer or equal: the changes were dropped
    conflicts: int  # writes lost to a concurrent writer and decided again
    repeats: int = 0  # changes a key already had from an invalidation (see `repeats`)


class Invalidator:
    """Applies batches of invalidations; ``connections`` per server work on chunks at once
    (while one waits for memcached, another decides), each pipelining its commands."""

    def __init__(
        self,
        servers: Sequence[str],
        *,
        max_attempts: int = 10,
        chunk: int = 1000,
        connections: int = 4,
        tokens: TokenCache | None = None,
        flags: int = 0,
    ) -> None:
        if connections < 1:
            raise ValueError(f"connections must be at least 1, got {connections}")
        self.servers = Servers(servers)
        self._spare: queue.SimpleQueue[Servers] = queue.SimpleQueue()
        self._spare.put(self.servers)
        self._others = [Servers(servers) for _ in range(connections - 1)]
        for other in self._others:
            self._spare.put(other)
        self._pool = ThreadPoolExecutor(connections, thread_name_prefix="invalidator")
        self.max_attempts = max_attempts
        self.chunk = chunk
        self.tokens = tokens or TokenCache()
        self.flags = flags

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for servers in [self.servers, *self._others]:
            servers.close()

    def replaces(self, cached_text: str, incoming_text: str) -> bool:
        """Does a change with token ``incoming_text`` replace an entry holding ``cached_text``?"""
        if cached_text == incoming_text:
            return False
        try:
            result = compare(self.tokens.get(cached_text), self.tokens.get(incoming_text))
        except PositionError:
            result = Comparison.UNKNOWN
        return result in (Comparison.BEFORE, Comparison.UNKNOWN)

    def repeats(
        self,
        key: str,
        found: tuple[bytes, bytes] | None,
        texts: Sequence[str],
        delivered: Delivered | None = None,
    ) -> int:
        """How many of ``texts`` the key already had from an invalidation: each compares EQUAL
        (same transaction, or the same source transaction by provenance) to the token of an
        entry without a value, or to an earlier change of this batch. An entry with a value was
        loaded by an application, which may have read exactly at a change: no repeat. An entry
        the fast lane wrote counts only when ``delivered`` says a micro-batch delivered its
        change already: otherwise it is this batch's own change, applied ahead of it."""
        seen: list[str] = []
        if found is not None:
            try:
                entry: Entry | None = decode(found[0], key)
            except EntryError:
                entry = None
            if entry is not None and entry.value is None and _had(found[0], entry, delivered):
                seen.append(entry.token_text)
        count = 0
        for text in texts:
            if any(self._same_change(earlier, text) for earlier in seen):
                count += 1
            else:
                seen.append(text)
        return count

    def _same_change(self, one: str, other: str) -> bool:
        if one == other:
            return True
        try:
            return compare(self.tokens.get(one), self.tokens.get(other)) is Comparison.EQUAL
        except PositionError:
            return False

    def _decide(
        self, key: str, found: tuple[bytes, bytes] | None, texts: Sequence[str]
    ) -> StoreOp | None:
        """The write that applies ``texts`` to the entry read, or None if nothing changes.

        An entry is rewritten only if its token changes, or if it holds a value and some
        change displaced its token on the way (then the value goes, whatever token ends up
        there): replaying a batch, with tokens already applied, writes nothing.
        """
        if found is None:
            state, _ = self._fold(texts[0], texts[1:])
            return (b"add", key, encode(state), None)
        raw, cas = found
        try:
            entry = decode(raw, key)
            self.tokens.get(entry.token_text)
        except EntryError as exc:
            log.warning("replacing an unreadable cache entry: %s", exc)
            state, _ = self._fold(texts[0], texts[1:])
            return (b"cas", key, encode(state), cas)
        state, moved = self._fold(entry.token_text, texts)
        if state == entry.token_text and (entry.value is None or not moved):
            return None
        return (b"cas", key, encode(state), cas)

    def _fold(self, state: str, texts: Sequence[str]) -> tuple[str, bool]:
        """The token after applying the changes in order, and whether any replaced one."""
        moved = False
        for text in texts:
            if self.replaces(state, text):
                state, moved = text, True
        return state, moved

    def invalidate(
        self, changes: Mapping[str, Sequence[str]], delivered: Delivered | None = None
    ) -> InvalidationReport:
        """Apply one batch: ``changes`` maps each key to its changes' token texts in order
        (``delivered``: see `repeats`)."""
        pending = {k: v for k, v in changes.items() if v}
        changed = unchanged = conflicts = repeats = 0
        for _attempt in range(self.max_attempts):
            if not pending:
                break
            retry: dict[str, Sequence[str]] = {}
            chunks = [
                (server, keys[start : start + self.chunk])
                for server, keys in self.servers.split(list(pending)).items()
                for start in range(0, len(keys), self.chunk)
            ]
            for done, lost, kept, repeated in self._rounds(chunks, pending, delivered):
                changed += done
                unchanged += kept
                repeats += repeated
                for key in lost:
                    retry[key] = pending[key]
            conflicts += len(retry)
            pending = retry
        if pending:
            sample = ", ".join(sorted(pending)[:3])
            raise CacheConflictError(
                f"{len(pending)} keys changed under the invalidator on each of "
                f"{self.max_attempts} attempts (e.g. {sample}); the batch is not acknowledged "
                "and will be retried"
            )
        return InvalidationReport(len(changes), changed, unchanged, conflicts, repeats)

    def _rounds(
        self,
        chunks: list[tuple[str, list[str]]],
        pending: Mapping[str, Sequence[str]],
        delivered: Delivered | None,
    ) -> Iterator[tuple[int, list[str], int, int]]:
        """Every chunk's round, at once on the pool; a lone chunk (the fast lane's transaction)
        in the calling thread: no hand-over to a pool thread and back on its way."""
        if len(chunks) == 1:
            ((server, part),) = chunks
            yield self._round(server, part, pending, delivered)
            return
        futures = [
            self._pool.submit(self._round, server, part, pending, delivered)
            for server, part in chunks
        ]
        for future in futures:
            yield future.result()

    def _round(
        self,
        server: str,
        keys: list[str],
        pending: Mapping[str, Sequence[str]],
        delivered: Delivered | None,
    ) -> tuple[int, list[str], int, int]:
        servers = self._spare.get()
        try:
            return self._round_on(servers.clients[server], server, keys, pending, delivered)
        finally:
            self._spare.put(servers)

    def _round_on(
        self,
        client: PipelinedClient,
        server: str,
        keys: list[str],
        pending: Mapping[str, Sequence[str]],
        delivered: Delivered | None,
    ) -> tuple[int, list[str], int, int]:
        """One read-decide-write round: (written, keys lost to a concurrent writer, kept,
        repeats among the keys decided for good)."""
        try:
            found = client.gets_many(keys)
            ops: list[StoreOp] = []
            kept = 0
            repeats: dict[str, int] = {}
            for key in keys:
                repeats[key] = self.repeats(key, found.get(key), pending[key], delivered)
                op = self._decide(key, found.get(key), pending[key])
                if op is None:
                    kept += 1
                else:
                    ops.append(op)
            replies = client.store_many(ops, flags=self.flags)
        except (OSError, MemcacheError) as exc:
            raise CacheServerError(
                server, f"memcached {server}: {type(exc).__name__}: {exc}"
            ) from None
        lost = [op[1] for op, reply in zip(ops, replies, strict=True) if reply != STORED]
        repeated = sum(repeats.values()) - sum(repeats[key] for key in lost)
        return len(ops) - len(lost), lost, kept, repeated


def _had(raw: bytes, entry: Entry, delivered: Delivered | None) -> bool:
    """Whether a token-only entry holds a change a micro-batch delivered: any entry but one
    the fast lane wrote, and that one when ``delivered`` says so."""
    if not getattr(raw, "flags", 0) & FAST_LANE_FLAG:
        return True
    return delivered is not None and delivered(entry.token_text)
