"""The servers a demo runs: its keyspace (a development cluster of MariaDB or MySQL 8 shards, or
a real local Vitess; see `engines`), a server for the Version Stream sink and the mirror
(MariaDB or MySQL 8, chosen apart from the shards) and a memcached, recorded in
`<dir>/demo.json` so that `updatestream demo --down` (or the next demo in the same directory)
stops exactly what a kept demo left running, by pid.

    <dir>/cluster/        the development cluster (shards, Keyspace manifest, Secrets), or
    <dir>/vitess/         the Vitess cluster (etcd, vtctld, vtgate, tablets, manifest, Secrets)
    <dir>/versionstream/  the server of the Version Stream and of the mirror's database
    <dir>/memcached.log   memcached's output
    <dir>/operator/       the operator's objects and the local launcher's job directories
    <dir>/demo.json       what runs: pids and ports
"""

from __future__ import annotations

import json
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updatestream_cli.demo.engines import DemoKeyspace, Engine, demo_keyspace
from updatestream_cli.demo.errors import DemoError
from updatestream_cli.devcluster.cluster import atomic_write
from updatestream_cli.devcluster.local_server import LocalServer, ServerFlavor, pid_cmdline
from updatestream_cli.devcluster.mariadb_server import MariaDBServer
from updatestream_cli.devcluster.memcached_server import MemcachedServer
from updatestream_cli.devcluster.mysql_server import MySQLServer

STATE_FILE = "demo.json"
SINK_SECRET = "demo-versionstream"  # the Version Stream account, beside the cluster's Secrets
SINK_USER = "us_versionstream"
SINK_DATABASE = "updatestream"
MIRROR_DATABASE = "demo_mirror"  # the mirror sink's copy of the shards, on the same server
SINK_SERVER_ID = 900  # apart from the shards' ids (1, 2, ...)


def operator_dir(directory: Path) -> Path:
    return directory / "operator"


@dataclass
class DemoServers:
    """Everything the demo starts besides the streaming job; `stop()` stops all of it."""

    directory: Path
    flavor: ServerFlavor = "mariadb"  # the shards' (a Vitess keyspace's are MySQL 8)
    sink_flavor: ServerFlavor = "mariadb"  # the Version Stream's and the mirror's server
    engine: Engine = "devcluster"
    keyspace: DemoKeyspace = field(init=False)
    sink: LocalServer | None = None
    memcached: MemcachedServer | None = None

    def __post_init__(self) -> None:
        self.directory = self.directory.absolute()
        self.keyspace = demo_keyspace(self.directory, self.engine, self.flavor)

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def record(self, **more: Any) -> None:
        """Add what runs now to `demo.json` (a stopped server's entry stays, for the record:
        stopping by pid checks the command line first)."""
        state = self.read_state()
        if self.sink is not None and self.sink.pid is not None:
            state["versionstream"] = {
                "pid": self.sink.pid,
                "port": self.sink.port,
                "serverId": self.sink.server_id,
                "flavor": self.sink.flavor,
            }
        if self.memcached is not None and self.memcached.pid is not None:
            state["memcached"] = {"pid": self.memcached.pid, "port": self.memcached.port}
        state["engine"] = self.engine
        state.update(more)
        atomic_write(self.state_path, json.dumps(state, indent=2, sort_keys=True) + "\n")

    def read_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    # -- starting -------------------------------------------------------------------------------

    def start_keyspace(self, shards: str = "-80,80-") -> str:
        """Start the keyspace's servers; returns what runs, in words."""
        self.directory.mkdir(parents=True, exist_ok=True)
        # read its state again: the directory may have been purged since this object was made
        self.keyspace = demo_keyspace(self.directory, self.engine, self.flavor)
        self.record()
        return self.keyspace.start(shards)

    def start_sink(self) -> LocalServer:
        """A server of its own for the Version Stream, with an account limited to its
        database; the account's Secret goes beside the cluster's (`SINK_SECRET`)."""
        self.sink = sink_server(self.directory, self.sink_flavor, SINK_SERVER_ID)
        self.sink.start()
        self.record()
        password = secrets.token_urlsafe(18)
        self.sink.create_account(
            SINK_USER,
            password,
            [
                f"GRANT ALL PRIVILEGES ON `{SINK_DATABASE}`.* TO {{user}}",
                f"GRANT ALL PRIVILEGES ON `{MIRROR_DATABASE}`.* TO {{user}}",
            ],
        )
        folder = self.keyspace.secrets_dir / SINK_SECRET
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(folder / "username", SINK_USER, mode=0o600)
        atomic_write(folder / "password", password, mode=0o600)
        return self.sink

    def start_memcached(self) -> MemcachedServer:
        self.memcached = MemcachedServer(log=self.directory / "memcached.log").start()
        self.record()
        return self.memcached

    # -- stopping -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the memcached, the sink's server and the keyspace's servers (by pid)."""
        if self.memcached is not None:
            self.memcached.stop()
        if self.sink is not None:
            self.sink.stop()
        self.keyspace.down()
        self.record(stopped=True)


def sink_server(
    directory: Path,
    flavor: ServerFlavor,
    server_id: int,
    port: int | None = None,
    pid: int | None = None,
) -> LocalServer:
    """The demo's Version Stream server of `flavor` (a new one, or a running one by pid)."""
    kind = MySQLServer if flavor == "mysql" else MariaDBServer
    return kind(
        base_dir=directory / "versionstream",
        server_id=server_id,
        name="versionstream",
        port=port,
        pid=pid,
    )


def stop_recorded(directory: Path) -> list[str]:
    """Stop what a demo in `directory` left running: its streaming jobs (through the local
    launcher), memcached, the Version Stream's server and the cluster. Returns what it
    stopped; a directory without a demo is left alone."""
    from updatestream_operator.launchers.local import LocalLauncher

    directory = directory.absolute()
    state = DemoServers(directory).read_state()
    engine: Engine = "vitess" if state.get("engine") == "vitess" else "devcluster"
    servers = DemoServers(directory, engine=engine)
    stopped: list[str] = []
    jobs = operator_dir(directory) / "jobs"
    if jobs.is_dir():
        launcher = LocalLauncher(jobs)
        for job in launcher.list():
            if job.phase.is_alive:
                launcher.stop(job.key)
                stopped.append(f"job {job.job_id}")
    cache = state.get("memcached") or {}
    if cache.get("pid"):
        server = MemcachedServer(port=int(cache["port"]), pid=int(cache["pid"]))
        if server.is_ours():
            server.stop()
            stopped.append(f"memcached on {server.address}")
    sink = state.get("versionstream") or {}
    if sink.get("pid"):
        database = sink_server(
            directory,
            "mysql" if sink.get("flavor") == "mysql" else "mariadb",
            int(sink.get("serverId", SINK_SERVER_ID)),
            port=sink.get("port"),
            pid=int(sink["pid"]),
        )
        if database.is_running() and str(database.datadir) in pid_cmdline(int(sink["pid"])):
            database.stop()
            stopped.append(f"Version Stream {database.program} on {database.address}")
    if servers.keyspace.exists():
        stopped += servers.keyspace.down()
    if state:
        servers.record(stopped=True)
    return stopped


def purge(directory: Path) -> None:
    """Remove a demo directory after stopping what it left running."""
    directory = directory.absolute()
    if not directory.exists():
        return
    if not (directory / STATE_FILE).exists() and any(directory.iterdir()):
        raise DemoError(
            f"{directory} exists and holds no demo; choose another --dir or remove it yourself"
        )
    stop_recorded(directory)
    shutil.rmtree(directory)
