"""A development cluster: one local server per shard (MariaDB or MySQL 8, one flavor for the whole
cluster), its Keyspace manifest and its Secrets.

Directory layout (`D`, default `.updatestream/devcluster`):

    D/keyspace.yaml            the Keyspace manifest (`updatestream.spec.Keyspace`)
    D/secrets/<name>/username  credentials as files, the layout of a mounted Kubernetes Secret
    D/secrets/<name>/password
    D/state.json               flavor, bind address, and the servers this directory started:
                               pid, port, server id (and MariaDB domain id)
    D/shards/<shard>/          one server: data/, socket, pid file, error.log
    D/workflows/<name>.json    resharding workflow state (see `reshard`)
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.core.keyrange import KeyRange, parse_shard_names
from updatestream.core.shardmap import ShardMap
from updatestream.local_ports import LOOPBACK
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.cluster_directory import ClusterDirectory
from updatestream_cli.devcluster.errors import ClusterStateError
from updatestream_cli.devcluster.local_server import (
    FLAVORS,
    Connection,
    LocalServer,
    ServerFlavor,
    check_bind_address,
    pid_cmdline,
)
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.mysql_server import MySQLServer

DEFAULT_DIR = Path(".updatestream") / "devcluster"
DEFAULT_KEYSPACE = "commerce"


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, then rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def shard_dir_name(shard: str) -> str:
    """Directory name of a shard: `-80` -> `x-80`, `-` -> `x-x` (a leading dash upsets tools)."""
    start, _, end = shard.partition("-")
    return f"{start or 'x'}-{end or 'x'}"


class DevCluster(ClusterDirectory):
    """The servers, manifest and Secrets under one directory.

    `flavor` and `bind_address` choose the servers of a new cluster (default MariaDB on
    127.0.0.1); an existing cluster keeps those it was made with, and `up` refuses others.
    """

    state_error = ClusterStateError
    unreadable_hint = "stop any servers by hand and remove the directory"

    def __init__(
        self,
        directory: Path | str = DEFAULT_DIR,
        keyspace: str = DEFAULT_KEYSPACE,
        *,
        flavor: ServerFlavor | None = None,
        bind_address: str | None = None,
    ):
        super().__init__(directory)
        self.workflows_dir = self.dir / "workflows"
        self.keyspace_name = keyspace
        self._asked = {"flavor": flavor, "bind_address": bind_address}
        self.flavor: ServerFlavor = flavor or "mariadb"
        self.bind_address = bind_address or LOOPBACK
        state = self._read_state()
        if state is not None:
            self.keyspace_name = state.get("keyspace", keyspace)
            self.flavor = state.get("flavor", "mariadb")
            self.bind_address = state.get("bind_address", LOOPBACK)

    # -- state ----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        state = self._read_state()
        if state is None:
            raise ClusterStateError(
                f"no development cluster in {self.dir}; run `updatestream devcluster up "
                f"--dir {self.dir}` first"
            )
        return state

    def _write_state(self, state: dict[str, Any]) -> None:
        atomic_write(self.state_path, json.dumps(state, indent=2, sort_keys=True) + "\n")

    def shard_names(self) -> list[str]:
        """Every shard with a server (serving or not), in key-range order."""
        names = list(self.state().get("servers", {}))
        return [r.name for r in sorted(KeyRange.parse(n) for n in names)]

    def _server_of(self, name: str, info: dict[str, Any]) -> LocalServer:
        """The server of shard `name` as the cluster state records it."""
        common: dict[str, Any] = {
            "base_dir": self.dir / "shards" / shard_dir_name(name),
            "server_id": info["server_id"],
            "port": info["port"],
            "name": name,
            "pid": info.get("pid"),
            "bind_address": self.bind_address,
        }
        if self.flavor == "mysql":
            return MySQLServer(**common)
        return MariaDBServer(domain_id=info["domain_id"], **common)

    def server(self, shard: str) -> LocalServer:
        name = KeyRange.parse(shard).name
        info = self.state().get("servers", {}).get(name)
        if info is None:
            raise ClusterStateError(
                f"shard {name} has no server in {self.dir} "
                f"(shards: {', '.join(self.shard_names())})"
            )
        return self._server_of(name, info)

    # -- credentials ----------------------------------------------------------------------------

    def secret_ref(self, role: sample_schema.Role) -> spec.SecretRef:
        return spec.SecretRef(name=sample_schema.secret_name(self.keyspace_name, role))

    def credentials(self, role: sample_schema.Role) -> spec.Credentials:
        return spec.read_credentials(self.secrets_dir, self.secret_ref(role))

    def _ensure_secrets(self) -> dict[sample_schema.Role, str]:
        passwords: dict[sample_schema.Role, str] = {}
        for role, user in self._users().items():
            folder = self.secrets_dir / sample_schema.secret_name(self.keyspace_name, role)
            if (folder / "password").exists():
                passwords[role] = self.credentials(role).password
                continue
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o700)
            passwords[role] = secrets.token_urlsafe(24)
            atomic_write(folder / "username", user.username, mode=0o600)
            atomic_write(folder / "password", passwords[role], mode=0o600)
        return passwords

    def _users(self) -> dict[sample_schema.Role, sample_schema.UserSpec]:
        return sample_schema.user_specs(self.keyspace_name, self.flavor)

    def connect(
        self,
        shard: str,
        role: sample_schema.Role = "admin",
        database: str | None = None,
        **kwargs: Any,
    ) -> Connection:
        creds = self.credentials(role)
        return self.server(shard).connect(creds.username, creds.password, database, **kwargs)

    # -- manifest -------------------------------------------------------------------------------

    def keyspace(self) -> spec.Keyspace:
        return spec.load_keyspace(self.manifest_path)

    def serving_map(self) -> ShardMap:
        return self.keyspace().spec.serving_map

    def write_manifest(
        self,
        *,
        shards: Sequence[str] | None = None,
        serving: Sequence[str] | None = None,
        history: list[dict[str, Any]] | None = None,
    ) -> spec.Keyspace:
        """Rewrite the manifest atomically (temp file + rename), validated by the spec model."""
        current = self.keyspace() if self.manifest_path.exists() else None
        state = self.state()
        if shards is None:
            shards = [s.name for s in current.spec.shards] if current else list(state["servers"])
        if serving is None:
            serving = list(current.spec.serving_shards) if current else list(shards)
        if history is None:
            history = (
                [e.model_dump() for e in current.spec.shard_map_history]
                if current
                else [{"at": time.time(), "shards": list(serving)}]
            )
        ShardMap(KeyRange.parse(n) for n in serving)  # validates: complete, no overlap
        ordered = [r.name for r in sorted(KeyRange.parse(n) for n in shards)]
        reader = self.secret_ref("reader")
        data = {
            "apiVersion": spec.API_VERSION,
            "kind": "Keyspace",
            "metadata": {"name": self.keyspace_name},
            "spec": {
                "shards": [
                    {
                        "name": name,
                        "mysql": {
                            "host": self.bind_address,
                            "port": state["servers"][name]["port"],
                        },
                        "credentialsSecret": {"name": reader.name},
                        "flavor": self.flavor,
                    }
                    for name in ordered
                ],
                "vschema": sample_schema.VSCHEMA,
                "servingShards": [r.name for r in sorted(KeyRange.parse(n) for n in serving)],
                "shardMapHistory": history,
            },
        }
        keyspace = spec.parse_keyspace(data, source=str(self.manifest_path))
        atomic_write(self.manifest_path, spec.dump_keyspace(keyspace))
        return keyspace

    # -- lifecycle ------------------------------------------------------------------------------

    def up(self, shards: str | None = None) -> list[str]:
        """Start (or restart) every shard's server; idempotent. Returns the shards it started.

        `shards` is the serving shard map of a new cluster (default `-80,80-`); for an existing
        cluster it may be omitted, and must match the serving shards when given.
        """
        existing = self._read_state()
        if shards is None and existing is not None and self.manifest_path.exists():
            shards = ",".join(self.keyspace().spec.serving_shards)
        shards = shards or "-80,80-"
        wanted = [r.name for r in parse_shard_names(shards)]
        ShardMap(KeyRange.parse(n) for n in wanted)
        started: list[str] = []
        with self.locked():
            state = self._read_state()
            if state is None:
                self._check_new_servers()
                state = {
                    "keyspace": self.keyspace_name,
                    "flavor": self.flavor,
                    "bind_address": self.bind_address,
                    "servers": {},
                    "next_id": 1,
                }
                self._write_state(state)
            self._check_asked(state)
            if self.manifest_path.exists():
                serving = list(self.keyspace().spec.serving_shards)
                if sorted(serving) != sorted(wanted) and state["servers"]:
                    raise ClusterStateError(
                        f"the cluster in {self.dir} serves {','.join(serving)}, not {shards}; "
                        "run `up` without --shards, or `down --purge` first"
                    )
            passwords = self._ensure_secrets()
            for name in [*state["servers"], *[n for n in wanted if n not in state["servers"]]]:
                if self._start_shard(name, passwords):
                    started.append(name)
            if not self.manifest_path.exists():
                self.write_manifest(shards=wanted, serving=wanted)
        return started

    def _check_new_servers(self) -> None:
        if self.flavor not in FLAVORS:
            raise ClusterStateError(
                f"unknown server flavor {self.flavor!r}; use one of {', '.join(FLAVORS)}"
            )
        check_bind_address(self.bind_address)
        self._users()  # the keyspace name fits this flavor's user names

    def _check_asked(self, state: dict[str, Any]) -> None:
        """An existing cluster keeps its flavor and bind address: refuse others."""
        recorded = {
            "flavor": state.get("flavor", "mariadb"),
            "bind_address": state.get("bind_address", LOOPBACK),
        }
        for key, asked in self._asked.items():
            if asked is not None and asked != recorded[key]:
                option = "--flavor" if key == "flavor" else "--host"
                raise ClusterStateError(
                    f"the cluster in {self.dir} was made with {option} {recorded[key]}, not "
                    f"{asked}; run `up` without {option}, or `down --purge` first"
                )

    def add_shard(self, shard: str) -> LocalServer:
        """Create and start one more shard server (not serving) with the schema and users."""
        with self.locked():
            passwords = self._ensure_secrets()
            self._start_shard(KeyRange.parse(shard).name, passwords)
            current = self.keyspace()
            names = [s.name for s in current.spec.shards]
            if shard not in names:
                self.write_manifest(shards=[*names, KeyRange.parse(shard).name])
        return self.server(shard)

    def _start_shard(self, name: str, passwords: dict[sample_schema.Role, str]) -> bool:
        state = self.state()
        info = state["servers"].get(name)
        if info is None:
            ident = state["next_id"]
            state["next_id"] = ident + 1
            info = {"server_id": ident, "domain_id": ident, "port": None, "provisioned": False}
            state["servers"][name] = info
        server = self._server_of(name, info)
        if server.pid is not None and str(server.datadir) not in pid_cmdline(server.pid):
            server.pid = None
        if server.is_running() and info.get("provisioned"):
            return False
        if not server.is_running():
            server.start()
        info["port"], info["pid"] = server.port, server.pid
        self._write_state(state)
        if not info.get("provisioned"):
            with server.root_connect() as conn, conn.cursor() as cur:
                for stmt in sample_schema.schema_statements():
                    cur.execute(stmt)
            # Accounts go around the binlog: it would keep their passwords for every reader.
            for role, user in self._users().items():
                server.create_account(user.username, passwords[role], user.grants)
            info["provisioned"] = True
            self._write_state(state)
        return True

    def down(self, shards: Sequence[str] | None = None) -> list[str]:
        """Stop the servers this directory started (by recorded pid), all at the same time
        (each shuts down cleanly, which takes MySQL seconds). Data stays."""
        stopped: list[str] = []
        with self.locked():
            state = self._read_state()
            if state is None:
                return stopped
            running = []
            for name, info in state["servers"].items():
                if shards is not None and name not in shards:
                    continue
                server = self.server(name)
                if server.is_running():
                    running.append(server)
                    stopped.append(name)
                info["pid"] = None
            with ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
                list(pool.map(lambda server: server.stop(), running))
            self._write_state(state)
        return stopped

    def retire(self, shards: Sequence[str]) -> None:
        """Stop non-serving shards' servers and drop them from the manifest (history stays)."""
        names = [KeyRange.parse(s).name for s in shards]
        keyspace = self.keyspace()
        for name in names:
            if name in keyspace.spec.serving_shards:
                raise ClusterStateError(
                    f"shard {name} is still serving; reshard it away before retiring it"
                )
            self.server(name)  # raises for unknown shards
        self.down(names)
        with self.locked():
            state = self.state()
            for name in names:
                state["servers"].pop(name, None)
                state.setdefault("retired", []).append(name)
                # Keep the data for inspection, out of the way of a future shard of that name.
                folder = self.dir / "shards" / shard_dir_name(name)
                if folder.exists():
                    (self.dir / "retired").mkdir(exist_ok=True)
                    folder.rename(self.dir / "retired" / f"{folder.name}.{int(time.time())}")
            self._write_state(state)
            kept = [s.name for s in keyspace.spec.shards if s.name not in names]
            self.write_manifest(shards=kept)
