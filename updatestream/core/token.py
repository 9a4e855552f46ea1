"""Event Tokens: where in which shard's replication stream a change was read.

An :class:`EventToken` is (timestamp, shard, GTID position), optionally extended with the
:class:`SourceProvenance` of a filtered-replication transaction: the source shard, its GTID
position after the copied transaction and the source timestamp. Tokens are compared with
:func:`compare`, which returns a :class:`Comparison`; the order is partial, so tokens have no
``<``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import (
    Comparison,
    Flavor,
    GTIDParseError,
    GTIDPosition,
    MariaDBPosition,
    MySQLGTIDSet,
    compare_positions,
    position_from_json,
    position_to_json,
)

__all__ = [
    "Comparison",
    "EventToken",
    "SourceProvenance",
    "TokenError",
    "compare",
]


class TokenError(UpdateStreamError):
    """An Event Token (or its JSON form) is malformed; the message names the field."""


def _check_fields(kind: str, shard: object, position: object, timestamp: object) -> None:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise TokenError(
            f"{kind} timestamp must be a non-negative integer (seconds since the epoch), "
            f"got {timestamp!r}"
        )
    if not isinstance(shard, str) or not shard:
        raise TokenError(
            f"{kind} shard must be a non-empty shard name such as '-80', got {shard!r}"
        )
    if not isinstance(position, MariaDBPosition | MySQLGTIDSet):
        raise TokenError(
            f"{kind} position must be a MariaDBPosition or MySQLGTIDSet, got {position!r}; "
            "build it with parse_position()"
        )


@dataclass(frozen=True)
class SourceProvenance:
    """The source-shard transactions that a filtered-replication transaction copies.

    ``position`` is the source shard's GTID position after the (last) copied transaction (the
    ``pos`` filtered replication records) and ``timestamp`` its source timestamp. Filtered
    replication may group several source transactions into one destination transaction:
    ``covered_from`` is then the source position before the first of them (the copied
    transactions are those in ``position`` and not in ``covered_from``); None when the copy names
    one transaction only. ``reverse`` marks a copy made by reverse replication (after a switch,
    from the new shards back into the old ones).
    """

    shard: str
    position: GTIDPosition
    timestamp: int
    covered_from: GTIDPosition | None = None
    reverse: bool = False

    def __post_init__(self) -> None:
        _check_fields("source provenance", self.shard, self.position, self.timestamp)
        if self.covered_from is not None and not isinstance(
            self.covered_from, MariaDBPosition | MySQLGTIDSet
        ):
            raise TokenError(
                f"source provenance covered_from must be a GTID position, got {self.covered_from!r}"
            )

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "shard": self.shard, "ts": self.timestamp, **position_to_json(self.position)
        }  # fmt: skip
        if self.covered_from is not None:
            data["from"] = str(self.covered_from)
        if self.reverse:
            data["reverse"] = True
        return data

    @classmethod
    def from_json(
        cls, data: Mapping[str, object], *, default_flavor: Flavor | None = None
    ) -> SourceProvenance:
        """Read the form written by :meth:`to_json`; ``flavor`` defaults to ``default_flavor``."""
        position = _position_field(data, "source.", default_flavor)
        covered = data.get("from")
        if covered is not None and not isinstance(covered, str):
            raise TokenError(
                f"Event Token field 'source.from' must be position text, got {covered!r}"
            )
        return cls(
            shard=_str_field(data, "shard", "source.shard"),
            position=position,
            timestamp=_ts_field(data, "source.ts"),
            covered_from=(
                _position_field({"pos": covered}, "source.from.", position.flavor)
                if covered is not None
                else None
            ),
            reverse=bool(data.get("reverse", False)),
        )


@dataclass(frozen=True)
class EventToken:
    """A position in one shard's replication stream, as of one transaction.

    * ``timestamp``: seconds since the epoch of the transaction; for a filtered-replication
      transaction this is the source shard's timestamp (seed 000).
    * ``shard``: the shard (key range text) the event was read from.
    * ``position``: that shard's GTID position after this transaction.
    * ``source``: for a filtered-replication transaction, the source transaction it copies.
    """

    timestamp: int
    shard: str
    position: GTIDPosition
    source: SourceProvenance | None = None

    def __post_init__(self) -> None:
        _check_fields("Event Token", self.shard, self.position, self.timestamp)
        if self.source is not None and not isinstance(self.source, SourceProvenance):
            raise TokenError(
                f"Event Token source must be a SourceProvenance or None, got {self.source!r}"
            )

    @property
    def flavor(self) -> Flavor:
        return self.position.flavor

    def to_json(self) -> dict[str, object]:
        """A JSON-safe dict: ``ts``, ``shard``, ``pos``, ``flavor`` and, if any, ``source``."""
        data: dict[str, object] = {
            "ts": self.timestamp,
            "shard": self.shard,
            **position_to_json(self.position),
        }
        if self.source is not None:
            data["source"] = self.source.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> EventToken:
        """Read the form written by :meth:`to_json`; raises TokenError naming the bad field.

        ``flavor`` may be left out when ``pos`` is not empty (it is then detected); unknown
        keys are ignored so that newer writers stay readable.
        """
        if not isinstance(data, Mapping):
            raise TokenError(f"Event Token JSON must be an object, got {data!r}")
        position = _position_field(data, "", None)
        raw_source = data.get("source")
        source: SourceProvenance | None = None
        if raw_source is not None:
            if not isinstance(raw_source, Mapping):
                raise TokenError(
                    f"Event Token field 'source' must be an object or null, got {raw_source!r}"
                )
            source = SourceProvenance.from_json(raw_source, default_flavor=position.flavor)
        return cls(
            timestamp=_ts_field(data, "ts"),
            shard=_str_field(data, "shard", "shard"),
            position=position,
            source=source,
        )

    def dumps(self) -> str:
        """Compact JSON text with sorted keys (the same token always gives the same text)."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> EventToken:
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise TokenError(f"Event Token text {text!r} is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise TokenError(f"Event Token text {text!r} is not a JSON object")
        return cls.from_json(data)


def _ts_field(data: Mapping[str, object], name: str) -> int:
    key = name.rsplit(".", 1)[-1]
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TokenError(
            f"Event Token field {name!r} must be a non-negative integer (seconds since the "
            f"epoch), got {value!r}"
        )
    return value


def _str_field(data: Mapping[str, object], key: str, name: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise TokenError(
            f"Event Token field {name!r} must be a non-empty shard name such as '-80', "
            f"got {value!r}"
        )
    return value


def _position_field(
    data: Mapping[str, object], prefix: str, default_flavor: Flavor | None
) -> GTIDPosition:
    try:
        return position_from_json(data, prefix, default_flavor)
    except GTIDParseError as exc:
        raise TokenError(f"Event Token {exc}") from None


def _combine(results: tuple[Comparison | None, ...]) -> Comparison:
    """The one known answer the results agree on, otherwise UNKNOWN."""
    known = {result for result in results if result not in (None, Comparison.UNKNOWN)}
    return known.pop() if len(known) == 1 else Comparison.UNKNOWN


def _compare_by_provenance(a: EventToken, b: EventToken) -> Comparison:
    if a.source is not None and b.source is not None and a.source.shard == b.source.shard:
        result = compare_positions(a.source.position, b.source.position)
        if result is not Comparison.UNKNOWN:
            return result
    a_read_from_b_source = (
        compare_positions(a.position, b.source.position)
        if b.source is not None and a.shard == b.source.shard
        else None
    )
    a_source_read_by_b = (
        compare_positions(a.source.position, b.position)
        if a.source is not None and a.source.shard == b.shard
        else None
    )
    return _combine((a_read_from_b_source, a_source_read_by_b))


def compare(a: EventToken, b: EventToken) -> Comparison:
    """Compare two Event Tokens: is ``a`` BEFORE, AFTER, EQUAL to ``b``, or UNKNOWN?

    The rules, first match wins:

    1. Provenance. Positions on one shard's own GTID stream are compared exactly when the two
       tokens share one:

       a. both tokens carry provenance from the same source shard: compare the two source
          positions (two copies of one source transaction are EQUAL, which is what tells a hop
          duplicate apart);
       b. one token was read from shard S and the other carries provenance from S: compare the
          first token's own position with the other's source position. If this applies in
          both directions (a read from S with provenance T, b read from T with provenance S),
          the known answers must agree, otherwise the result of this rule is UNKNOWN.

       A rule whose positions neither contain the other (UNKNOWN; e.g. a shard name that came
       back in a later resharding with a new GTID history) gives no answer and falls through.
    2. Timestamps: different timestamps give BEFORE / AFTER (seed 000).
    3. Same timestamp, same shard: compare the two positions.
    4. Otherwise UNKNOWN (same second, different streams).

    Every rule mirrors when its operands are swapped, so ``compare(a, b)`` is always
    ``compare(b, a).mirror()``. Mixing flavours raises PositionError.
    """
    result = _compare_by_provenance(a, b)
    if result is not Comparison.UNKNOWN:
        return result
    if a.timestamp != b.timestamp:
        return Comparison.BEFORE if a.timestamp < b.timestamp else Comparison.AFTER
    if a.shard == b.shard:
        return compare_positions(a.position, b.position)
    return Comparison.UNKNOWN
