"""The Vitess cluster as the project sees a keyspace: a Keyspace manifest and Secrets as files.

Like the development cluster's, with one shard per primary tablet: its endpoint is that tablet's
mysqld (MySQL 8, `flavor: mysql`), read with the `<keyspace>-binlog-reader` account that every
tablet's mysqld holds. `servingShards` follows the keyspace's serving partition in Vitess, and
`shardMapHistory` gains an entry each time a Reshard switches traffic.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.cluster import atomic_write


def ensure_secret(secrets_dir: Path, keyspace: str, role: sample_schema.Role) -> spec.Credentials:
    """The credentials of one of the keyspace's roles, created with a random password once."""
    user = sample_schema.user_specs(keyspace, "mysql")[role]
    ref = spec.SecretRef(name=sample_schema.secret_name(keyspace, role))
    folder = secrets_dir / ref.name
    if not (folder / "password").exists():
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(secrets_dir, 0o700)
        os.chmod(folder, 0o700)
        atomic_write(folder / "username", user.username, mode=0o600)
        atomic_write(folder / "password", secrets.token_urlsafe(24), mode=0o600)
    return spec.read_credentials(secrets_dir, ref)


def write_manifest(
    path: Path,
    *,
    keyspace: str,
    endpoints: dict[str, int],
    serving: Sequence[str],
    history: list[dict[str, Any]] | None = None,
) -> spec.Keyspace:
    """Write the Keyspace manifest (validated, temp file and rename).

    `endpoints` maps each shard with a primary tablet to its mysqld port; `history` defaults to
    the manifest's own history, or one entry for a new keyspace.
    """
    current = spec.load_keyspace(path) if path.exists() else None
    if history is None:
        history = (
            [e.model_dump() for e in current.spec.shard_map_history]
            if current
            else [{"at": time.time(), "shards": list(serving)}]
        )
    ShardMap(KeyRange.parse(name) for name in serving)  # complete, no overlap
    reader = sample_schema.secret_name(keyspace, "reader")
    data = {
        "apiVersion": spec.API_VERSION,
        "kind": "Keyspace",
        "metadata": {"name": keyspace},
        "spec": {
            "shards": [
                {
                    "name": name,
                    "mysql": {"host": "127.0.0.1", "port": endpoints[name]},
                    "credentialsSecret": {"name": reader},
                    "flavor": "mysql",
                }
                for name in _ordered(endpoints)
            ],
            "vschema": sample_schema.VSCHEMA,
            "servingShards": _ordered(serving),
            "shardMapHistory": history,
        },
    }
    parsed = spec.parse_keyspace(data, source=str(path))
    atomic_write(path, spec.dump_keyspace(parsed))
    return parsed


def switch_serving(path: Path, serving: Sequence[str], endpoints: dict[str, int]) -> None:
    """Record that `serving` serves from now on (a new history entry), if it changed."""
    current = spec.load_keyspace(path)
    if sorted(current.spec.serving_shards) == sorted(serving):
        write_manifest(path, keyspace=current.metadata.name, endpoints=endpoints, serving=serving)
        return
    history = [e.model_dump() for e in current.spec.shard_map_history]
    history.append({"at": time.time(), "shards": _ordered(serving)})
    write_manifest(
        path,
        keyspace=current.metadata.name,
        endpoints=endpoints,
        serving=serving,
        history=history,
    )


def _ordered(names: Sequence[str] | dict[str, int]) -> list[str]:
    return [r.name for r in sorted(KeyRange.parse(n) for n in names)]
