"""The options of the `updatestream` data source, parsed once into a frozen, picklable config.

Spark hands data source options around as plain strings and may print them in plans and logs,
so no option carries a credential: shards name their Secret, and the reader reads the Secret's
files from `secretsDir` on the worker.

| option | meaning |
| --- | --- |
| `keyspace` | the Keyspace manifest: a YAML/JSON file path, or the Keyspace JSON itself |
| `keyRange` | the key range to stream (default `-`); any range, shard-aligned or not |
| `tables` | comma-separated table names (default: every table of the VSchema) |
| `database` | the keyspace's database on the shards (default: any non-system database) |
| `secretsDir` | where the shards' Secrets are mounted (`<dir>/<secret>/username`, `password`) |
| `start` | `now` (default), `snapshot` (every existing row first, then the stream from there;
  docs/snapshot.md), `earliest`, a timestamp in seconds, a JSON object of shard -> GTID
  position, a JSON object of shard -> Event Token (a full offset, to resume from), or
  `{"resume": {"tokens": {...}, "gtid": {...}, "timestamps": {...}}}` (per shard, the first form
  that names it) |
| `end` | batch reads only: `now` (default), or shard -> GTID position / Event Token JSON |
| `maxRetries`, `connectTimeoutSeconds`, `readTimeoutSeconds` | connection behaviour |
| `heartbeatIntervalSeconds` | how often an idle keyspace still yields a micro-batch (default 5) |
| `maxPartitionBytes` | split a shard's range into pieces of about this much binlog (default 1 MiB,
  at least 64 KiB): Spark reads the pieces in parallel |
| `arrowBatchRows` | rows per Arrow record batch handed to Spark (default 2048) |
| `keyspaceWatch` | where the running stream re-reads its Keyspace to notice serving-map changes
  and hop: a manifest file path, or `kubernetes:<namespace>/<name>` (default: the `keyspace` file;
  none when `keyspace` is inline JSON) |
| `hopLookbackSeconds` | how much earlier than its sources' last delivered timestamps a hop starts
  reading a destination shard (default 5; the duplicates this re-reads are dropped exactly) |
| `dedup` | the dedup rule a stream starts with (`DedupFilter.to_json()` text), when it is started
  after a hop planned outside the query |
| `snapshotChunkRows` | rows per snapshot chunk (default 20000): bounds a worker's memory |
| `snapshotChunksPerBatch` | snapshot chunks read per micro-batch (default 4), in parallel |
| `snapshotRequests` | a file of snapshot-on-demand requests the running stream polls (JSON lines:
  `{"id": ..., "table": ..., "keyRange": ...}`; docs/snapshot.md) |
| `tail` | `true` (default) or `false`: the streaming reader follows each shard's binlog with one
  long-lived connection in the driver and hands a batch's rows to Spark with its partitions when
  it holds them (`inlineMaxRows`); otherwise the workers read the range from the shard |
| `inlineMaxRows` | the most rows a shard's range may have to be handed over from the tail (default
  20000); a larger range is read by the workers, in parallel pieces (`maxPartitionBytes`) |
| `tailBufferRows`, `tailBufferBytes` | what a shard's tail may hold (default 200000 rows, 256 MiB,
  uncommitted rows and the transaction being read included); past either it drops its rows,
  the workers read that range, and the tail starts again at the next batch's end |
| `tailWaitMs` | how long planning a batch waits for a tail to reach the batch's end (default 200) |
| `maxBatchRows` | admission control: a micro-batch takes at most about this many rows of a shard
  whose tail holds them (default 20000; whole transactions; 0: no limit) |
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from updatestream.binlog.errors import SourceOptionsError
from updatestream.core.dedup import DedupFilter, DedupFilterError
from updatestream.core.gtid import Flavor, parse_position
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken
from updatestream.core.vschema import VSchema
from updatestream.spec import Keyspace, SpecError, StartPosition, load_keyspace, parse_keyspace

StartMode = Literal["now", "snapshot", "earliest", "timestamp", "gtid", "tokens", "resume"]
ResumeKind = Literal["token", "gtid", "timestamp"]


@dataclass(frozen=True, slots=True)
class ShardEndpoint:
    """Where one shard's primary listens and which Secret holds its replication user."""

    keyspace: str
    shard: str
    host: str
    port: int
    secret: str
    flavor: Literal["mariadb", "mysql"] = "mariadb"
    tls: str = "disabled"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        return f"shard {self.shard} ({self.address})"


