"""A local Vitess cluster: etcd, vtctld, vtgate and one primary tablet per shard, by directory.

`VitessCluster(D).up("-80,80-")` starts (or restarts) everything and leaves the sample keyspace
serving through vtgate; `down()` stops every process it recorded, by pid; `add_tablets` and
`remove_tablets` are what a Reshard needs (see `reshard`). The directory layout is in
`environment`. Everything listens on 127.0.0.1 and runs as the service user (`runtime`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.core.keyrange import KeyRange, parse_shard_names
from updatestream.core.shardmap import ShardMap
from updatestream.local_ports import free_port
from updatestream.vitess_topology import VitessTopology, resolved_keyspace
from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.cluster import atomic_write
from updatestream_cli.devcluster.cluster_directory import ClusterDirectory
from updatestream_cli.vitess import manifest, provisioning, runtime
from updatestream_cli.vitess.environment import ClusterEnv
from updatestream_cli.vitess.errors import VitessStateError
from updatestream_cli.vitess.tablets import Tablet, template_datadir
from updatestream_cli.vitess.topo_server import Etcd
from updatestream_cli.vitess.vtctld import Vtctld
from updatestream_cli.vitess.vtctldclient import Vtctldclient
from updatestream_cli.vitess.vtgate import Vtgate

DEFAULT_DIR = Path(".updatestream") / "vitess"
DEFAULT_KEYSPACE = "commerce"
DEFAULT_CELL = "zone1"
_FIRST_UID = 100


def holds_vitess_cluster(directory: Path) -> bool:
    """Whether `directory` holds the state a Vitess cluster's `up` wrote (its cell and tablets),
    as against a development cluster's."""
    try:
        state = json.loads(ClusterDirectory(directory).state_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and "cell" in state and "tablets" in state


class VitessCluster(ClusterDirectory):
    """The processes, manifest and Secrets of one cluster directory."""

    state_error = VitessStateError
    unreadable_hint = "stop its processes by hand and remove the directory"

    def __init__(self, directory: Path | str = DEFAULT_DIR, keyspace: str = DEFAULT_KEYSPACE):
        super().__init__(directory)
        self.state: dict[str, Any] = self._read_state() or {
            "keyspace": keyspace,
            "cell": DEFAULT_CELL,
            "next_uid": _FIRST_UID,
            "tablets": {},
        }
        self.keyspace: str = self.state["keyspace"]
        self.timings: dict[str, float] = {}
        self._env: ClusterEnv | None = None

    # -- state ----------------------------------------------------------------------------------

    def save(self) -> None:
        self.state["tablets"] = {str(t.uid): t.to_dict() for t in self.tablets()}
        for name in ("etcd", "vtctld", "vtgate"):
            if name in self.__dict__:  # its property made it in this process
                self.state[name] = _as_dict(self.__dict__[name])
        atomic_write(self.state_path, json.dumps(self.state, indent=2, sort_keys=True) + "\n")

    # -- components -----------------------------------------------------------------------------

    @cached_property
    def etcd(self) -> Etcd:
        data = self.state.get("etcd") or {"client_port": free_port(), "peer_port": free_port()}
        etcd = Etcd(self.dir / "etcd", self.dir / "logs" / "etcd.log", **_ports(data, "pid"))
        etcd.pid = data.get("pid")
        return etcd

    @cached_property
    def vtctld(self) -> Vtctld:
        data = self.state.get("vtctld")
        return Vtctld.from_dict(data) if data else Vtctld.new()

    @cached_property
    def vtgate(self) -> Vtgate:
        data = self.state.get("vtgate")
        return Vtgate.from_dict(data) if data else Vtgate.new()

    def tablets(self) -> list[Tablet]:
        if getattr(self, "_tablets", None) is None:
            self._tablets = {
                int(uid): Tablet.from_dict(data) for uid, data in self.state["tablets"].items()
            }
        return sorted(self._tablets.values(), key=lambda t: (KeyRange.parse(t.shard), t.uid))

    def tablet(self, shard: str) -> Tablet:
        name = KeyRange.parse(shard).name
        for tablet in self.tablets():
            if tablet.shard == name:
                return tablet
        raise VitessStateError(
            f"shard {name} has no tablet in {self.dir} (shards: "
            f"{', '.join(t.shard for t in self.tablets()) or 'none'})"
        )

    def gtid_executed(self, shard: str) -> str:
        """The executed GTID set of `shard`'s primary mysqld now (one line)."""
        with self.tablet(shard).dba_connect(self.env()) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@global.gtid_executed")
            row = cur.fetchone()
        return str(row[0] if row else "").replace("\n", "")

    def env(self) -> ClusterEnv:
        """The shared environment; stages the programs into the directory the first time."""
        if self._env is None:
            user = runtime.service_user()
            user.check_reachable(self.dir)
            staged = runtime.stage(self.dir / "runtime")
            self._env = ClusterEnv(
                self.dir, staged, user, self.etcd, self.state["cell"], self.keyspace
            )
            self._env.prepare()
        return self._env

    def vtctl(self) -> Vtctldclient:
        env = self.env()
        return Vtctldclient(
            env.runtime, env.user, self.vtctld.address, env.dir, env.environ(),
            env.logs / "vtctldclient.log",
        )  # fmt: skip

    # -- lifecycle ------------------------------------------------------------------------------

    def up(self, shards: str | None = None) -> None:
        """Start (or restart) every process; create the keyspace on first use. Idempotent."""
        wanted = self._wanted_shards(shards)
        with self.locked():
            env = self.env()
            self._timed("topology", lambda: self._start_control(env))
            for shard in wanted:
                if not any(t.shard == shard for t in self.tablets()):
                    self._new_tablet(shard)
            self._timed("tablets", lambda: self._start_tablets(env, self.tablets()))
            self._timed("keyspace", lambda: self._provision(env, wanted))
            self._timed("vtgate", lambda: self._start_vtgate(env))
            if not self.manifest_path.exists():
                self._write_manifest(wanted)
            self.sync_manifest()
            self.save()

    def _wanted_shards(self, shards: str | None) -> list[str]:
        serving = self.serving_shards_recorded()
        if shards is None:
            return serving or ["-80", "80-"]
        names = [r.name for r in parse_shard_names(shards)]
        ShardMap(KeyRange.parse(n) for n in names)
        if serving and sorted(serving) != sorted(names):
            raise VitessStateError(
                f"the cluster in {self.dir} serves {','.join(serving)}, not {shards}; run `up` "
                "without --shards, or `down --purge` first"
            )
        return names

    def serving_shards_recorded(self) -> list[str]:
        """The serving shards as the manifest records them ([] before the first `up`)."""
        if not self.manifest_path.exists():
            return []
        return list(spec.load_keyspace(self.manifest_path).spec.serving_shards)

    def _timed(self, phase: str, action: Any) -> None:
        began = time.monotonic()
        action()
        self.timings[phase] = self.timings.get(phase, 0.0) + time.monotonic() - began

    def _start_control(self, env: ClusterEnv) -> None:
        self.etcd.start(env.user, env.environ())
        self.save()
        self.vtctld.start(env)
        self.save()
        vtctl = self.vtctl()
        provisioning.ensure_cell(env, vtctl)
        provisioning.ensure_keyspace(env, vtctl)

    def _new_tablet(self, shard: str) -> Tablet:
        uid = int(self.state["next_uid"])
        self.state["next_uid"] = uid + 100
        tablet = Tablet.new(uid, KeyRange.parse(shard).name)
        self.tablets()
        self._tablets[uid] = tablet
        self.save()
        return tablet

    def _start_tablets(self, env: ClusterEnv, tablets: Sequence[Tablet]) -> None:
        """mysqld then vttablet of each tablet, the tablets in parallel."""
        template_datadir(env)  # once, before the parallel copies
        with ThreadPoolExecutor(max_workers=max(1, len(tablets))) as pool:
            list(pool.map(lambda t: t.start_mysqld(env), tablets))
            list(pool.map(lambda t: t.start_vttablet(env), tablets))
        self.save()

    def _provision(self, env: ClusterEnv, shards: Sequence[str]) -> None:
        vtctl = self.vtctl()
        tablets = [self.tablet(shard) for shard in shards]
        self.elect_primaries(tablets)
        if not self.state.get("schema_applied"):
            provisioning.apply_sample_schema(env, vtctl)
            self.state["schema_applied"] = True
            self.save()

    def elect_primaries(self, tablets: Sequence[Tablet]) -> None:
        """Make each tablet its shard's primary and give its mysqld the reader account."""
        env, vtctl = self.env(), self.vtctl()
        with ThreadPoolExecutor(max_workers=max(1, len(tablets))) as pool:
            list(pool.map(lambda t: provisioning.elect_primary(env, vtctl, t), tablets))
        provisioning.wait_writable(env, tablets)
        reader = manifest.ensure_secret(self.secrets_dir, self.keyspace, "reader")
        accounts = self.state.setdefault("accounts", [])
        for tablet in tablets:
            if tablet.uid not in accounts:
                provisioning.create_account(env, tablet, "reader", reader.password)
                accounts.append(tablet.uid)
        self.save()

    def _start_vtgate(self, env: ClusterEnv) -> None:
        app = manifest.ensure_secret(self.secrets_dir, self.keyspace, "app")
        self.vtgate.write_users(env, [app])
        self.vtgate.start(env)
        self.save()
        self.wait_vtgate_serving()

    def wait_vtgate_serving(self, timeout: float = 120.0) -> None:
        """Wait until a query that needs every serving shard succeeds through vtgate."""
        app = manifest.ensure_secret(self.secrets_dir, self.keyspace, "app")
        deadline = time.monotonic() + timeout
        while True:
            try:
                provisioning.query_through(
                    "127.0.0.1", self.vtgate.mysql_port, app, "SELECT COUNT(*) FROM users",
                    self.keyspace,
                )  # fmt: skip
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise VitessStateError(
                        f"vtgate on 127.0.0.1:{self.vtgate.mysql_port} does not serve keyspace "
                        f"{self.keyspace} after {timeout:.0f}s ({exc}); see {self.dir / 'logs'}"
                    ) from None
                time.sleep(0.5)

    def _write_manifest(self, serving: Sequence[str]) -> None:
        manifest.write_manifest(
            self.manifest_path,
            keyspace=self.keyspace,
            endpoints=self.endpoints(),
            serving=serving,
        )

    def sync_manifest(self) -> spec.Keyspace:
        """Rewrite the Keyspace manifest from what Vitess holds now (serving shards, primary
        tablets' endpoints, VSchema; a history entry when serving changed): the job's
        keyspace watch follows it, so a Reshard's SwitchTraffic is what makes a stream hop."""
        topology = VitessTopology(f"127.0.0.1:{self.vtctld.grpc_port}", self.state["cell"])
        secret = sample_schema.secret_name(self.keyspace, "reader")
        current = spec.load_keyspace(self.manifest_path)
        resolved = resolved_keyspace(current, topology.view(self.keyspace), secret=secret)
        if resolved != current:
            atomic_write(self.manifest_path, spec.dump_keyspace(resolved))
        return resolved

    def endpoints(self) -> dict[str, int]:
        """Each shard with a tablet: its mysqld port."""
        return {t.shard: t.mysql_port for t in self.tablets()}

    # -- resharding support ---------------------------------------------------------------------

    def add_tablets(self, shards: Sequence[str]) -> list[Tablet]:
        """Start a primary tablet for each new shard (not serving yet); idempotent."""
        with self.locked():
            env = self.env()
            names = [KeyRange.parse(s).name for s in shards]
            existing = {t.shard: t for t in self.tablets()}
            tablets = [existing.get(n) or self._new_tablet(n) for n in names]
            self._start_tablets(env, tablets)
            self.elect_primaries(tablets)
            self.sync_manifest()
            self.save()
        return tablets

    def remove_tablets(self, shards: Sequence[str]) -> None:
        """Stop the tablets of shards a Reshard removed and delete their mysqld's data."""
        with self.locked():
            env = self.env()
            for shard in shards:
                tablet = self.tablet(shard)
                tablet.stop_vttablet(env)
                tablet.stop_mysqld(env)
                shutil.rmtree(tablet.dir(env), ignore_errors=True)
                del self._tablets[tablet.uid]
                retired = {"shard": tablet.shard, "uid": tablet.uid}
                self.state.setdefault("retired", []).append(retired)
            self.sync_manifest()
            self.save()

    # -- stopping -------------------------------------------------------------------------------

    def down(self, purge: bool = False) -> list[str]:
        """Stop every process this directory recorded, by pid; `purge` also removes the data."""
        stopped: list[str] = []
        if not self.exists():
            return stopped
        with self.locked():
            env = self.env()
            if self.vtgate.stop(env):
                stopped.append("vtgate")
            for tablet in self.tablets():
                if tablet.stop_vttablet(env):
                    stopped.append(f"vttablet {tablet.alias(env.cell)}")
            for tablet in self.tablets():
                if tablet.stop_mysqld(env):
                    stopped.append(f"mysqld {tablet.shard}")
            if self.vtctld.stop(env):
                stopped.append("vtctld")
            if self.etcd.stop():
                stopped.append("etcd")
            self.save()
        if purge:
            shutil.rmtree(self.dir, ignore_errors=True)
        return stopped


def _as_dict(component: Any) -> dict[str, Any]:
    if isinstance(component, Etcd):
        return {"client_port": component.client_port, "peer_port": component.peer_port,
                "pid": component.pid}  # fmt: skip
    data: dict[str, Any] = component.to_dict()
    return data


def _ports(data: dict[str, Any], *skip: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in skip}
