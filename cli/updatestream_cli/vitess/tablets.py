"""One tablet: its mysqld (through `mysqlctl`) and its vttablet, started and stopped by pid.

A new tablet's datadir is copied from a template that `mysqlctl init` makes once per MySQL,
Vitess and my.cnf version and keeps in the build cache (`mysqld --initialize` takes seconds
that every test would pay again); each copy gets a server UUID of its own at first start.
`mysqlctl` stops mysqld with `mysqladmin shutdown`; `runtime` provides that program.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pymysql

from updatestream.local_ports import free_port
from updatestream_cli.devcluster.local_server import cache_dir, pid_alive
from updatestream_cli.vitess import processes
from updatestream_cli.vitess.environment import MYSQL_EXTRA_CNF, ClusterEnv
from updatestream_cli.vitess.errors import ProcessStartError
from updatestream_cli.vitess.runtime import MYSQL_VERSION, VITESS_VERSION

_TEMPLATE_UID = 1
_DATADIR_PARTS = ("data", "innodb")
_PORT_TAKEN = "bind: address already in use"
_PORT_ATTEMPTS = 2


@dataclass
class Tablet:
    """A primary-capable tablet of one shard; its ports are fixed when it is created."""

    uid: int
    shard: str
    mysql_port: int
    http_port: int
    grpc_port: int
    pid: int | None = None  # vttablet

    @classmethod
    def new(cls, uid: int, shard: str) -> Tablet:
        return cls(uid, shard, free_port(), free_port(), free_port())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tablet:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def alias(self, cell: str) -> str:
        return f"{cell}-{self.uid:010d}"

    def dir(self, env: ClusterEnv) -> Path:
        return env.vtdataroot / f"vt_{self.uid:010d}"

    def socket(self, env: ClusterEnv) -> Path:
        return self.dir(env) / "mysql.sock"

    def mysqld_pid(self, env: ClusterEnv) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.dir(env) / "mysql.pid").read_text().strip())
        return None

    def vttablet_log(self, env: ClusterEnv) -> Path:
        return env.logs / f"vttablet-{self.uid}.log"

    # -- mysqld -------------------------------------------------------------------------------

    def mysqld_running(self, env: ClusterEnv) -> bool:
        return processes.owns(self.mysqld_pid(env), str(self.dir(env)))

    def start_mysqld(self, env: ClusterEnv, timeout: float = 180.0) -> None:
        """Start this tablet's mysqld, creating its datadir from the template first."""
        if self.mysqld_running(env):
            return
        if not (self.dir(env) / "data" / "mysql").is_dir():
            _mysqlctl(env, self.uid, self.mysql_port, "init_config", timeout)
            _copy_datadir(template_datadir(env), self.dir(env))
            env.user.chown(self.dir(env))
        _mysqlctl(env, self.uid, self.mysql_port, "start", timeout)

    def stop_mysqld(self, env: ClusterEnv, timeout: float = 120.0) -> bool:
        """`mysqlctl shutdown`; SIGTERM by pid if that fails. False when it was not running."""
        pid = self.mysqld_pid(env)
        if not self.mysqld_running(env):
            return False
        with contextlib.suppress(ProcessStartError):
            _mysqlctl(env, self.uid, self.mysql_port, "shutdown", timeout)
        processes.stop(pid, str(self.dir(env)))
        return True

    def dba_connect(self, env: ClusterEnv, database: str | None = None) -> Any:
        """vt_dba over the unix socket (mysqlctl creates it without a password)."""
        return pymysql.connect(
            unix_socket=str(self.socket(env)),
            user="vt_dba",
            password="",
            database=database,
            autocommit=True,
            charset="utf8mb4",
            connect_timeout=10,
        )

    # -- vttablet -----------------------------------------------------------------------------

    def vttablet_running(self, env: ClusterEnv) -> bool:
        return processes.owns(self.pid, str(self.dir(env)))

    def start_vttablet(self, env: ClusterEnv, timeout: float = 120.0) -> None:
        """Start vttablet; if another process took its HTTP or gRPC port since the tablet was
        created, once more on new ports (its tablet record takes them at start)."""
        if self.vttablet_running(env):
            return
        for attempt in range(_PORT_ATTEMPTS):
            try:
                self._spawn_vttablet(env, timeout)
                return
            except ProcessStartError as exc:
                if _PORT_TAKEN not in str(exc) or attempt + 1 == _PORT_ATTEMPTS:
                    raise
                self.pid = None
                self.http_port, self.grpc_port = free_port(), free_port()

    def _spawn_vttablet(self, env: ClusterEnv, timeout: float) -> None:
        argv = [
            env.runtime.program("vttablet"),
            *env.common_flags(),
            "--tablet-path", self.alias(env.cell),
            "--tablet-hostname", "127.0.0.1",
            "--bind-address", "127.0.0.1",
            "--grpc-bind-address", "127.0.0.1",
            "--port", str(self.http_port),
            "--grpc-port", str(self.grpc_port),
            "--init-keyspace", env.keyspace,
            "--init-shard", self.shard,
            "--init-tablet-type", "replica",
            "--init-db-name-override", env.keyspace,
            "--mycnf-file", str(self.dir(env) / "my.cnf"),
            "--service-map", "grpc-queryservice,grpc-tabletmanager,grpc-updatestream",
            "--pid-file", str(self.dir(env) / "vttablet.pid"),
            "--health-check-interval", "2s",
            "--queryserver-config-transaction-cap", "50",
        ]  # fmt: skip
        log = self.vttablet_log(env)
        self.pid = processes.spawn(
            argv, log_path=log, user=env.user, env=env.environ(), cwd=self.dir(env)
        )
        processes.wait_for(
            lambda: processes.http_ok(f"http://127.0.0.1:{self.http_port}/debug/status"),
            what=f"vttablet {self.alias(env.cell)} (shard {self.shard})",
            pid=self.pid,
            log_path=log,
            timeout=timeout,
        )

    def stop_vttablet(self, env: ClusterEnv) -> bool:
        stopped = processes.stop(self.pid, str(self.dir(env)))
        self.pid = None
        return stopped