@dataclass(frozen=True, slots=True)
class StartSpec:
    """Where a stream starts. `positions` holds GTID texts (gtid) or Event Token JSON (tokens);
    `resume` holds (shard, kind, value) with the value as text: an Event Token's JSON, a GTID
    position, or a timestamp in seconds."""

    mode: StartMode = "now"
    timestamp: int | None = None
    positions: tuple[tuple[str, str], ...] = ()
    resume: tuple[tuple[str, ResumeKind, str], ...] = ()

    def for_shard(self, shard: str) -> str | None:
        return dict(self.positions).get(shard)

    def resume_for(self, shard: str) -> tuple[ResumeKind, str] | None:
        """How a `resume` start starts `shard`: its token, else its GTID, else its timestamp."""
        for name, kind, value in self.resume:
            if name == shard:
                return kind, value
        return None

    def named(self, shard: str) -> tuple[ResumeKind, str] | None:
        """What a `gtid`, `tokens` or `resume` start names for `shard`: (kind, value)."""
        if self.mode == "resume":
            return self.resume_for(shard)
        raw = self.for_shard(shard) if self.mode in ("gtid", "tokens") else None
        if raw is None:
            return None
        return ("gtid" if self.mode == "gtid" else "token"), raw

    def shards_named(self) -> list[str]:
        return [entry[0] for entry in (self.resume if self.mode == "resume" else self.positions)]

    def given_token(self, shard: str, flavor: Flavor | None = None) -> EventToken | None:
        """The start token of `shard` when the start gives it (a token or a GTID position),
        without asking the shard; None for a timestamp or a shard it does not name."""
        named = self.named(shard)
        if named is None or named[0] == "timestamp":
            return None
        kind, raw = named
        if kind == "gtid":
            return EventToken(0, shard, parse_position(raw, flavor))
        return EventToken.loads(raw)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 5
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    connect_timeout: int = 10
    read_timeout: int = 60

    def backoff(self, attempt: int) -> float:
        return float(min(self.max_backoff, self.initial_backoff * (2 ** max(0, attempt - 1))))


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """Everything a reader needs, frozen and picklable (it travels to the Spark workers)."""

    keyspace: str
    shards: tuple[ShardEndpoint, ...]  # the shards intersecting the key range
    vschema_json: str
    key_range: str = "-"
    tables: tuple[str, ...] = ()
    database: str | None = None
    secrets_dir: str = "."
    start: StartSpec = field(default_factory=StartSpec)
    end: StartSpec | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    heartbeat_interval: int = 5
    max_partition_bytes: int = 1024 * 1024
    arrow_batch_rows: int = 2048
    keyspace_source: str = ""  # the `keyspace` option as given (a path, or the JSON)
    keyspace_watch: str | None = None
    hop_lookback: int = 5
    dedup: DedupFilter | None = None  # the dedup rule the stream starts with
    snapshot_chunk_rows: int = 20000
    snapshot_chunks_per_batch: int = 4
    snapshot_requests: str | None = None  # a requests file the running stream polls
    tail: bool = False
    inline_max_rows: int = 20000
    tail_buffer_rows: int = 200_000
    tail_buffer_bytes: int = 256 * 1024 * 1024
    tail_wait_ms: int = 200
    max_batch_rows: int = 20000

    def keyspace_spec(self) -> Keyspace:
        """The Keyspace the stream was started with (the `keyspace` option)."""
        try:
            return _load_keyspace(self.keyspace_source)
        except SpecError as exc:
            raise SourceOptionsError(str(exc)) from None

    def endpoint(self, shard: str) -> ShardEndpoint:
        for endpoint in self.shards:
            if endpoint.shard == shard:
                return endpoint
        known = ", ".join(e.shard for e in self.shards)
        raise SourceOptionsError(
            f"shard {shard!r} is not read by this stream (key range {self.key_range} reads "
            f"{known}); the offset belongs to another key range or shard map"
        )


def _load_keyspace(text: str) -> Keyspace:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise SourceOptionsError(f"option 'keyspace' is not valid JSON: {exc}") from None
        return parse_keyspace(data, source="option 'keyspace'")
    return load_keyspace(Path(stripped))


def parse_start(text: str, *, option: str = "start") -> StartSpec:
    """Parse a start (or end) option: now, earliest, seconds, or a JSON object per shard."""
    stripped = (text or "now").strip()
    if stripped in ("now", "earliest", "snapshot"):
        return StartSpec(mode=stripped)  # type: ignore[arg-type]
    if stripped.isdigit():
        return StartSpec(mode="timestamp", timestamp=int(stripped))
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise SourceOptionsError(f"option {option!r} is not valid JSON: {exc}") from None
        return _start_from_mapping(data, option)
    raise SourceOptionsError(
        f"option {option!r} is {text!r}; use now, snapshot, earliest, a timestamp in seconds, "
        'a JSON object of shard -> GTID position ({"-80": "1-1-42"}) or of shard -> Event Token'
    )


