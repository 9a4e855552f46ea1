"""The dedup rule applied to events read after a hop.

After a hop, destination shards are read from the minimum of their sources' last delivered
timestamps, so the first events read from them may copy source transactions that were already
delivered. A :class:`DedupFilter` holds what it takes to tell, per event:

* ``watermarks``: source shard -> the source's last delivered GTID position. An event whose
  provenance comes from that source and is at or below the watermark is a hop duplicate: it is
  dropped and counted, never delivered.
* ``overlap_until``: destination shard -> the last second that may repeat something already
  delivered (the latest last-delivered timestamp among its sources). An event *without*
  provenance in that window cannot be decided; it is delivered (sinks are idempotent per
  event) and counted.
* ``recent``: source shard -> the transactions the stream read last of it
  (`RecentTransactions`). Filtered replication may copy several source transactions in one
  destination transaction (its provenance then says where the group began, `covered_from`);
  a group that straddles the watermark has a delivered prefix, whose rows these records count
  (`STRADDLE`, resolved per row by the reader, `updatestream_jobs.source.copy_groups`; without
  a record that reaches back, the group is delivered and counted).
* A copy made by reverse replication (after a switch, from the new shards back into the old
  ones) of a shard the stream has not read yet is dropped (`DUPLICATE_REVERSE`): the stream
  reads that shard itself once it hops there. A watermark that has no transaction in common
  with the copy's source position is of an earlier shard of the same name (a shard name comes
  back when a split is merged and split again): it counts as no watermark.

The filter is a small immutable value: it pickles and has a JSON form, because it is stored in
Spark offsets and in the UpdateStream status.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import (
    GTIDParseError,
    GTIDPosition,
    MariaDBPosition,
    MySQLGTIDSet,
    position_contains,
    position_from_json,
    position_intersection,
    position_to_json,
)
from updatestream.core.hop_plan import HopPlan, canonical_shard_name
from updatestream.core.recent_rows import RecentRowsError, RecentTransactions
from updatestream.core.token import EventToken, SourceProvenance

__all__ = ["DedupFilter", "DedupFilterError", "DedupVerdict"]


class DedupVerdict(Enum):
    """What to do with one event read after a hop."""

    DELIVER = "deliver"
    DUPLICATE_HOP = "hop"  # a copy of a source transaction already delivered: drop and count
    OVERLAP_UNKNOWN = "unknown"  # no provenance inside an overlap window: deliver and count
    DUPLICATE_REVERSE = "reverse"  # a reverse copy of a shard the stream reads later: drop, count
    STRADDLE = "straddle"  # a group across the watermark: its delivered prefix is resolved per row


# the verdicts (as the source marks rows) whose events no sink receives: dropped and counted
DROPPED_VERDICTS = frozenset(
    {DedupVerdict.DUPLICATE_HOP.value, DedupVerdict.DUPLICATE_REVERSE.value}
)


class DedupFilterError(UpdateStreamError):
    """A dedup filter (or its JSON form) is malformed; the message names the field."""


class DedupFilter:
    """Classifies events after one or more hops; see the module docstring for the rule."""

    __slots__ = ("_overlap_until", "_recent", "_watermarks")

    def __init__(
        self,
        watermarks: Mapping[str, GTIDPosition],
        overlap_until: Mapping[str, int] | None = None,
        recent: Mapping[str, RecentTransactions] | None = None,
    ) -> None:
        marks: dict[str, GTIDPosition] = {}
        for shard, position in watermarks.items():
            if not isinstance(position, MariaDBPosition | MySQLGTIDSet):
                raise DedupFilterError(
                    f"watermark of source shard {shard!r} must be a GTID position, got "
                    f"{position!r}; build it with parse_position()"
                )
            marks[canonical_shard_name(shard)] = position
        until: dict[str, int] = {}
        for shard, ts in (overlap_until or {}).items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise DedupFilterError(
                    f"overlap_until of shard {shard!r} must be a non-negative integer "
                    f"(seconds since the epoch), got {ts!r}"
                )
            until[canonical_shard_name(shard)] = ts
        self._watermarks: Mapping[str, GTIDPosition] = MappingProxyType(dict(sorted(marks.items())))
        self._overlap_until: Mapping[str, int] = MappingProxyType(dict(sorted(until.items())))
        kept = {canonical_shard_name(shard): found for shard, found in (recent or {}).items()}
        self._recent: Mapping[str, RecentTransactions] = MappingProxyType(
            dict(sorted(kept.items()))
        )

    @classmethod
    def from_plan(
        cls, plan: HopPlan, recent: Mapping[str, RecentTransactions] | None = None
    ) -> DedupFilter:
        """The filter for the events read after ``plan``'s hop; ``recent`` (per shard) what
        the stream read last of the sources."""
        kept = {s: r for s, r in (recent or {}).items() if s in plan.watermarks}
        return cls(plan.watermarks, plan.overlap_until(), kept)

    @property
    def recent(self) -> Mapping[str, RecentTransactions]:
        return self._recent

    @property
    def watermarks(self) -> Mapping[str, GTIDPosition]:
        return self._watermarks

    @property
    def overlap_until(self) -> Mapping[str, int]:
        return self._overlap_until

    def is_empty(self) -> bool:
        """True when the filter holds no hop (only its reverse-copy rule applies)."""
        return not self._watermarks and not self._overlap_until

    def classify(self, token: EventToken) -> DedupVerdict:
        """The verdict for the events of the transaction with ``token``:

        * Provenance from a watermarked source: DUPLICATE_HOP when the watermark holds the
          copied transactions, STRADDLE when it holds only the first of a group, else DELIVER.
        * A reverse copy of a shard without a watermark: DUPLICATE_REVERSE.
        * Any other provenance: DELIVER.
        * No provenance, read from a shard with an overlap window, at or before its end:
          OVERLAP_UNKNOWN. Otherwise DELIVER.

        Comparing positions of different flavours raises PositionError.
        """
        if token.source is not None:
            return self._classify_copy(token.source)
        until = self._overlap_until.get(canonical_shard_name(token.shard))
        if until is not None and token.timestamp <= until:
            return DedupVerdict.OVERLAP_UNKNOWN
        return DedupVerdict.DELIVER

    def _classify_copy(self, source: SourceProvenance) -> DedupVerdict:
        unread = DedupVerdict.DUPLICATE_REVERSE if source.reverse else DedupVerdict.DELIVER
        watermark = self._watermarks.get(canonical_shard_name(source.shard))
        if watermark is None:
            return unread
        if position_contains(watermark, source.position):
            return DedupVerdict.DUPLICATE_HOP
        delivered = position_intersection(watermark, source.position)
        if delivered.is_empty():
            # Not one transaction in common: the watermark is of an earlier shard of that name
            # (another server's GTIDs, a reshard ago); of this one the stream read nothing.
            return unread
        if source.covered_from is None:
            return DedupVerdict.DELIVER
        if position_contains(source.covered_from, delivered):
            return DedupVerdict.DELIVER
        return DedupVerdict.STRADDLE

    def merged(self, other: DedupFilter) -> DedupFilter:
        """This filter followed by ``other``, the filter of a later hop.

        Entries are keyed by shard name; where both name a shard, ``other`` wins, because a
        shard name that comes back in a later hop is a different shard with its own history.
        """
        return DedupFilter(
            {**self._watermarks, **other._watermarks},
            {**self._overlap_until, **other._overlap_until},
            {**self._recent, **other._recent},
        )

    def to_json(self) -> dict[str, object]:
        """``{"watermarks": {shard: {"pos", "flavor"}}, "overlap_until": {shard: ts}}`` and,
        when there are any, ``"recent": {shard: RecentTransactions.to_json()}``."""
        data: dict[str, object] = {
            "watermarks": {
                shard: position_to_json(position) for shard, position in self._watermarks.items()
            },
            "overlap_until": dict(self._overlap_until),
        }
        if self._recent:
            data["recent"] = {shard: found.to_json() for shard, found in self._recent.items()}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> DedupFilter:
        """Inverse of :meth:`to_json`; raises DedupFilterError naming the bad field."""
        if not isinstance(data, Mapping):
            raise DedupFilterError(f"dedup filter JSON must be an object, got {data!r}")
        marks: dict[str, GTIDPosition] = {}
        for shard, entry in _object(data.get("watermarks", {}), "watermarks").items():
            name = f"watermarks.{shard}"
            marks[str(shard)] = _position(_object(entry, name, "with 'pos' and 'flavor'"), name)
        until: dict[str, int] = {}
        for shard, ts in _object(data.get("overlap_until", {}), "overlap_until").items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise DedupFilterError(
                    f"dedup filter field 'overlap_until.{shard}' must be a non-negative "
                    f"integer (seconds since the epoch), got {ts!r}"
                )
            until[str(shard)] = ts
        return cls(marks, until, _recent_of(data.get("recent", {})))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DedupFilter):
            return NotImplemented
        return (
            self._watermarks == other._watermarks
            and self._overlap_until == other._overlap_until
            and self._recent == other._recent
        )

    def __hash__(self) -> int:
        return hash((tuple(self._watermarks.items()), tuple(self._overlap_until.items())))

    def __repr__(self) -> str:
        marks = {shard: str(position) for shard, position in self._watermarks.items()}
        return f"DedupFilter(watermarks={marks!r}, overlap_until={dict(self._overlap_until)!r})"

    def __reduce__(
        self,
    ) -> tuple[
        type[DedupFilter],
        tuple[dict[str, GTIDPosition], dict[str, int], dict[str, RecentTransactions]],
    ]:
        return (
            DedupFilter,
            (dict(self._watermarks), dict(self._overlap_until), dict(self._recent)),
        )


def _object(value: object, name: str, holding: str = "") -> Mapping[object, object]:
    """`value`, the dedup filter's field `name`, which must be a JSON object."""
    if not isinstance(value, Mapping):
        what = f"an object {holding}" if holding else "an object"
        raise DedupFilterError(f"dedup filter field {name!r} must be {what}, got {value!r}")
    return value


def _position(entry: Mapping[object, object], name: str) -> GTIDPosition:
    if entry.get("flavor") is None:  # written by to_json always; an empty position needs it
        raise DedupFilterError(
            f"dedup filter field {name + '.flavor'!r} must be 'mariadb' or 'mysql', got None"
        )
    try:
        return position_from_json({str(k): v for k, v in entry.items()}, name + ".")
    except GTIDParseError as exc:
        raise DedupFilterError(f"dedup filter {exc}") from None


def _recent_of(raw: object) -> dict[str, RecentTransactions]:
    if not isinstance(raw, Mapping):
        raise DedupFilterError(f"dedup filter field 'recent' must be an object, got {raw!r}")
    try:
        return {str(shard): RecentTransactions.from_json(entry) for shard, entry in raw.items()}
    except RecentRowsError as exc:
        raise DedupFilterError(f"dedup filter field 'recent': {exc}") from None
