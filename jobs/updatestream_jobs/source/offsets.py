"""The source's offsets: per-shard Event Tokens, plus what a hop inside the query needs.

An offset is the JSON object Spark stores in the checkpoint for every micro-batch. Shard names
(key ranges such as `-80`) map to Event Tokens, as they always did; keys starting with `_` carry
the rest, so an offset written before hops existed still reads:

* `_map`: the keyspace's serving shard map these shards belong to (`-80,80-`);
* `_dedup`: the dedup rule for events read from here on (`DedupFilter.to_json()`), merged over
  every hop the stream made;
* `_hop`: the latest hop: its number, the maps and shards before and after, when the serving
  map changed and when the stream noticed, the watermarks, and where each destination shard
  starts. The batch whose end offset carries a new hop number is the hop batch: it reads each
  destination from its start token;
* `_recent`: per shard, the last transactions read of it with their rows' keyspace ids
  (`RecentTransactions`), up to its token: what a later hop needs to split a grouped copy
  that straddles its watermark;
* `_behind`: with `prefetchHeld` only, whose reader Spark does not ask for a latest offset: the
  shards whose tail had read past the offset's token when the offset was handed out, with the
  tail's position (how the job's lag tells a shard catching up from one caught up).

Because the hop lives in the offsets, a job killed during a hop replays the hop batch exactly
from its checkpoint, with the same starts and the same dedup rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from updatestream.binlog.errors import SourceOptionsError
from updatestream.core.dedup import DedupFilter, DedupFilterError
from updatestream.core.recent_rows import RecentRowsError, RecentTransactions
from updatestream.core.snapshot_plan import SnapshotRange, SnapshotState, SnapshotStateError
from updatestream.core.token import EventToken, TokenError

MAP_KEY = "_map"
DEDUP_KEY = "_dedup"
HOP_KEY = "_hop"
SNAPSHOT_KEY = "_snapshot"
RECENT_KEY = "_recent"
BEHIND_KEY = "_behind"


def is_shard_key(key: str) -> bool:
    return not key.startswith("_")


@dataclass(frozen=True)
class HopInfo:
    """One hop made inside the running query (see the module docstring)."""

    number: int
    from_map: str
    to_map: str
    from_shards: tuple[str, ...]
    to_shards: tuple[str, ...]
    detected_at: float
    serving_changed_at: float | None = None
    starts: Mapping[str, EventToken] = field(default_factory=dict)
    watermarks: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "fromMap": self.from_map,
            "toMap": self.to_map,
            "from": list(self.from_shards),
            "to": list(self.to_shards),
            "detectedAt": self.detected_at,
            "servingChangedAt": self.serving_changed_at,
            "starts": {shard: token.to_json() for shard, token in sorted(self.starts.items())},
            "watermarks": dict(sorted(self.watermarks.items())),
        }

    @classmethod
    def from_json(cls, data: Any) -> HopInfo:
        if not isinstance(data, Mapping):
            raise SourceOptionsError(f"offset field '_hop' must be an object, got {data!r}")
        try:
            changed = data.get("servingChangedAt")
            return cls(
                number=int(data["number"]),
                from_map=str(data["fromMap"]),
                to_map=str(data["toMap"]),
                from_shards=tuple(str(s) for s in data["from"]),
                to_shards=tuple(str(s) for s in data["to"]),
                detected_at=float(data["detectedAt"]),
                serving_changed_at=float(changed) if changed is not None else None,
                starts={str(s): EventToken.from_json(t) for s, t in dict(data["starts"]).items()},
                watermarks={str(s): str(p) for s, p in dict(data["watermarks"]).items()},
            )
        except (KeyError, TypeError, ValueError, TokenError) as exc:
            raise SourceOptionsError(
                f"offset field '_hop' is malformed ({exc}): {data!r}"
            ) from None


@dataclass(frozen=True)
class StreamOffset:
    tokens: Mapping[str, EventToken]
    shard_map: str | None = None
    dedup: DedupFilter | None = None
    hop: HopInfo | None = None
    snapshot: SnapshotState | None = None
    recent: Mapping[str, RecentTransactions] = field(default_factory=dict)
    behind: Mapping[str, EventToken] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {shard: token.to_json() for shard, token in self.tokens.items()}
        if self.shard_map is not None:
            data[MAP_KEY] = self.shard_map
        if self.dedup is not None and not self.dedup.is_empty():
            data[DEDUP_KEY] = self.dedup.to_json()
        if self.hop is not None:
            data[HOP_KEY] = self.hop.to_json()
        if self.snapshot is not None:
            data[SNAPSHOT_KEY] = self.snapshot.to_json()
        if self.recent:
            data[RECENT_KEY] = {shard: r.to_json() for shard, r in sorted(self.recent.items())}
        if self.behind:
            data[BEHIND_KEY] = {shard: t.to_json() for shard, t in sorted(self.behind.items())}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamOffset:
        if not isinstance(data, Mapping):
            raise SourceOptionsError(f"an offset must be a JSON object, got {data!r}")
        tokens = {}
        for key, value in data.items():
            if is_shard_key(key):
                try:
                    tokens[key] = EventToken.from_json(value)
                except TokenError as exc:
                    raise SourceOptionsError(f"offset of shard {key} is malformed: {exc}") from None
        raw_map = data.get(MAP_KEY)
        dedup = None
        if data.get(DEDUP_KEY):
            try:
                dedup = DedupFilter.from_json(data[DEDUP_KEY])
            except DedupFilterError as exc:
                raise SourceOptionsError(f"offset field '_dedup': {exc}") from None
        hop = HopInfo.from_json(data[HOP_KEY]) if data.get(HOP_KEY) else None
        snapshot = None
        if data.get(SNAPSHOT_KEY):
            try:
                snapshot = SnapshotState.from_json(data[SNAPSHOT_KEY])
            except SnapshotStateError as exc:
                raise SourceOptionsError(str(exc)) from None
        return cls(
            tokens,
            str(raw_map) if raw_map else None,
            dedup,
            hop,
            snapshot,
            _recent(data),
            _behind(data),
        )

    def holdback(self) -> tuple[SnapshotRange, ...] | None:
        """The unfinished snapshot ranges whose binlog events the batch after this offset
        drops (its snapshot reads those rows later, as they are then)."""
        if self.snapshot is None or self.snapshot.finished:
            return None
        return tuple(self.snapshot.pending())

    def new_hop(self, previous: StreamOffset) -> HopInfo | None:
        """The hop this offset ends, when the batch from `previous` to it is a hop batch."""
        if self.hop is None:
            return None
        if previous.hop is not None and previous.hop.number == self.hop.number:
            return None
        return self.hop


def tokens_of(offset: Mapping[str, Any]) -> dict[str, Any]:
    """The shard -> token JSON part of an offset (what progress reports show per shard)."""
    return {key: value for key, value in offset.items() if is_shard_key(key)}


def _recent(data: Mapping[str, Any]) -> dict[str, RecentTransactions]:
    raw = data.get(RECENT_KEY) or {}
    try:
        return {str(shard): RecentTransactions.from_json(entry) for shard, entry in raw.items()}
    except (RecentRowsError, AttributeError) as exc:
        raise SourceOptionsError(f"offset field '_recent' is malformed: {exc}") from None


def _behind(data: Mapping[str, Any]) -> dict[str, EventToken]:
    raw = data.get(BEHIND_KEY) or {}
    try:
        return {str(shard): EventToken.from_json(token) for shard, token in raw.items()}
    except (TokenError, AttributeError) as exc:
        raise SourceOptionsError(f"offset field '_behind' is malformed: {exc}") from None