def _resume_from_mapping(data: Any, option: str) -> StartSpec:
    """`{"tokens": {shard: token}, "gtid": {shard: text}, "timestamps": {shard: seconds}}`: per
    shard the first of token, GTID, timestamp that names it."""
    if not isinstance(data, Mapping) or not set(data) <= {"tokens", "gtid", "timestamps"}:
        raise SourceOptionsError(
            f"option {option!r}: 'resume' must be an object with tokens, gtid and/or timestamps "
            "(each shard -> value)"
        )
    chosen: dict[str, tuple[ResumeKind, str]] = {}
    forms: tuple[tuple[str, ResumeKind], ...] = (
        ("timestamps", "timestamp"),
        ("gtid", "gtid"),
        ("tokens", "token"),
    )
    for key, kind in forms:
        values = data.get(key) or {}
        if not isinstance(values, Mapping):
            raise SourceOptionsError(f"option {option!r}: resume.{key} must be shard -> value")
        for shard, value in values.items():
            name = KeyRange.parse(str(shard)).name
            if kind == "token":
                if not isinstance(value, Mapping):
                    raise SourceOptionsError(
                        f"option {option!r}: resume.tokens[{shard}] must be an Event Token object"
                    )
                text = EventToken.from_json(value).dumps()
            elif kind == "gtid":
                if not isinstance(value, str):
                    raise SourceOptionsError(
                        f"option {option!r}: resume.gtid[{shard}] must be GTID position text"
                    )
                text = value
            else:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise SourceOptionsError(
                        f"option {option!r}: resume.timestamps[{shard}] must be seconds, got "
                        f"{value!r}"
                    )
                text = str(value)
            chosen[name] = (kind, text)  # later (stronger) forms override
    if not chosen:
        raise SourceOptionsError(f"option {option!r}: 'resume' names no shard")
    return StartSpec(mode="resume", resume=tuple((s, k, v) for s, (k, v) in sorted(chosen.items())))


def _start_from_mapping(data: Mapping[str, Any], option: str) -> StartSpec:
    if not data:
        raise SourceOptionsError(f"option {option!r} is an empty JSON object; name the shards")
    if set(data) == {"resume"}:  # no shard is called "resume": shard names are key ranges
        return _resume_from_mapping(data["resume"], option)
    if all(isinstance(v, str) for v in data.values()):
        return StartSpec(mode="gtid", positions=tuple(sorted(data.items())))
    if all(isinstance(v, Mapping) for v in data.values()):
        tokens = []
        for shard, raw in sorted(data.items()):
            token = EventToken.from_json(raw)
            tokens.append((KeyRange.parse(shard).name, token.dumps()))
        return StartSpec(mode="tokens", positions=tuple(tokens))
    raise SourceOptionsError(
        f"option {option!r} mixes value kinds; give shard -> GTID text for every shard, or "
        "shard -> Event Token object for every shard"
    )


def start_option(start: StartPosition) -> str:
    """The `start` option text for an UpdateStream spec's start position."""
    if start.mode in ("now", "earliest", "snapshot"):
        return start.mode
    if start.mode == "timestamp" and start.timestamp is not None:
        return str(start.timestamp)
    if start.mode == "gtid" and start.gtid:
        return json.dumps(start.gtid, sort_keys=True)
    if start.mode == "tokens" and start.tokens:
        return json.dumps(start.tokens, sort_keys=True)
    if start.mode == "resume" and (start.tokens or start.gtid or start.timestamps):
        forms = {"tokens": start.tokens, "gtid": start.gtid, "timestamps": start.timestamps}
        resume = {key: value for key, value in forms.items() if value}
        return json.dumps({"resume": resume}, sort_keys=True)
    raise SourceOptionsError(
        f"start mode {start.mode!r} needs its value (timestamp, gtid, tokens; for resume at "
        "least one of tokens, gtid, timestamps) in the spec"
    )


