"""Whether a Keyspace or UpdateStream spec can run: the checks beyond the spec's shape.

The pydantic models in :mod:`updatestream.spec` check each field on its own. What needs more
than one field, or the pure core, is here: the VSchema builds with the vindex registry, the
serving shards form a shard map, a stream's key ranges do not overlap, its start positions
parse, its sinks' addresses and key templates are usable, and (given its Keyspace) its tables
exist there, its key templates name tables it reads (and columns of them, where the VSchema lists
a table's columns authoritatively) and its key ranges fit an unsharded keyspace. One set of
checks serves the operator's reconcile (status conditions), its admission webhook (refusals) and
the streaming job (a refusal to start), so the three never disagree.

Every problem names the field it is about, in the API server's notation (`spec.sinks[0].servers`),
a reason (the condition reason the operator reports) and a message that says what to write.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from updatestream.cache.key_templates import KeyTemplate, KeyTemplates
from updatestream.core.errors import UpdateStreamError
from updatestream.core.gtid import parse_position
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.core.token import EventToken
from updatestream.core.vschema import VSchema
from updatestream.spec import (
    CDCv2Sink,
    Keyspace,
    MemcachedSink,
    MirrorSink,
    SpecError,
    StartPosition,
    UpdateStream,
    UpdateStreamSpec,
    VersionStreamSink,
)

_HOST = re.compile(r"^[^:\s]+$")
_SQL_NAME = re.compile(r"^[A-Za-z0-9_$]{1,64}$")


@dataclass(frozen=True)
class SpecProblem:
    """One reason a spec cannot run: the field, a condition reason, what to write instead."""

    field: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def describe(problems: Sequence[SpecProblem]) -> str:
    return "; ".join(str(p) for p in problems)


# -- Keyspace -----------------------------------------------------------------------------------


def keyspace_problems(keyspace: Keyspace) -> list[SpecProblem]:
    """What keeps a Keyspace from serving streams (empty when nothing)."""
    spec = keyspace.spec
    if spec.vitess is not None and spec.awaiting_vitess:
        where = f"keyspace {spec.vitess.keyspace or keyspace.metadata.name} at {spec.vitess.vtctld}"
        message = f"its shards have not been read from Vitess ({where}) yet"
        return [SpecProblem("spec.servingShards", "VitessNotRead", message)]
    problems: list[SpecProblem] = []
    try:
        vschema: VSchema | None = VSchema.from_dict(spec.vschema, keyspace=keyspace.metadata.name)
    except UpdateStreamError as exc:
        vschema = None
        problems.append(SpecProblem("spec.vschema", "InvalidVSchema", str(exc)))
    names = [shard.name for shard in spec.shards]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(
            SpecProblem(
                "spec.shards",
                "DuplicateShard",
                f"shard {name} is declared {names.count(name)} times; declare each shard once",
            )
        )
    problems.extend(_serving_problems(spec.serving_shards, set(names), vschema))
    for index, entry in enumerate(spec.shard_map_history):
        try:
            _ = entry.shard_map  # raises when the shards do not partition the keyspace
        except UpdateStreamError as exc:
            problems.append(
                SpecProblem(
                    f"spec.shardMapHistory[{index}].shards",
                    "InvalidShardMapHistory",
                    f"{exc}; a history entry lists the shards that served from its time on",
                )
            )
    return problems


def _serving_problems(
    serving: Sequence[str], declared: set[str], vschema: VSchema | None
) -> Iterator[SpecProblem]:
    field = "spec.servingShards"
    for index, name in enumerate(serving):
        try:
            canonical = KeyRange.parse(name).name
        except UpdateStreamError:
            continue  # the shard map below names it
        if canonical != name:
            yield SpecProblem(
                f"{field}[{index}]",
                "InvalidShardMap",
                f"key range {name!r} is not written canonically; write {name} as {canonical}",
            )
    try:
        ShardMap.parse(",".join(serving))
    except UpdateStreamError as exc:
        yield SpecProblem(
            field,
            "InvalidShardMap",
            f"{exc}; list shards that cover every keyspace id once, like -80, 80-",
        )
    undeclared = [s for s in serving if s not in declared]
    if undeclared:
        yield SpecProblem(
            field,
            "InvalidShardMap",
            f"serving shards {', '.join(undeclared)} are not declared in spec.shards; "
            "declare them (name, mysql, credentialsSecret)",
        )
    if vschema is not None and not vschema.sharded and list(serving) != ["-"]:
        yield SpecProblem(
            field,
            "InvalidShardMap",
            f"the VSchema is unsharded, so the keyspace has one shard, -; write servingShards: "
            f"['-'] (not {', '.join(serving)}) or set vschema.sharded: true",
        )


def check_keyspace(keyspace: Keyspace, *, source: str = "Keyspace") -> None:
    """Raise SpecError naming every problem of `keyspace`."""
    problems = keyspace_problems(keyspace)
    if problems:
        raise SpecError(f"invalid Keyspace in {source}: {describe(problems)}")


# -- UpdateStream -------------------------------------------------------------------------------


def stream_problems(spec: UpdateStreamSpec, keyspace: Keyspace | None = None) -> list[SpecProblem]:
    """What keeps an UpdateStream from running; with its Keyspace, against it too."""
    problems = list(_key_range_problems(spec.key_ranges))
    problems.extend(_start_problems(spec.start))
    problems.extend(_sink_problems(spec))
    problems.extend(
        SpecProblem(
            f"spec.spark.conf[{key}]",
            "InvalidSpark",
            f"Spark configuration key {key!r} does not start with 'spark.'; "
            "give Spark settings like spark.executor.memory",
        )
        for key in spec.spark.conf
        if not key.startswith("spark.")
    )
    if keyspace is not None:
        problems.extend(_against_keyspace(spec, keyspace))
    return problems


def _key_range_problems(ranges: Sequence[KeyRange]) -> Iterator[SpecProblem]:
    for index, left in enumerate(ranges):
        for right in ranges[index + 1 :]:
            if left.intersects(right):
                yield SpecProblem(
                    "spec.keyRanges",
                    "OverlappingKeyRanges",
                    f"keyRanges {left} and {right} overlap, so their changes would be "
                    "delivered twice; use non-overlapping key ranges, like -80 and 80-",
                )


def _start_problems(start: StartPosition) -> Iterator[SpecProblem]:
    field = "spec.start"
    if start.mode == "timestamp" and start.timestamp is None:
        yield SpecProblem(
            f"{field}.timestamp",
            "InvalidStart",
            "start.mode timestamp needs start.timestamp (unix seconds, like 1700000000)",
        )
    if start.timestamp is not None and start.mode not in ("timestamp", "resume"):
        yield SpecProblem(
            f"{field}.timestamp",
            "InvalidStart",
            f"start.timestamp is only read with start.mode timestamp; set mode: timestamp "
            f"or remove the timestamp (mode is {start.mode})",
        )
    if start.timestamp is not None and start.timestamp < 0:
        yield SpecProblem(
            f"{field}.timestamp",
            "InvalidStart",
            f"start.timestamp {start.timestamp} is negative; give unix seconds",
        )
    for mode, values in (("gtid", start.gtid), ("tokens", start.tokens)):
        if start.mode == mode and not values:
            yield SpecProblem(
                f"{field}.{mode}",
                "InvalidStart",
                f"start.mode {mode} needs start.{mode}: each shard's name -> its "
                + ("GTID position, like {'-80': '0-1-42'}" if mode == "gtid" else "Event Token"),
            )
        if values and start.mode not in (mode, "resume"):
            yield SpecProblem(
                f"{field}.{mode}",
                "InvalidStart",
                f"start.{mode} is only read with start.mode {mode}; set mode: {mode} or remove "
                f"it (mode is {start.mode})",
            )
    yield from _position_problems(start)


def _position_problems(start: StartPosition) -> Iterator[SpecProblem]:
    """Each shard's GTID position or Event Token parses, under its own shard's name."""
    field = "spec.start"
    for shard, text in (start.gtid or {}).items():
        yield from _shard_key_problems(f"{field}.gtid", shard)
        try:
            parse_position(text)
        except UpdateStreamError as exc:
            yield SpecProblem(f"{field}.gtid[{shard}]", "InvalidStart", str(exc))
    for shard, token in (start.tokens or {}).items():
        yield from _shard_key_problems(f"{field}.tokens", shard)
        try:
            parsed = EventToken.from_json(token)
        except UpdateStreamError as exc:
            yield SpecProblem(
                f"{field}.tokens[{shard}]",
                "InvalidStart",
                f"{exc}; give an Event Token as the stream's status shows it, "
                '{"ts": 1700000000, "shard": "-80", "pos": "0-1-42"}',
            )
            continue
        if parsed.shard != shard:
            yield SpecProblem(
                f"{field}.tokens[{shard}]",
                "InvalidStart",
                f"the Event Token under shard {shard} is shard {parsed.shard}'s; "
                "list each token under its own shard",
            )


def _shard_key_problems(field: str, shard: str) -> Iterator[SpecProblem]:
    try:
        canonical = KeyRange.parse(shard).name
    except UpdateStreamError as exc:
        yield SpecProblem(field, "InvalidStart", f"{exc}; keys are shard names, like -80")
        return
    if canonical != shard:
        yield SpecProblem(
            field,
            "InvalidStart",
            f"shard {shard!r} is not written canonically; write {shard} as {canonical}",
        )


def _sink_problems(spec: UpdateStreamSpec) -> Iterator[SpecProblem]:
    paths: dict[str, int] = {}
    for index, sink in enumerate(spec.sinks):
        field = f"spec.sinks[{index}]"
        if isinstance(sink, MemcachedSink):
            yield from _memcached_problems(field, sink)
        elif isinstance(sink, VersionStreamSink):
            names = [("database", sink.database), ("table", sink.table)]
            yield from _sql_name_problems(field, names, "updatestream")
        elif isinstance(sink, MirrorSink):
            yield from _mirror_problems(field, sink)
        elif isinstance(sink, CDCv2Sink):
            if sink.path in paths:
                yield SpecProblem(
                    f"{field}.path",
                    "InvalidSink",
                    f"sinks {paths[sink.path]} and {index} both write CDCv2 files to "
                    f"{sink.path}; give each cdcv2 sink its own path",
                )
            paths.setdefault(sink.path, index)


def _mirror_problems(field: str, sink: MirrorSink) -> Iterator[SpecProblem]:
    names = [("database", sink.database), ("sourceDatabase", sink.source_database)]
    if sink.table_prefix:
        names.append(("tablePrefix", sink.table_prefix))
    yield from _sql_name_problems(field, names, "mirror")


def _sql_name_problems(
    field: str, names: Sequence[tuple[str, str | None]], example: str
) -> Iterator[SpecProblem]:
    """A problem for each of the sink's `names` (key, value) given and not a plain MySQL name."""
    for key, value in names:
        if value is not None and not _SQL_NAME.match(value):
            yield SpecProblem(
                f"{field}.{key}",
                "InvalidSink",
                f"{key} {value!r} is not a plain MySQL name; use 1 to 64 letters, "
                f"digits, _ or $, like {example}",
            )


