"""UpdateStream and Keyspace manifests as a user writes them, for the demo, the tests and the
benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from updatestream.spec import API_VERSION


def update_stream(
    name: str,
    keyspace: str,
    start: dict[str, Any],
    sinks: Sequence[dict[str, Any]],
    key_ranges: Sequence[str] = ("-",),
    **more: Any,
) -> dict[str, Any]:
    """An `UpdateStream` of `keyspace`'s `key_ranges` from `start` into `sinks`; `more` adds
    spec fields (`tables`, ...)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "UpdateStream",
        "metadata": {"name": name},
        "spec": {
            "keyspace": keyspace,
            "keyRanges": list(key_ranges),
            "start": start,
            "sinks": list(sinks),
            **more,
        },
    }


def shard(
    name: str, host: str, port: int | None, secret: str, flavor: str | None = None
) -> dict[str, Any]:
    """A shard of a Keyspace: its server (the default port if None), the Secret to read it
    with, and its flavor if given."""
    mysql: dict[str, Any] = {"host": host} if port is None else {"host": host, "port": port}
    entry: dict[str, Any] = {"name": name, "mysql": mysql, "credentialsSecret": {"name": secret}}
    if flavor is not None:
        entry["flavor"] = flavor
    return entry


def keyspace(
    shards: list[dict[str, Any]],
    vschema: dict[str, Any],
    *,
    name: str = "commerce",
    namespace: str | None = None,
    serving: list[str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Keyspace of `shards` (see `shard`), all of them serving unless `serving` says which."""
    serving_shards = [entry["name"] for entry in shards] if serving is None else serving
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {
        "apiVersion": API_VERSION,
        "kind": "Keyspace",
        "metadata": metadata,
        "spec": {"shards": shards, "servingShards": serving_shards, "vschema": vschema, **spec},
    }


def database_sink(
    kind: str, host: str, port: int, database: str, secret: str, **options: Any
) -> dict[str, Any]:
    """A sink of `kind` (`mirror`, `versionStream`) writing into `database` on a server, with
    the Secret `secret`."""
    return {
        "type": kind,
        "mysql": {"host": host, "port": port},
        "database": database,
        "credentialsSecret": {"name": secret},
        **options,
    }
