"""Where a stream starts: one interpreter of the start forms, for the operator and the job.

A start is one of: `now`, `snapshot` (every existing row first, then the stream from there),
`earliest`, a timestamp in seconds, per shard a GTID position (`gtid`), per shard an Event Token
(`tokens`), or `resume`: per shard the strongest form that names it (an Event Token, else a GTID
position, else a timestamp). The operator writes `resume` when the shards of one launch start in
different forms (after a hop). `Start.named(shard)` says how a start names one shard, whatever
the mode; `Start.parse` and `Start.to_text` are the text form the Spark source takes as its
`start` option; `Start.from_fields` reads the UpdateStream spec's fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import Flavor, parse_position
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken

StartMode = Literal["now", "snapshot", "earliest", "timestamp", "gtid", "tokens", "resume"]
ShardStartKind = Literal["token", "gtid", "timestamp"]
START_MODES: tuple[StartMode, ...] = (
    "now", "snapshot", "earliest", "timestamp", "gtid", "tokens", "resume",
)  # fmt: skip
_BARE: tuple[StartMode, ...] = ("now", "earliest", "snapshot")
_FORMS = (
    "use now, snapshot, earliest, a timestamp in seconds, a JSON object of shard -> GTID "
    'position ({"-80": "1-1-42"}) or of shard -> Event Token'
)


class StartError(UpdateStreamError):
    """A start position is malformed; the message names the input and says what to write."""


@dataclass(frozen=True, slots=True)
class ShardStart:
    """How a start names one shard: an Event Token, a GTID position (text, parsed with the
    shard's flavor when it is read) or a timestamp in seconds."""

    shard: str
    kind: ShardStartKind
    token: EventToken | None = None
    gtid: str | None = None
    timestamp: int | None = None

    def given_token(self, flavor: Flavor | None = None) -> EventToken | None:
        """The start token when the start gives it (a token, or a GTID position at time 0),
        without asking the shard; None for a timestamp."""
        if self.token is not None:
            return self.token
        if self.gtid is not None:
            return EventToken(0, self.shard, parse_position(self.gtid, flavor))
        return None


@dataclass(frozen=True, slots=True)
class Start:
    """A stream's start (see the module docstring); `shards` holds the per-shard forms of the
    `gtid`, `tokens` and `resume` modes, sorted by shard."""

    mode: StartMode = "now"
    timestamp: int | None = None
    shards: tuple[ShardStart, ...] = ()

    def named(self, shard: str) -> ShardStart | None:
        """How a `gtid`, `tokens` or `resume` start names `shard`; None otherwise."""
        return next((s for s in self.shards if s.shard == shard), None)

    def shards_named(self) -> list[str]:
        return [s.shard for s in self.shards]

    def given_token(self, shard: str, flavor: Flavor | None = None) -> EventToken | None:
        named = self.named(shard)
        return named.given_token(flavor) if named is not None else None

    def first_timestamp(self, shard: str, now: int) -> int | None:
        """The earliest second `shard` may deliver from, when the start says it without a
        position: the timestamp (of the mode, or of the shard), `now` for `now`, 0 for
        `earliest`/`snapshot`; None when the shard starts from a token or GTID position."""
        if self.mode == "timestamp":
            return self.timestamp or 0
        if self.mode == "now":
            return now
        named = self.named(shard)
        if named is None:
            return 0
        return named.timestamp if named.kind == "timestamp" else None

    # -- the text form (the Spark source's `start` and `end` options) -------------------------

    @classmethod
    def parse(cls, text: str | None, *, what: str = "option 'start'") -> Start:
        """now, snapshot, earliest, seconds, or a JSON object per shard (see `to_text`)."""
        stripped = (text or "now").strip()
        if stripped in _BARE:
            return cls(mode=stripped)
        if stripped.isdigit():
            return cls(mode="timestamp", timestamp=int(stripped))
        if stripped.startswith("{"):
            try:
                data = json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise StartError(f"{what} is not valid JSON: {exc}") from None
            return _from_mapping(data, what)
        raise StartError(f"{what} is {text!r}; {_FORMS}")

    def to_text(self) -> str:
        if self.mode in _BARE:
            return self.mode
        if self.mode == "timestamp":
            return str(self.timestamp)
        if self.mode == "gtid":
            return json.dumps({s.shard: s.gtid for s in self.shards}, sort_keys=True)
        if self.mode == "tokens":
            tokens = {s.shard: s.token.to_json() for s in self.shards if s.token is not None}
            return json.dumps(tokens, sort_keys=True)
        return json.dumps({"resume": self._resume_fields()}, sort_keys=True)

    def _resume_fields(self) -> dict[str, dict[str, Any]]:
        fields: dict[str, dict[str, Any]] = {}
        for s in self.shards:
            if s.kind == "token" and s.token is not None:
                fields.setdefault("tokens", {})[s.shard] = s.token.to_json()
            elif s.kind == "gtid":
                fields.setdefault("gtid", {})[s.shard] = s.gtid
            else:
                fields.setdefault("timestamps", {})[s.shard] = s.timestamp
        return fields

    # -- the spec's fields (UpdateStream `spec.start`) ---------------------------------------

    @classmethod
    def from_fields(
        cls,
        mode: str,
        *,
        timestamp: int | None = None,
        gtid: Mapping[str, str] | None = None,
        tokens: Mapping[str, Mapping[str, Any]] | None = None,
        timestamps: Mapping[str, int] | None = None,
        what: str = "spec.start",
    ) -> Start:
        """The start an UpdateStream's `spec.start` fields say; StartError names what a mode
        lacks."""
        if mode in _BARE:
            return cls(mode=mode)
        if mode == "timestamp" and timestamp is not None:
            return cls(mode="timestamp", timestamp=timestamp)
        if mode == "gtid" and gtid:
            return _from_mapping(dict(gtid), what)
        if mode == "tokens" and tokens:
            return _from_mapping(dict(tokens), what)
        if mode == "resume" and (tokens or gtid or timestamps):
            forms = {"tokens": tokens, "gtid": gtid, "timestamps": timestamps}
            return _resume({key: dict(value) for key, value in forms.items() if value}, what)
        raise StartError(
            f"{what}: start mode {mode!r} needs its value (timestamp, gtid, tokens; for resume "
            "at least one of tokens, gtid, timestamps) in the spec"
        )


def _shard_name(shard: object, what: str) -> str:
    try:
        return KeyRange.parse(str(shard)).name
    except UpdateStreamError as exc:
        raise StartError(f"{what}: {shard!r} is not a shard name ({exc})") from None


def _from_mapping(data: Any, what: str) -> Start:
    if not isinstance(data, Mapping) or not data:
        raise StartError(f"{what} is an empty JSON object; name the shards")
    if set(data) == {"resume"}:  # no shard is called "resume": shard names are key ranges
        return _resume(data["resume"], what)
    if all(isinstance(v, str) for v in data.values()):
        shards = [ShardStart(_shard_name(s, what), "gtid", gtid=v) for s, v in data.items()]
        return Start(mode="gtid", shards=tuple(sorted(shards, key=_by_shard)))
    if all(isinstance(v, Mapping) for v in data.values()):
        shards = [
            ShardStart(_shard_name(s, what), "token", token=EventToken.from_json(v))
            for s, v in data.items()
        ]
        return Start(mode="tokens", shards=tuple(sorted(shards, key=_by_shard)))
    raise StartError(
        f"{what} mixes value kinds; give shard -> GTID text for every shard, or shard -> "
        "Event Token object for every shard"
    )


def _by_shard(start: ShardStart) -> str:
    return start.shard


_RESUME_FORMS: tuple[tuple[str, ShardStartKind], ...] = (
    ("timestamps", "timestamp"),
    ("gtid", "gtid"),
    ("tokens", "token"),
)  # weakest first: a later (stronger) form overrides


def _resume(data: Any, what: str) -> Start:
    """`{"tokens": {...}, "gtid": {...}, "timestamps": {...}}`: per shard the strongest form."""
    if not isinstance(data, Mapping) or not set(data) <= {"tokens", "gtid", "timestamps"}:
        raise StartError(
            f"{what}: 'resume' must be an object with tokens, gtid and/or timestamps "
            "(each shard -> value)"
        )
    chosen: dict[str, ShardStart] = {}
    for key, kind in _RESUME_FORMS:
        values = data.get(key) or {}
        if not isinstance(values, Mapping):
            raise StartError(f"{what}: resume.{key} must be shard -> value")
        for shard, value in values.items():
            name = _shard_name(shard, what)
            chosen[name] = _resume_entry(name, kind, value, f"{what}: resume.{key}[{shard}]")
    if not chosen:
        raise StartError(f"{what}: 'resume' names no shard")
    return Start(mode="resume", shards=tuple(chosen[s] for s in sorted(chosen)))


def _resume_entry(shard: str, kind: ShardStartKind, value: Any, what: str) -> ShardStart:
    if kind == "token":
        if not isinstance(value, Mapping):
            raise StartError(f"{what} must be an Event Token object")
        return ShardStart(shard, "token", token=EventToken.from_json(value))
    if kind == "gtid":
        if not isinstance(value, str):
            raise StartError(f"{what} must be GTID position text")
        return ShardStart(shard, "gtid", gtid=value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StartError(f"{what} must be seconds, got {value!r}")
    return ShardStart(shard, "timestamp", timestamp=value)
