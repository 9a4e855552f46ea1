"""Readers that turn each sink's contents into the records of `verify.compare`.

* Version Stream: every version of one stream, in version order, with its origin.
* CDCv2: the files of a stream directory through the CDCv2 reader, as the reconstructed
  multiset and the distinct updates; and each file's updates and progress statements as
  written, for the check of the progress statements.
* memcached: the entry of every row key the ledger touched, and the rows the serving shards
  hold now (read through the Keyspace manifest).

Row images are compared by digest: sha256 of the image's compact JSON with the columns in table
order, which is the ledger's digest (`updatestream_cli.devcluster.ledger`). Errors are
:class:`~updatestream_cli.verify.inputs.VerifyInputError` naming the address and the Secret, never a
password.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors

from updatestream import spec
from updatestream.cache.entry import EntryError, decode
from updatestream.cache.key_templates import KeyTemplateError, KeyTemplates
from updatestream.cache.transport import CacheAddressError, Servers
from updatestream.cdcv2.format import (
    CDCv2FormatError,
    Progress,
    canonical,
    read_file,
    stream_files,
)
from updatestream.cdcv2.reader import Collection, OrderedReader
from updatestream.core.token import EventToken, TokenError
from updatestream.mysql_connections import connection_arguments
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.ledger import RowKey, table_state
from updatestream_cli.verify.compare import (
    BatchFile,
    CachedEntry,
    Delivered,
    FinalRow,
    RowUpdate,
)
from updatestream_cli.verify.inputs import VerifyInputError

_ACCESS_DENIED = {1044, 1045, 1142}


def digest_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def image_digest(table: str, row: Mapping[str, Any]) -> str:
    """The ledger digest of a decoded JSON row image: columns in table order (the sample
    schema's; other tables keep the order they come in)."""
    order = [c for c in sample_schema.COLUMNS.get(table, ()) if c in row]
    ordered = {c: row[c] for c in order} | {c: v for c, v in row.items() if c not in order}
    return digest_text(json.dumps(ordered, separators=(",", ":")))


def pk_text(table: str, pk: Mapping[str, Any]) -> str:
    """The ledger's primary-key JSON: key columns in key order."""
    order = [c for c in sample_schema.PRIMARY_KEYS.get(table, ()) if c in pk]
    ordered = {c: pk[c] for c in order} | {c: v for c, v in pk.items() if c not in order}
    return json.dumps(ordered, separators=(",", ":"))


# -- MySQL connections ---------------------------------------------------------------------------


@contextlib.contextmanager
def connect(
    endpoint: spec.MySQLEndpoint,
    credentials: spec.Credentials,
    secret: str,
    database: str | None = None,
    *,
    secrets_dir: Path,
) -> Iterator[pymysql.connections.Connection[Any]]:
    where = f"{endpoint.host}:{endpoint.port}"
    arguments = connection_arguments(
        endpoint, secrets_dir, spec.SecretRef(name=secret), database=database, read_timeout=120
    )
    try:
        conn = pymysql.connect(**arguments)
    except pymysql.err.MySQLError as exc:
        raise _mysql_error(exc, where, credentials.username, secret) from None
    try:
        yield conn
    except pymysql.err.MySQLError as exc:
        raise _mysql_error(exc, where, credentials.username, secret) from None
    finally:
        conn.close()


def _mysql_error(
    exc: pymysql.err.MySQLError, where: str, user: str, secret: str
) -> VerifyInputError:
    code = exc.args[0] if exc.args else None
    message = str(exc.args[1]) if len(exc.args) > 1 else type(exc).__name__
    if code in _ACCESS_DENIED:
        return VerifyInputError(
            f"{where} refused user {user!r} from Secret {secret!r} ({message}); check the "
            "Secret's username and password and the user's grants"
        )
    if code in (2003, 2013):
        return VerifyInputError(f"cannot connect to MySQL at {where}: {message}")
    return VerifyInputError(f"MySQL at {where} (user {user!r}): error {code}: {message}")


def read_secret(secrets_dir: Path, name: str) -> spec.Credentials:
    try:
        return spec.read_credentials(secrets_dir, spec.SecretRef(name=name))
    except spec.SpecError as exc:
        raise VerifyInputError(str(exc)) from None


# -- Version Stream ------------------------------------------------------------------------------


def parse_origin(text: str | None) -> tuple[str | None, str | None]:
    """(origin shard, GTID position) of an origin column ``<shard> <position> <row>[ part N]``."""
    if not text:
        return None, None
    parts = text.split(" ")
    if len(parts) < 3:
        return None, None
    return parts[0], parts[1]


def read_versionstream(
    endpoint: spec.MySQLEndpoint,
    credentials: spec.Credentials,
    *,
    secrets_dir: Path,
    secret: str,
    database: str,
    table: str,
    stream: int,
) -> list[Delivered]:
    """Every version of ``stream`` in version order."""
    for name in (database, table):
        if not name.replace("_", "").replace("$", "").isalnum():
            raise VerifyInputError(f"invalid database or table name {name!r}")
    records: list[Delivered] = []
    with (
        connect(endpoint, credentials, secret, secrets_dir=secrets_dir) as conn,
        conn.cursor(pymysql.cursors.SSCursor) as cur,
    ):
        cur.execute(
            f"SELECT version, entity, data, origin FROM `{database}`.`{table}` "
            "WHERE stream = %s ORDER BY version",
            (stream,),
        )
        for version, entity, data, origin in cur:
            table_name, _, pk = str(entity).partition(":")
            shard, position = parse_origin(origin)
            records.append(
                Delivered(
                    seq=int(version),
                    table=table_name,
                    pk=pk,
                    digest=None if data is None else digest_text(str(data)),
                    origin_shard=shard,
                    origin_position=position,
                )
            )
    return records


# -- CDCv2 ---------------------------------------------------------------------------------------


def stream_directories(path: Path) -> list[Path]:
    """The stream directories at or under ``path``: the directory itself if it holds batch
    files, else every ``range=<key range>`` directory below it."""
    if not path.is_dir():
        raise VerifyInputError(f"CDCv2 path {path} is not a directory")
    if stream_files(path):
        return [path]
    found = sorted(p for p in path.rglob("range=*") if p.is_dir() and stream_files(p))
    if not found:
        raise VerifyInputError(
            f"CDCv2 path {path} holds no batch files (batch-*.jsonl or .parquet) in it or in "
            "a range=<key range> directory under it"
        )
    return found


def read_cdcv2(path: Path) -> tuple[list[FinalRow], list[RowUpdate]]:
    """The reconstructed rows (datum, multiplicity) and every distinct update reported, over
    all stream directories found at ``path`` (see :func:`stream_directories`)."""
    collection = Collection()
    updates: list[RowUpdate] = []
    try:
        for directory in stream_directories(path):
            reader = OrderedReader()
            for file in stream_files(directory):
                for completed in reader.push_all(read_file(file)):
                    collection.apply(completed)
                    for update in completed.updates:
                        table, pk, digest = _row_of(update.data)
                        updates.append(RowUpdate(table, pk, digest, update.time, update.diff))
    except CDCv2FormatError as exc:
        raise VerifyInputError(f"CDCv2 files under {path} cannot be read: {exc}") from None
    except OSError as exc:
        raise VerifyInputError(f"cannot read CDCv2 files under {path}: {exc}") from None
    rows = []
    for text, count in collection.multiplicities().items():
        table, pk, digest = _row_of(json.loads(text))
        rows.append(FinalRow(table, pk, digest, count))
    return rows, updates


def read_cdcv2_batches(path: Path) -> list[list[BatchFile]]:
    """Per stream directory at or under ``path``, its batch files in batch order, each with its
    updates and progress statements as written (for :func:`compare.check_progress`)."""
    found: list[list[BatchFile]] = []
    try:
        for directory in stream_directories(path):
            batches = []
            for file in stream_files(directory):
                updates: list[RowUpdate] = []
                progress = []
                for statement in read_file(file):
                    if isinstance(statement, Progress):
                        progress.append((statement.lower, statement.upper, statement.counts))
                    else:
                        table, pk, digest = _row_of(statement.data)
                        updates.append(RowUpdate(table, pk, digest, statement.time, statement.diff))
                batches.append(BatchFile(file.name, tuple(updates), tuple(progress)))
            found.append(batches)
    except CDCv2FormatError as exc:
        raise VerifyInputError(f"CDCv2 files under {path} cannot be read: {exc}") from None
    except OSError as exc:
        raise VerifyInputError(f"cannot read CDCv2 files under {path}: {exc}") from None
    return found


def _row_of(data: Any) -> tuple[str, str, str]:
    if not isinstance(data, dict) or not isinstance(data.get("row"), dict):
        raise CDCv2FormatError(
            f"update datum {canonical(data)[:120]} is not a change-stream row "
            '({"table", "pk", "row"})'
        )
    table = str(data.get("table"))
    pk = data.get("pk")
    return (
        table,
        pk_text(table, pk if isinstance(pk, dict) else {}),
        image_digest(table, data["row"]),
    )


# -- memcached -----------------------------------------------------------------------------------


def cache_keys(
    keyspace: str, keys: Sequence[RowKey], templates: Mapping[str, str]
) -> dict[str, RowKey]:
    """Cache key -> row key, as the memcached sink renders them."""
    try:
        rendering = KeyTemplates(keyspace, templates)
        return {rendering.key(table, json.loads(pk)): (table, pk) for table, pk in keys}
    except KeyTemplateError as exc:
        raise VerifyInputError(str(exc)) from None


def read_cache(
    servers: Sequence[str], keys: Mapping[str, RowKey], chunk: int = 500
) -> dict[RowKey, CachedEntry]:
    """The entries present for ``keys`` (cache key -> row key)."""
    try:
        routing = Servers(servers, timeout=10.0)
    except CacheAddressError as exc:
        raise VerifyInputError(str(exc)) from None
    found: dict[RowKey, CachedEntry] = {}
    token_cache: dict[str, Any] = {}
    try:
        for server, names in routing.split(list(keys)).items():
            client = routing.clients[server]
            for start in range(0, len(names), chunk):
                try:
                    values = client.get_many(names[start : start + chunk])
                except Exception as exc:  # pymemcache raises several kinds, and OSError
                    raise VerifyInputError(
                        f"memcached {server} cannot be read: {type(exc).__name__}: {exc}"
                    ) from None
                for name, raw in values.items():
                    entry = decode(raw, name)
                    token = token_cache.get(entry.token_text)
                    if token is None:
                        token = token_cache[entry.token_text] = EventToken.loads(entry.token_text)
                    found[keys[name]] = CachedEntry(token, entry.value)
    except (EntryError, TokenError) as exc:
        raise VerifyInputError(str(exc)) from None
    finally:
        routing.close()
    return found


def value_digest(value: bytes) -> str | None:
    """The digest a cached value stands for: the value is the row as the change stream encodes
    it (compact JSON, columns in table order); ``null`` stands for a deleted row."""
    if value.strip() == b"null":
        return None
    return hashlib.sha256(value).hexdigest()


def shard_rows(
    keyspace: spec.Keyspace,
    secrets_dir: Path,
    secret: str,
    database: str,
    tables: Sequence[str],
    shards: Sequence[str] | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(table, SELECT row) of ``tables`` on ``shards`` (default: the serving shards)."""
    credentials = read_secret(secrets_dir, secret)
    for shard_name in keyspace.spec.serving_shards if shards is None else shards:
        try:
            shard = keyspace.spec.shard(shard_name)
        except spec.SpecError as exc:
            raise VerifyInputError(str(exc)) from None
        with connect(shard.mysql, credentials, secret, database, secrets_dir=secrets_dir) as conn:
            for table in tables:
                with conn.cursor(pymysql.cursors.SSDictCursor) as cur:
                    cur.execute(f"SELECT * FROM `{table}`")
                    yield from ((table, row) for row in cur)


def read_database(
    keyspace: spec.Keyspace,
    secrets_dir: Path,
    secret: str,
    database: str,
    tables: Sequence[str],
) -> dict[RowKey, str]:
    """Digest per row of ``tables`` on the serving shards (comparable with the ledger)."""
    return table_state(shard_rows(keyspace, secrets_dir, secret, database, tables))
