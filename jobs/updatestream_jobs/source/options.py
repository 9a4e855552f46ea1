"""The options of the `updatestream` data source, each declared once, parsed into a frozen config.

Every option is one field of `SourceConfig`, declared with `option(...)`: its name as Spark gets
it, its default, its bounds and its documentation. The parser (`parse_options`), the table at
the end of this docstring and the options table in docs/source.md (`docs_with_table`; a test
fails when the page's table is not the one the declarations give) all come from them.

Spark hands data source options around as plain strings and may print them in plans and logs,
so no option carries a credential: shards name their Secret, and the reader reads the Secret's
files from `secretsDir` on the worker.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from updatestream.binlog.config import ReaderConfig, RetryPolicy, ShardEndpoint, endpoints_of
from updatestream.binlog.errors import SourceOptionsError
from updatestream.core.dedup import DedupFilter, DedupFilterError
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.start import Start
from updatestream.core.vschema import VSchema
from updatestream.spec import (
    Keyspace,
    MemcachedSink,
    SpecError,
    StartPosition,
    load_keyspace,
    parse_keyspace,
)

T = TypeVar("T")
Parse = Callable[[str, "Option"], Any]


@dataclass(frozen=True)
class Option:
    """One data source option: its name, how its text is read, and what it means."""

    name: str
    doc: str
    shown_default: str
    parse: Parse
    minimum: int | None = None
    required: bool = False


def option(
    name: str,
    default: T,
    doc: str,
    *,
    parse: Parse | None = None,
    minimum: int | None = None,
    shown: str | None = None,
    required: bool = False,
) -> T:
    """A `SourceConfig` field that is a data source option (see the module docstring)."""
    declared = Option(
        name=name,
        doc=doc,
        shown_default=shown if shown is not None else _shown(default),
        parse=parse or _parser_for(default),
        minimum=minimum,
        required=required,
    )
    return field(default=default, metadata={"option": declared})


def _shown(default: object) -> str:
    if default is None or default == () or default == "":
        return "—"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, Start):
        return f"`{default.to_text()}`"
    return f"`{default:,}`" if isinstance(default, int) else f"`{default}`"


def _int(text: str, opt: Option) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SourceOptionsError(f"option {opt.name!r} must be an integer, got {text!r}") from None
    if opt.minimum is not None and value < opt.minimum:
        raise SourceOptionsError(f"option {opt.name!r} must be at least {opt.minimum}, got {value}")
    return value


def _bool(text: str, opt: Option) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise SourceOptionsError(f"option {opt.name!r} must be true or false, got {text!r}")


def _text(text: str, opt: Option) -> str | None:
    return text.strip() or None


def _parser_for(default: object) -> Parse:
    if isinstance(default, bool):
        return _bool
    if isinstance(default, int):
        return _int
    return _text


def _tables(text: str, opt: Option) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _key_range(text: str, opt: Option) -> str:
    try:
        return KeyRange.parse(text.strip() or "-").name
    except UpdateStreamError as exc:
        raise SourceOptionsError(f"option {opt.name!r}: {exc}") from None


def _start(text: str, opt: Option) -> Start:
    try:
        start = Start.parse(text, what=f"option {opt.name!r}")
    except UpdateStreamError as exc:
        raise SourceOptionsError(str(exc)) from None
    if opt.name == "end" and start.mode not in ("now", "gtid", "tokens"):
        raise SourceOptionsError("option 'end' must be now, or shard -> GTID / Event Token JSON")
    return start


def _dedup(text: str, opt: Option) -> DedupFilter | None:
    if not text.strip():
        return None
    try:
        return DedupFilter.from_json(json.loads(text))
    except (ValueError, DedupFilterError) as exc:
        raise SourceOptionsError(f"option {opt.name!r} is not a dedup filter: {exc}") from None


def _memcached_sinks(text: str, opt: Option) -> tuple[MemcachedSink, ...]:
    try:
        items = json.loads(text)
        if not isinstance(items, list):
            raise ValueError("not a JSON list")
        return tuple(MemcachedSink.model_validate({**item, "type": "memcached"}) for item in items)
    except (ValueError, TypeError, SpecError) as exc:
        raise SourceOptionsError(
            f"option {opt.name!r} must be a JSON list of memcached sinks like "
            f'[{{"servers": ["mc-0:11211"]}}]: {exc}'
        ) from None


@dataclass(frozen=True)
class SourceConfig:
    """The data source's options, parsed; frozen and picklable (it travels to the workers).

    `keyspace`, `shards` and `vschema_json` are derived from the `keyspace` and `keyRange`
    options by `parse_options`; `reader` is what the binlog library reads with.
    """

    keyspace_source: str = option(
        "keyspace", "", "the Keyspace manifest: a YAML/JSON file path, or the Keyspace JSON itself",
        required=True,
    )  # fmt: skip
    key_range: str = option(
        "keyRange", "-", "the key range to stream; any range, shard-aligned or not",
        parse=_key_range,
    )  # fmt: skip
    tables: tuple[str, ...] = option(
        "tables", (), "comma-separated table names (default: every table of the VSchema)",
        parse=_tables,
    )  # fmt: skip
    database: str | None = option(
        "database", None, "the keyspace's database on the shards (default: any non-system one)"
    )
    secrets_dir: str = option(
        "secretsDir", ".", "where the shards' Secrets are mounted (`<dir>/<secret>/username`, "
        "`password`)", required=True, shown="—",
    )  # fmt: skip
    start: Start = option(
        "start", Start(), "`now`, `snapshot` (every existing row first, then the stream; "
        "docs/snapshot.md), `earliest`, a timestamp in seconds, a JSON object of shard -> GTID "
        "position, of shard -> Event Token (a full offset, to resume from), or `{\"resume\": "
        "{\"tokens\": {...}, \"gtid\": {...}, \"timestamps\": {...}}}` (per shard, the "
        "strongest form that names it)", parse=_start,
    )  # fmt: skip
    end: Start | None = option(
        "end", None, "batch reads only: `now`, or shard -> GTID position / Event Token JSON "
        "(default: now)", parse=_start,
    )  # fmt: skip
    max_retries: int = option("maxRetries", 5, "connection attempts before a shard is given up")
    connect_timeout: int = option(
        "connectTimeoutSeconds", 10, "seconds to connect to a shard", minimum=1
    )
    read_timeout: int = option("readTimeoutSeconds", 60, "seconds a read may wait", minimum=1)
    heartbeat_interval: int = option(
        "heartbeatIntervalSeconds", 5,
        "how often an idle keyspace still yields a micro-batch, so watermarks move",
    )  # fmt: skip
    max_partition_bytes: int = option(
        "maxPartitionBytes", 1024 * 1024, "split a shard's range into pieces of about this much "
        "binlog, read in parallel", minimum=65536, shown="1 MiB",
    )  # fmt: skip
    arrow_batch_rows: int = option(
        "arrowBatchRows", 2048, "rows per Arrow record batch handed to Spark", minimum=1
    )
    keyspace_watch: str | None = option(
        "keyspaceWatch", None, "where the running stream re-reads its Keyspace to notice "
        "serving-map changes and hop: a manifest path or `kubernetes:<namespace>/<name>` "
        "(default: the `keyspace` file; none when it is inline JSON)",
    )  # fmt: skip
    hop_lookback: int = option(
        "hopLookbackSeconds", 5, "how much earlier than its sources' last delivered timestamps "
        "a hop starts reading a destination (the duplicates this re-reads are dropped exactly)",
    )  # fmt: skip
    dedup: DedupFilter | None = option(
        "dedup", None, "the dedup rule a stream starts with (`DedupFilter.to_json()` text), "
        "when it starts after a hop planned outside the query", parse=_dedup,
    )  # fmt: skip
    snapshot_chunk_rows: int = option(
        "snapshotChunkRows", 20000, "rows per snapshot chunk: bounds a worker's memory", minimum=1
    )
    snapshot_chunks_per_batch: int = option(
        "snapshotChunksPerBatch", 4, "snapshot chunks read per micro-batch, in parallel", minimum=1
    )
    snapshot_requests: str | None = option(
        "snapshotRequests", None, "a file of snapshot-on-demand requests the running stream "
        "polls (JSON lines `{\"id\", \"table\", \"keyRange\"}`; docs/snapshot.md)",
    )  # fmt: skip
    tail: bool = option(
        "tail", True, "follow each shard's binlog with one long-lived connection in the driver "
        "and hand a batch's rows to Spark with its partitions when the tail holds them",
    )  # fmt: skip
    prefetch_held: bool = option(
        "prefetchHeld", True, "a micro-batch whose rows the tails hold whole goes to Spark "
        "with its plan and is read from Spark's block manager, by no Python worker task "
        "(Spark's prefetch path for simple stream readers; Spark then asks the reader for no "
        "latest offset, and each offset names the shards whose tail had read past it instead, "
        "for the job's lag). `make bench-reader-options` measures it",
    )  # fmt: skip
    inline_max_rows: int = option(
        "inlineMaxRows", 20000, "the most rows a range may have to be handed over from a tail; "
        "a larger range is read by the workers, in parallel pieces",
    )  # fmt: skip
    inline_max_bytes: int = option(
        "inlineMaxBytes", 4 * 1024 * 1024, "the most bytes of rows a range may hold to be "
        "handed over from a tail (a partition is shipped to its task whole: a larger one is "
        "read by the workers, in parallel pieces)", minimum=65536, shown="4 MiB",
    )  # fmt: skip
    tail_buffer_rows: int = option(
        "tailBufferRows", 200_000, "rows a shard's tail may hold (uncommitted rows and the "
        "transaction being read); past it the workers read that range", minimum=1,
    )  # fmt: skip
    tail_buffer_bytes: int = option(
        "tailBufferBytes", 256 * 1024 * 1024, "bytes a shard's tail may hold, likewise",
        minimum=65536, shown="256 MiB",
    )  # fmt: skip
    switch_interval_ms: int = option(
        "switchIntervalMs", 1, "the GIL switch interval of the stream reader's process while "
        "tails run (Python's `sys.setswitchinterval`, in ms; Python's own default is 5): how "
        "long a tail or a fast lane with a transaction to take waits, at most, for another "
        "thread of that process that holds the GIL, such as the one planning a batch "
        "(`make bench-reader-options` measures 1 beside 5)", minimum=1,
    )  # fmt: skip
    tail_wait_ms: int = option(
        "tailWaitMs", 200, "how long planning a batch waits for a tail to reach the batch's end"
    )
    max_batch_rows: int = option(
        "maxBatchRows", 20000, "admission control: a micro-batch takes at most about this many "
        "rows of a shard whose tail holds them (whole transactions; 0: no limit)",
    )  # fmt: skip
    max_batch_bytes: int = option(
        "maxBatchBytes", 16 * 1024 * 1024, "admission control where the tail does not hold a "
        "shard's range (a backlog larger than the tail's buffer, `tail` off): a micro-batch "
        "takes about this much of the shard's binlog at most, cut at exact GTID positions "
        "(inside binlog files on MariaDB, at file boundaries on MySQL; 0: no limit)",
        minimum=0, shown="16 MiB",
    )  # fmt: skip
    fast_lane_sinks: tuple[MemcachedSink, ...] = option(
        "fastLaneSinks", (), "memcached sinks (a JSON list of their specs: `servers`, "
        "`keyTemplate`, `extraKeys`) whose invalidations the stream applies as soon as a "
        "shard's tail holds each transaction, ahead of its micro-batch (needs `tail`; the job "
        "sets it for its memcached sinks with `fastLane` on)", parse=_memcached_sinks,
    )  # fmt: skip
    fast_lane_log: str | None = option(
        "fastLaneLog", None, "a file each fast lane appends a JSON line to per transaction it "
        "applied (`shard`, `gtid`, `tailedAt`: when the tail read its commit event, "
        "`appliedAt`: when its invalidations were written; Unix seconds), to measure its lag "
        "beside the writer's commit times (`make bench-peers`)",
    )  # fmt: skip
    # derived from `keyspace` and `keyRange` by parse_options
    keyspace: str = ""
    shards: tuple[ShardEndpoint, ...] = ()  # the shards intersecting the key range
    vschema_json: str = "{}"

    @property
    def reader(self) -> ReaderConfig:
        """What the binlog library reads with."""
        retry = RetryPolicy(
            max_retries=self.max_retries,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
        )
        return ReaderConfig(
            self.keyspace, self.vschema_json, self.key_range, self.tables, self.database,
            self.secrets_dir, retry,
        )  # fmt: skip

    def keyspace_spec(self) -> Keyspace:
        """The Keyspace the stream was started with (the `keyspace` option)."""
        return load_keyspace_option(self.keyspace_source)

    def endpoint(self, shard: str) -> ShardEndpoint:
        for endpoint in self.shards:
            if endpoint.shard == shard:
                return endpoint
        known = ", ".join(e.shard for e in self.shards)
        raise SourceOptionsError(
            f"shard {shard!r} is not read by this stream (key range {self.key_range} reads "
            f"{known}); the offset belongs to another key range or shard map"
        )


OPTIONS: tuple[Option, ...] = tuple(
    f.metadata["option"] for f in dataclasses.fields(SourceConfig) if "option" in f.metadata
)
_FIELD_OF = {
    f.metadata["option"].name: f.name
    for f in dataclasses.fields(SourceConfig)
    if "option" in f.metadata
}


def load_keyspace_option(text: str) -> Keyspace:
    """The Keyspace the `keyspace` option gives: its JSON, or a manifest path."""
    stripped = text.strip()
    try:
        if stripped.startswith("{"):
            try:
                data = json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise SourceOptionsError(f"option 'keyspace' is not valid JSON: {exc}") from None
            return parse_keyspace(data, source="option 'keyspace'")
        return load_keyspace(Path(stripped))
    except SpecError as exc:
        raise SourceOptionsError(str(exc)) from None


def _lookup(options: Mapping[str, str], name: str) -> str | None:
    # Spark passes a case-insensitive mapping; plain dicts (tests) may use any case.
    if name in options:
        return options[name]
    lowered = {k.lower(): v for k, v in options.items()}
    return lowered.get(name.lower())


def parse_options(options: Mapping[str, str]) -> SourceConfig:
    """Validate the data source options and resolve the shards to read."""
    values: dict[str, Any] = {}
    for declared in OPTIONS:
        raw = _lookup(options, declared.name)
        if raw is None or raw.strip() == "":
            if declared.required:
                raise SourceOptionsError(f"option {declared.name!r} is required: {declared.doc}")
            continue
        values[_FIELD_OF[declared.name]] = declared.parse(raw, declared)
    config = SourceConfig(**values)
    return dataclasses.replace(config, **_derived(config))


def _derived(config: SourceConfig) -> dict[str, Any]:
    """The keyspace's name, the shards the key range reads and the VSchema's JSON."""
    keyspace = config.keyspace_spec()
    name = keyspace.metadata.name
    vschema = VSchema.from_dict(keyspace.spec.vschema, keyspace=name)
    for table in config.tables:
        vschema.primary_vindex(table)  # raises VSchemaError naming the table
    declared = {endpoint.shard: endpoint for endpoint in endpoints_of(keyspace)}
    shards = []
    for shard_range in keyspace.spec.serving_map.shards_for(KeyRange.parse(config.key_range)):
        keyspace.spec.shard(shard_range.name)  # raises SpecError naming an undeclared shard
        shards.append(declared[shard_range.name])
    return {"keyspace": name, "shards": tuple(shards), "vschema_json": vschema.to_json()}


def options_table() -> str:
    """The options as a Markdown table (docs/source.md and this module's docstring)."""
    lines = ["| option | default | meaning |", "| --- | --- | --- |"]
    for declared in OPTIONS:
        default = "required" if declared.required else declared.shown_default
        bound = f" (at least {declared.minimum:,})" if declared.minimum is not None else ""
        lines.append(f"| `{declared.name}` | {default} | {declared.doc}{bound} |")
    return "\n".join(lines)


def start_option(start: StartPosition) -> str:
    """The `start` option text for an UpdateStream spec's start position."""
    try:
        return Start.from_fields(
            start.mode,
            timestamp=start.timestamp,
            gtid=start.gtid,
            tokens=start.tokens,
            timestamps=start.timestamps,
        ).to_text()
    except UpdateStreamError as exc:
        raise SourceOptionsError(str(exc)) from None


DOCS_BEGIN = "<!-- source options: generated from updatestream_jobs.source.options -->"
DOCS_END = "<!-- end of source options -->"


def docs_with_table(text: str) -> str:
    """`text` (docs/source.md) with the options table between its markers rendered anew."""
    head, found, rest = text.partition(DOCS_BEGIN)
    _, ended, tail = rest.partition(DOCS_END)
    if not found or not ended:
        raise ValueError(f"the page has no {DOCS_BEGIN!r} ... {DOCS_END!r} markers")
    return f"{head}{DOCS_BEGIN}\n{options_table()}\n{DOCS_END}{tail}"


__doc__ = f"{__doc__}\n{options_table()}\n"