def _mysqlctl(env: ClusterEnv, uid: int, port: int, action: str, timeout: float) -> None:
    argv = [
        env.runtime.program("mysqlctl"),
        "--tablet-uid", str(uid),
        "--mysql-port", str(port),
        "--log-format", "text",
        "--config-file-not-found-handling", "ignore",
        action,
    ]  # fmt: skip
    log = env.logs / f"mysqlctl-{uid}.log"
    proc = processes.run(
        argv, user=env.user, env=env.environ(), cwd=env.dir, timeout=timeout, log_path=log
    )
    if proc.returncode != 0:
        error_log = env.vtdataroot / f"vt_{uid:010d}" / "error.log"
        raise ProcessStartError(
            f"`mysqlctl {action}` for tablet {uid} failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout)[-1500:]}\nmysqld's {error_log} ends with:\n"
            f"{processes.log_tail(error_log, 1500)}"
        )


def template_key() -> str:
    text = "\n".join([MYSQL_VERSION, VITESS_VERSION, MYSQL_EXTRA_CNF])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def template_datadir(env: ClusterEnv) -> Path:
    """An initialised tablet datadir (`data/`, `innodb/`) to copy; made once by mysqlctl."""
    template = cache_dir() / "vitess" / f"mysql-datadir-{template_key()}"
    if all((template / part).is_dir() for part in _DATADIR_PARTS):
        return template
    tablet_dir = env.vtdataroot / f"vt_{_TEMPLATE_UID:010d}"
    shutil.rmtree(tablet_dir, ignore_errors=True)
    port = free_port()
    try:
        _mysqlctl(env, _TEMPLATE_UID, port, "init", 300.0)
        _mysqlctl(env, _TEMPLATE_UID, port, "shutdown", 120.0)
    finally:
        pid_file = tablet_dir / "mysql.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            if pid_alive(pid):
                processes.stop(pid, str(tablet_dir))
    template.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".mysql-datadir-", dir=template.parent))
    try:
        for part in _DATADIR_PARTS:
            shutil.copytree(tablet_dir / part, staging / part, symlinks=True)
        (staging / "data" / "auto.cnf").unlink()  # the server UUID: each copy makes its own
        try:
            staging.rename(template)
            staging = template
        except OSError:
            if not (template / "data").is_dir():  # not made by a concurrent run either
                raise
    finally:
        if staging != template:
            shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(tablet_dir, ignore_errors=True)
    return template


def _copy_datadir(template: Path, tablet_dir: Path) -> None:
    for part in _DATADIR_PARTS:
        target = tablet_dir / part
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(template / part, target, symlinks=True)