def _memcached_problems(field: str, sink: MemcachedSink) -> Iterator[SpecProblem]:
    for index, server in enumerate(sink.servers):
        host, sep, port = server.rpartition(":")
        if not sep or not _HOST.match(host) or not port.isdigit():
            yield SpecProblem(
                f"{field}.servers[{index}]",
                "InvalidSink",
                f"memcached server {server!r} is not host:port; write it like mc-0:11211",
            )
        elif not 0 < int(port) < 65536:
            yield SpecProblem(
                f"{field}.servers[{index}]",
                "InvalidSink",
                f"memcached server {server!r} has port {port}, outside 1-65535; "
                f"write it like {host}:11211",
            )
    for key, templates, extra in (
        ("keyTemplate", sink.key_template, None),
        ("extraKeys", None, sink.extra_keys),
    ):
        try:
            KeyTemplates("", templates, extra)
        except UpdateStreamError as exc:
            yield SpecProblem(
                f"{field}.{key}",
                "InvalidSink",
                f"{exc}; write a key template like user:{{id}}, naming columns of the table",
            )


def _against_keyspace(spec: UpdateStreamSpec, keyspace: Keyspace) -> Iterator[SpecProblem]:
    name = keyspace.metadata.name
    sharded = bool(keyspace.spec.vschema.get("sharded", True))
    for key_range in spec.key_ranges:
        if not sharded and not key_range.is_complete:
            yield SpecProblem(
                "spec.keyRanges",
                "KeyRangeOutsideKeyspace",
                f"key range {key_range} is outside Keyspace {name}: it is unsharded (its only "
                "shard is -); use keyRanges: ['-']",
            )
    tables = keyspace.spec.vschema.get("tables") or {}
    known = set(tables) if isinstance(tables, dict) else set()
    unknown = [t for t in spec.tables if t not in known]
    if unknown and (known or sharded):
        listed = ", ".join(sorted(known)) or "none"
        yield SpecProblem(
            "spec.tables",
            "UnknownTable",
            f"tables {', '.join(unknown)} are not in the VSchema of Keyspace {name} (tables "
            f"there: {listed}); add them to the VSchema or remove them from spec.tables",
        )
    if known or sharded:  # an unsharded keyspace may list no tables: nothing to check against
        for index, sink in enumerate(spec.sinks):
            if isinstance(sink, MemcachedSink):
                where = f"spec.sinks[{index}]"
                yield from _template_problems(where, sink, spec, name, tables)


