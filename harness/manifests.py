"""Keyspace and UpdateStream documents as the tests and benchmarks write them: what a user
applies, with the parts that vary as arguments."""

from __future__ import annotations

from typing import Any

from updatestream.spec import API_VERSION


def document(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A custom resource of `kind` named `name`."""
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def shard(
    name: str, host: str, port: int, secret: str, flavor: str | None = None
) -> dict[str, Any]:
    """A shard of a Keyspace: its server, the Secret to read it with, and its flavor if given."""
    entry: dict[str, Any] = {
        "name": name,
        "mysql": {"host": host, "port": port},
        "credentialsSecret": {"name": secret},
    }
    if flavor is not None:
        entry["flavor"] = flavor
    return entry


def keyspace(
    shards: list[dict[str, Any]],
    vschema: dict[str, Any],
    *,
    name: str = "commerce",
    serving: list[str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Keyspace of `shards` (see `shard`), all of them serving unless `serving` says which."""
    serving_shards = [entry["name"] for entry in shards] if serving is None else serving
    return document(
        "Keyspace",
        name,
        {"shards": shards, "servingShards": serving_shards, "vschema": vschema, **spec},
    )


def update_stream(name: str, *, keyspace: str = "commerce", **spec: Any) -> dict[str, Any]:
    """An UpdateStream of `keyspace` with the rest of its `spec`."""
    return document("UpdateStream", name, {"keyspace": keyspace, **spec})
