"""The value types of the specs: key ranges, shard maps and dedup rules as pydantic fields.

Each is read from its text (or JSON) form and written back in the one canonical spelling, so
that what the operator, the job and the development cluster write for each other compares
as text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, PlainSerializer, PlainValidator, WithJsonSchema

from updatestream.core.dedup import DedupFilter, DedupFilterError
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap


def _canonical_key_range(value: Any) -> KeyRange:
    """A key range written the one canonical way; a ValueError lets pydantic name the field.

    `00-80`, `0000-8000` and `-80` are one range, but a spec must write it one way (`-80`, as
    `KeyRange.name` does): shard names are compared as text by the API server's own rules,
    in status and in positions, and two spellings of one shard would not match.
    """
    if isinstance(value, KeyRange):
        return value
    if not isinstance(value, str):
        raise ValueError(f"must be a key range such as -80, 40-80 or 80-, got {value!r}")
    try:
        parsed = KeyRange.parse(value)
    except UpdateStreamError as exc:
        raise ValueError(str(exc)) from None
    if parsed.name != value:
        raise ValueError(
            f"key range {value!r} is not written canonically; write {value} as {parsed.name}"
        )
    return parsed


_Parsed = TypeVar("_Parsed", KeyRange, ShardMap)


def _from_text(
    kind: type[_Parsed], parse: Callable[[str], _Parsed], such_as: str, failure: str = "{}"
) -> Callable[[Any], _Parsed]:
    """A validator taking a `kind` as it is or its text form, read with `parse`; `failure`
    formats the parse error's text."""

    def validate(value: Any) -> _Parsed:
        if isinstance(value, kind):
            return value
        if not isinstance(value, str):
            raise ValueError(f"must be {such_as}, got {value!r}")
        try:
            return parse(value)
        except UpdateStreamError as exc:
            raise ValueError(failure.format(exc)) from None

    return validate


# A key range in any spelling (`0000-8000` is `-80`): what a program wrote, read back.
_any_key_range = _from_text(KeyRange, KeyRange.parse, "a key range such as -80, 40-80 or 80-")
_shard_map = _from_text(
    ShardMap, ShardMap.parse, "a shard map such as '-80,80-'", "not a shard map: {}"
)


def _dedup_filter(value: Any) -> DedupFilter:
    if isinstance(value, DedupFilter):
        return value
    try:
        return DedupFilter.from_json(value)
    except DedupFilterError as exc:
        raise ValueError(str(exc)) from None


def _key_range_name(text: str) -> str:
    return _canonical_key_range(text).name


_AS_TEXT = WithJsonSchema({"type": "string"})

# A key range as a value (`KeyRange`), written as its canonical name (`-80`): a spec must
# spell it that way.
CanonicalKeyRange = Annotated[
    KeyRange, PlainValidator(_canonical_key_range), PlainSerializer(str, return_type=str), _AS_TEXT
]
# A key range as a value, read in any spelling and written as its canonical name: what the
# operator and the job write for each other (status, progress reports, job configurations).
KeyRangeValue = Annotated[
    KeyRange, PlainValidator(_any_key_range), PlainSerializer(str, return_type=str), _AS_TEXT
]
# A shard map as a value (`ShardMap`), written as its shard names (`-80,80-`).
ShardMapValue = Annotated[
    ShardMap, PlainValidator(_shard_map), PlainSerializer(str, return_type=str), _AS_TEXT
]
# A hop's dedup rule (`DedupFilter`), written as its JSON object (watermarks, overlap_until).
DedupValue = Annotated[
    DedupFilter,
    PlainValidator(_dedup_filter),
    PlainSerializer(lambda dedup: dedup.to_json(), return_type=dict),
    WithJsonSchema({"type": "object"}),
]
# A shard's name: a key range written canonically, kept as text. Shard names are keys (of
# positions, Secrets' folders, status entries) and a Keyspace must parse even when its serving
# shards do not form a shard map, so that its status can say what is wrong.
KeyRangeName = Annotated[str, AfterValidator(_key_range_name)]
