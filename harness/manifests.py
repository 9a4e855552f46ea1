"""Keyspace and UpdateStream documents as the tests and benchmarks write them: what a user
applies, with the parts that vary as arguments."""

from __future__ import annotations

from typing import Any

from updatestream.spec import API_VERSION


def document(
    kind: str, name: str, spec: dict[str, Any], namespace: str | None = None
) -> dict[str, Any]:
    """A custom resource of `kind` named `name` (in `namespace` if given)."""
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


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
    return document(
        "Keyspace",
        name,
        {"shards": shards, "servingShards": serving_shards, "vschema": vschema, **spec},
        namespace,
    )


def update_stream(name: str, *, keyspace: str = "commerce", **spec: Any) -> dict[str, Any]:
    """An UpdateStream of `keyspace` with the rest of its `spec`."""
    return document("UpdateStream", name, {"keyspace": keyspace, **spec})


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
