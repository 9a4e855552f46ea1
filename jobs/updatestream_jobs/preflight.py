"""What a job checks before it starts Spark: the sinks answer, and key templates name columns
that the tables really have.

Admission (`updatestream.validation`) checks what the spec and its Keyspace's VSchema can say:
a template's table is one the stream reads, and its columns are the table's where the VSchema
lists them authoritatively. What only the servers know is checked here, at the job's start, in
seconds rather than after Spark has started: each sink's address accepts a connection, and
each template's columns exist in the table on a serving shard of the job's key range. Every
failure names the field of the UpdateStream to correct.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import closing

import pymysql

from updatestream.binlog.errors import ShardUnreachable
from updatestream.cache.key_templates import KeyTemplate
from updatestream.contract.job_config import JobConfig
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.mysql_connections import connection_arguments
from updatestream.spec import MemcachedSink, MirrorSink, SpecError, VersionStreamSink

CONNECT_SECONDS = 5.0
_SYSTEM = ("mysql", "information_schema", "performance_schema", "sys", "_vt")


class SinkUnreachable(UpdateStreamError):
    """A sink's address does not accept connections (a relaunch may find it up)."""


def check(config: JobConfig, key_range: KeyRange) -> None:
    """Raise SinkUnreachable or SpecError naming the first field that cannot work."""
    for field, host, port, what in _addresses(config):
        _connectable(field, host, port, what)
    _template_columns(config, key_range)


def _addresses(config: JobConfig) -> Iterator[tuple[str, str, int, str]]:
    for index, sink in enumerate(config.stream.spec.sinks):
        field = f"spec.sinks[{index}]"
        if isinstance(sink, MemcachedSink):
            for n, server in enumerate(sink.servers):
                host, _, port = server.rpartition(":")
                yield f"{field}.servers[{n}]", host, int(port), f"memcached {server}"
        elif isinstance(sink, VersionStreamSink | MirrorSink):
            mysql = sink.mysql
            yield f"{field}.mysql", mysql.host, mysql.port, f"MySQL {mysql.host}:{mysql.port}"


def _connectable(field: str, host: str, port: int, what: str) -> None:
    try:
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SinkUnreachable(
            f"{field}: {what} does not answer ({reason}); check the address and port, and "
            "that the server runs and is reachable from the job"
        ) from None


def _template_columns(config: JobConfig, key_range: KeyRange) -> None:
    """Each key template's columns are columns of its table on a serving shard."""
    wanted: dict[str, list[tuple[str, KeyTemplate]]] = {}
    for index, sink in enumerate(config.stream.spec.sinks):
        if not isinstance(sink, MemcachedSink):
            continue
        field = f"spec.sinks[{index}]"
        for table, text in sink.key_template.items():
            parsed = KeyTemplate.parse(text, table)
            wanted.setdefault(table, []).append((f"{field}.keyTemplate.{table}", parsed))
        for table, texts in sink.extra_keys.items():
            for n, text in enumerate(texts):
                parsed = KeyTemplate.parse(text, table, constant=True)
                wanted.setdefault(table, []).append((f"{field}.extraKeys.{table}[{n}]", parsed))
    if not wanted:
        return
    columns = _columns(config, key_range, sorted(wanted))
    for table, templates in wanted.items():
        have = columns.get(table)
        for field, template in templates:
            if have is None:
                raise SpecError(
                    f"{field}: table {table!r} does not exist on the shards of Keyspace "
                    f"{config.keyspace.metadata.name}; name a table the stream reads"
                )
            missing = [c for c in template.fields if c not in have]
            if missing:
                raise SpecError(
                    f"{field}: key template {template.text!r} names column "
                    f"{', '.join(map(repr, missing))}, which table {table} does not have "
                    f"(columns: {', '.join(sorted(have))}); name columns of the table"
                )


def _columns(config: JobConfig, key_range: KeyRange, tables: list[str]) -> dict[str, set[str]]:
    """Table -> its columns, read from the first serving shard of the key range."""
    spec = config.keyspace.spec
    shard = spec.shard(spec.serving_map.shards_for(key_range)[0].name)
    arguments = connection_arguments(
        shard.mysql, config.secrets_dir, shard.credentials_secret, database="information_schema"
    )
    marks = ", ".join(["%s"] * len(tables))
    system = ", ".join(["%s"] * len(_SYSTEM))
    query = (
        "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_NAME IN "
        f"({marks}) AND TABLE_SCHEMA NOT IN ({system})"
    )
    try:
        with closing(pymysql.connect(**arguments)) as conn, conn.cursor() as cur:
            cur.execute(query, (*tables, *_SYSTEM))
            rows = cur.fetchall()
    except pymysql.MySQLError as exc:
        raise ShardUnreachable(
            f"cannot read the columns of {', '.join(tables)} on shard {shard.name} "
            f"({shard.mysql.host}:{shard.mysql.port}): {exc.args[-1]}"
        ) from None
    found: dict[str, set[str]] = {}
    for table, column in rows:
        found.setdefault(str(table), set()).add(str(column))
    return found