def _int_option(options: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SourceOptionsError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SourceOptionsError(f"option {name!r} must be at least {minimum}, got {value}")
    return value


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (options.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in ("true", "false"):
        return raw == "true"
    raise SourceOptionsError(f"option {name!r} must be true or false, got {options[name]!r}")


def _option(options: Mapping[str, str], name: str) -> str | None:
    # Spark passes a case-insensitive mapping; plain dicts (tests) may use any case.
    if name in options:
        return options[name]
    lowered = {k.lower(): v for k, v in options.items()}
    return lowered.get(name.lower())


def parse_options(options: Mapping[str, str]) -> SourceConfig:
    """Validate the data source options and resolve the shards to read."""
    opts = {k: v for k, v in ((n, _option(options, n)) for n in _NAMES) if v is not None}
    if "keyspace" not in opts:
        raise SourceOptionsError(
            "option 'keyspace' is required: a Keyspace manifest path or its JSON"
        )
    try:
        keyspace = _load_keyspace(opts["keyspace"])
    except SpecError as exc:
        raise SourceOptionsError(str(exc)) from None
    name = keyspace.metadata.name
    key_range = KeyRange.parse(opts.get("keyRange") or "-")
    vschema = VSchema.from_dict(keyspace.spec.vschema, keyspace=name)
    tables = tuple(t.strip() for t in (opts.get("tables") or "").split(",") if t.strip())
    for table in tables:
        vschema.primary_vindex(table)  # raises VSchemaError naming the table
    serving = keyspace.spec.serving_map
    declared = {endpoint.shard: endpoint for endpoint in endpoints_of(keyspace)}
    shards = []
    for shard_range in serving.shards_for(key_range):
        keyspace.spec.shard(shard_range.name)  # raises SpecError naming an undeclared shard
        shards.append(declared[shard_range.name])
    if not opts.get("secretsDir"):
        raise SourceOptionsError(
            "option 'secretsDir' is required: the directory where the shards' Secrets are "
            "mounted (<dir>/<secret>/username and password)"
        )
    end = parse_start(opts["end"], option="end") if opts.get("end") else None
    if end is not None and end.mode not in ("now", "gtid", "tokens"):
        raise SourceOptionsError("option 'end' must be now, or shard -> GTID / Event Token JSON")
    retry = RetryPolicy(
        max_retries=_int_option(opts, "maxRetries", 5),
        connect_timeout=_int_option(opts, "connectTimeoutSeconds", 10, 1),
        read_timeout=_int_option(opts, "readTimeoutSeconds", 60, 1),
    )
    return SourceConfig(
        keyspace=name,
        shards=tuple(shards),
        vschema_json=vschema.to_json(),
        key_range=key_range.name,
        tables=tables,
        database=opts.get("database") or None,
        secrets_dir=opts["secretsDir"],
        start=parse_start(opts.get("start") or "now"),
        end=end,
        retry=retry,
        heartbeat_interval=_int_option(opts, "heartbeatIntervalSeconds", 5),
        max_partition_bytes=_int_option(opts, "maxPartitionBytes", 1024 * 1024, 65536),
        arrow_batch_rows=_int_option(opts, "arrowBatchRows", 2048, 1),
        keyspace_source=opts["keyspace"],
        keyspace_watch=opts.get("keyspaceWatch") or None,
        hop_lookback=_int_option(opts, "hopLookbackSeconds", 5),
        dedup=_dedup_option(opts.get("dedup")),
        snapshot_chunk_rows=_int_option(opts, "snapshotChunkRows", 20000, 1),
        snapshot_chunks_per_batch=_int_option(opts, "snapshotChunksPerBatch", 4, 1),
        snapshot_requests=opts.get("snapshotRequests") or None,
        tail=_bool_option(opts, "tail", True),
        inline_max_rows=_int_option(opts, "inlineMaxRows", 20000),
        tail_buffer_rows=_int_option(opts, "tailBufferRows", 200_000, 1),
        tail_buffer_bytes=_int_option(opts, "tailBufferBytes", 256 * 1024 * 1024, 65536),
        tail_wait_ms=_int_option(opts, "tailWaitMs", 200),
        max_batch_rows=_int_option(opts, "maxBatchRows", 20000),
    )


def _dedup_option(text: str | None) -> DedupFilter | None:
    if not text or not text.strip():
        return None
    try:
        return DedupFilter.from_json(json.loads(text))
    except (ValueError, DedupFilterError) as exc:
        raise SourceOptionsError(f"option 'dedup' is not a dedup filter: {exc}") from None


def endpoints_of(keyspace: Keyspace) -> list[ShardEndpoint]:
    """Where each shard the Keyspace declares listens, and its replication user's Secret."""
    return [
        ShardEndpoint(
            keyspace=keyspace.metadata.name,
            shard=spec.name,
            host=spec.mysql.host,
            port=spec.mysql.port,
            secret=spec.credentials_secret.name,
            flavor=spec.flavor,
            tls=spec.mysql.tls,
        )
        for spec in keyspace.spec.shards
    ]


_NAMES = (
    "keyspace",
    "keyRange",
    "tables",
    "database",
    "secretsDir",
    "start",
    "end",
    "maxRetries",
    "connectTimeoutSeconds",
    "readTimeoutSeconds",
    "heartbeatIntervalSeconds",
    "maxPartitionBytes",
    "arrowBatchRows",
    "keyspaceWatch",
    "hopLookbackSeconds",
    "dedup",
    "snapshotChunkRows",
    "snapshotChunksPerBatch",
    "snapshotRequests",
    "tail",
    "inlineMaxRows",
    "tailBufferRows",
    "tailBufferBytes",
    "tailWaitMs",
    "maxBatchRows",
)