def _template_problems(
    where: str, sink: MemcachedSink, spec: UpdateStreamSpec, keyspace: str, tables: dict[str, Any]
) -> Iterator[SpecProblem]:
    """A key template names a table the stream reads, and, where the VSchema lists the
    table's columns authoritatively, columns of it. Other columns are checked by the job
    at its start, against the table on a shard."""
    named = [(f"keyTemplate.{t}", t, [text]) for t, text in sink.key_template.items()]
    named += [(f"extraKeys.{t}", t, list(texts)) for t, texts in sink.extra_keys.items()]
    for field, table, texts in named:
        if table not in tables:
            listed = ", ".join(sorted(tables)) or "none"
            yield SpecProblem(
                f"{where}.{field}",
                "UnknownTable",
                f"table {table!r} is not in the VSchema of Keyspace {keyspace} (tables there: "
                f"{listed}); key templates name tables the stream reads",
            )
            continue
        if spec.tables and table not in spec.tables:
            yield SpecProblem(
                f"{where}.{field}",
                "UnknownTable",
                f"table {table!r} is not one of the stream's tables ({', '.join(spec.tables)}), "
                "so its rows never reach the sink; add it to spec.tables or remove the template",
            )
            continue
        columns = _declared_columns(tables[table])
        if columns is None:
            continue
        for text in texts:
            missing = [c for c in _template_fields(text, table) if c not in columns]
            if missing:
                yield SpecProblem(
                    f"{where}.{field}",
                    "UnknownColumn",
                    f"key template {text!r} names {', '.join(map(repr, missing))}, not a column "
                    f"of table {table} in the VSchema (columns: {', '.join(sorted(columns))})",
                )


def _declared_columns(entry: Any) -> set[str] | None:
    """A table's columns when its VSchema entry lists them authoritatively
    (`column_list_authoritative: true` with `columns`), else None: not checkable here."""
    if not isinstance(entry, dict) or entry.get("column_list_authoritative") is not True:
        return None
    listed = entry.get("columns")
    if not isinstance(listed, list):
        return None
    names = {str(c["name"]) for c in listed if isinstance(c, dict) and "name" in c}
    for vindex in entry.get("column_vindexes") or []:
        if isinstance(vindex, dict):
            found = vindex.get("columns") or [vindex.get("column")]
            names.update(str(c) for c in found if c)
    return names


def _template_fields(text: str, table: str) -> tuple[str, ...]:
    try:
        return KeyTemplate.parse(text, table, constant=True).fields
    except UpdateStreamError:
        return ()  # malformed: _memcached_problems says so


def check_update_stream(
    stream: UpdateStream, keyspace: Keyspace | None = None, *, source: str = "UpdateStream"
) -> None:
    """Raise SpecError naming every problem of `stream` (and of it against `keyspace`)."""
    problems = stream_problems(stream.spec, keyspace)
    if problems:
        raise SpecError(f"invalid UpdateStream in {source}: {describe(problems)}")
