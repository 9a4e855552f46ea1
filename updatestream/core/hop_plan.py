"""Hop planning: moving a stream from the old serving shards to the new ones.

When a keyspace's serving shard map changes (a split, a merge or both at once), a stream over
``key_range`` stops reading the retired shards and starts reading the new ones. Following seed
000, each new (destination) shard starts at the minimum, over the old (source) shards it takes
keyspace ids from, of the timestamp of the last event delivered from that source: nothing is
lost, and the events in the overlap are either copies of source transactions already delivered
(their provenance is at or below the source's last delivered position: the *watermark*) or
new.

A plan is about one hop only: shard names may come back in a later hop (a split then a merge
back creates a new ``-80``), so names here always mean the shards of ``old`` and ``new``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import GTIDPosition, position_contains
from updatestream.core.keyrange import FULL_RANGE, InvalidKeyRange, KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken

__all__ = [
    "DestinationStart",
    "HopPlan",
    "HopPlanningError",
    "canonical_shard_name",
    "plan_hop",
]


class HopPlanningError(UpdateStreamError):
    """A hop cannot be planned from what is known (e.g. a source shard without a position)."""


@dataclass(frozen=True)
class DestinationStart:
    """Where a stream starts reading a new shard: from ``start_timestamp`` (seconds).

    ``sources`` are the old shards whose keyspace ids (within the stream's key range) the
    destination took over, in key order.
    """

    shard: str
    start_timestamp: int
    sources: tuple[str, ...]


@dataclass(frozen=True)
class HopPlan:
    """The result of :func:`plan_hop` for one stream and one shard map change.

    * ``destinations``: every new shard that is not in ``old`` and intersects ``key_range``.
    * ``watermarks``: source shard -> its last delivered position (``token.position``).
      An event copied from that source at or below it was already delivered: a duplicate.
    * ``unchanged``: shards serving in both maps that intersect ``key_range``; the stream keeps
      reading them from their own tokens.
    * ``retired``: old shards intersecting ``key_range`` that no longer serve; stop reading them.
    * ``source_timestamps``: source shard -> timestamp of its last delivered event.
    """

    old: ShardMap
    new: ShardMap
    destinations: Mapping[str, DestinationStart]
    watermarks: Mapping[str, GTIDPosition]
    unchanged: tuple[str, ...]
    retired: tuple[str, ...]
    key_range: KeyRange = FULL_RANGE
    source_timestamps: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("destinations", "watermarks", "source_timestamps"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def __reduce__(self) -> tuple[type[HopPlan], tuple[object, ...]]:
        # MappingProxyType does not pickle; rebuild from plain dicts (Spark ships plans to tasks).
        return (
            HopPlan,
            (
                self.old,
                self.new,
                dict(self.destinations),
                dict(self.watermarks),
                self.unchanged,
                self.retired,
                self.key_range,
                dict(self.source_timestamps),
            ),
        )

    @property
    def is_noop(self) -> bool:
        """True when the stream's shards did not change (nothing to hop)."""
        return not self.destinations and not self.retired

    def overlap_until(self) -> dict[str, int]:
        """Destination -> the latest last-delivered timestamp among its sources.

        Events read from a destination up to that second may repeat something already
        delivered from a source; with provenance that is decided exactly (``is_duplicate``),
        without it the event can only be counted as an overlap.
        """
        return {
            name: max(self.source_timestamps[source] for source in start.sources)
            for name, start in self.destinations.items()
            if all(source in self.source_timestamps for source in start.sources)
        }

    def is_duplicate(self, token: EventToken) -> bool:
        """True when ``token`` copies a source transaction at or below that source's watermark.

        Only provenance decides: a token without provenance, or with provenance from a shard
        that is not a source of this hop, is not a hop duplicate.
        """
        if token.source is None:
            return False
        watermark = self.watermarks.get(canonical_shard_name(token.source.shard))
        return watermark is not None and position_contains(watermark, token.source.position)


def canonical_shard_name(name: str) -> str:
    """The canonical Vitess spelling of a shard name (``00-80`` -> ``-80``), else the name."""
    try:
        return KeyRange.parse(name).name
    except InvalidKeyRange:
        return name


def _tokens_by_shard(last_delivered: Mapping[str, EventToken]) -> dict[str, EventToken]:
    tokens: dict[str, EventToken] = {}
    for name, token in last_delivered.items():
        try:
            key = KeyRange.parse(name).name
        except InvalidKeyRange as exc:
            raise HopPlanningError(
                f"last delivered positions are keyed by shard name; {name!r} is not one ({exc})"
            ) from None
        if canonical_shard_name(token.shard) != key:
            raise HopPlanningError(
                f"the last delivered Event Token recorded for shard {key} was read from shard "
                f"{token.shard!r}; record each shard's own last delivered token under its name"
            )
        if key in tokens:
            raise HopPlanningError(
                f"shard {key} has two last delivered Event Tokens ({name!r} and another "
                "spelling of the same shard); keep one per shard"
            )
        tokens[key] = token
    return tokens


def _source_token(
    tokens: Mapping[str, EventToken],
    source: str,
    destination: str,
    old: ShardMap,
    new: ShardMap,
    key_range: KeyRange,
) -> EventToken:
    token = tokens.get(source)
    if token is None:
        raise HopPlanningError(
            f"cannot plan the hop of key range {key_range} from {old} to {new}: no last "
            f"delivered Event Token for source shard {source}, which hands keyspace ids to "
            f"{destination}; record the stream's last delivered token for {source} (or the "
            "token it started from) before hopping"
        )
    return token


def plan_hop(
    old: ShardMap,
    new: ShardMap,
    last_delivered: Mapping[str, EventToken],
    key_range: KeyRange = FULL_RANGE,
) -> HopPlan:
    """Plan the hop of a stream over ``key_range`` from shard map ``old`` to ``new``.

    ``last_delivered`` maps each old shard the stream reads to the Event Token of the last
    event delivered from it (the token it started from if nothing was delivered yet). Every
    old shard that hands keyspace ids of ``key_range`` to a new shard needs one, otherwise
    :class:`HopPlanningError` names the shard. Tokens of shards the hop does not touch are
    ignored. A destination starts at the minimum of its sources' last delivered timestamps.
    """
    tokens = _tokens_by_shard(last_delivered)
    old_shards = old.shards_for(key_range)
    new_shards = new.shards_for(key_range)
    old_set = set(old.shards)
    new_set = set(new.shards)

    unchanged = tuple(shard.name for shard in new_shards if shard in old_set)
    retired = tuple(shard.name for shard in old_shards if shard not in new_set)

    destinations: dict[str, DestinationStart] = {}
    watermarks: dict[str, GTIDPosition] = {}
    source_timestamps: dict[str, int] = {}
    for shard in new_shards:
        if shard in old_set:
            continue
        wanted = shard.intersection(key_range)
        if wanted is None:  # pragma: no cover - shards_for only returns intersecting shards
            continue
        sources = old.shards_for(wanted)
        for source in sources:
            token = _source_token(tokens, source.name, shard.name, old, new, key_range)
            # The watermark is the source shard's own position, even if the token itself
            # carries provenance (the stream was already on a former destination).
            watermarks[source.name] = token.position
            source_timestamps[source.name] = token.timestamp
        destinations[shard.name] = DestinationStart(
            shard=shard.name,
            start_timestamp=min(source_timestamps[source.name] for source in sources),
            sources=tuple(source.name for source in sources),
        )
    return HopPlan(
        old=old,
        new=new,
        destinations=destinations,
        watermarks=watermarks,
        unchanged=unchanged,
        retired=retired,
        key_range=key_range,
        source_timestamps=source_timestamps,
    )
