"""One local MariaDB server: datadir, process, connections, binlog position.

Each server runs `mariadbd --no-defaults` on 127.0.0.1 with its own datadir, socket and pid file,
row-based binlogs with full metadata and full row images, and small buffers so several fit on a
laptop. Datadirs are copied from a template made once by `mariadb-install-db` (the install is the
slow part), cached per MariaDB version under the UpdateStream cache directory.

Durability is relaxed on purpose (`innodb_flush_log_at_trx_commit=2`, `sync_binlog=0`): these
servers hold throw-away development data, and a crash of mariadbd itself is not something the
development cluster simulates. Killing the *workflow* (not the server) is what the tests do.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pymysql.connections

from updatestream_cli.devcluster.errors import ServerError

MARIADBD = os.environ.get("UPDATESTREAM_MARIADBD", "/usr/sbin/mariadbd")
INSTALL_DB = os.environ.get("UPDATESTREAM_MARIADB_INSTALL_DB", "mariadb-install-db")

# Flags used both to create the template datadir and to run servers: InnoDB file sizes must agree.
_STORAGE_ARGS: tuple[str, ...] = (
    "--innodb-buffer-pool-size=48M",
    "--innodb-log-file-size=16M",
    "--innodb-data-file-path=ibdata1:10M:autoextend",
)
_SERVER_ARGS: tuple[str, ...] = (
    "--bind-address=127.0.0.1",
    "--skip-name-resolve",
    "--performance-schema=OFF",
    "--binlog-format=ROW",
    "--binlog-row-metadata=FULL",
    "--binlog-row-image=FULL",
    "--max-binlog-size=64M",
    "--innodb-flush-log-at-trx-commit=2",
    "--sync-binlog=0",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
    "--default-time-zone=+00:00",
    "--max-connections=200",
    "--key-buffer-size=1M",
    "--table-open-cache=400",
)
Connection = pymysql.connections.Connection  # generic only for the type checker
_SOCKET_PATH_LIMIT = 100  # sun_path is 108 bytes; keep a margin


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cache_dir() -> Path:
    base = os.environ.get("UPDATESTREAM_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "updatestream"


def mariadb_version() -> str:
    try:
        out = subprocess.run(
            [MARIADBD, "--version"], check=True, capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ServerError(
            f"cannot run {MARIADBD} --version ({exc}); install mariadb-server (make system-deps)"
        ) from None
    return out.strip()


def template_datadir() -> Path:
    """A freshly installed datadir to copy from; created once per MariaDB version and flags."""
    key = hashlib.sha256(
        "\n".join([mariadb_version(), *_STORAGE_ARGS]).encode("utf-8")
    ).hexdigest()[:16]
    template = cache_dir() / f"mariadb-datadir-{key}"
    if (template / "mysql").is_dir():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".mariadb-datadir-", dir=template.parent))
    try:
        datadir = staging / "data"
        cmd = [
            INSTALL_DB,
            "--no-defaults",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
            f"--datadir={datadir}",
            *_STORAGE_ARGS,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not (datadir / "mysql").is_dir():
            tail = (proc.stderr or proc.stdout)[-2000:]
            raise ServerError(
                f"mariadb-install-db failed (exit {proc.returncode}) for {datadir}: {tail}; "
                "check that mariadb-server is installed (make system-deps)"
            )
        try:
            datadir.rename(template)
        except OSError:
            # Someone else (another test session) created it first: use theirs.
            if not (template / "mysql").is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return template


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie child counts as gone; it is reaped here)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def pid_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class MariaDBServer:
    """One `mariadbd` with its own directory (`datadir`, socket, pid file, error log)."""

    base_dir: Path
    server_id: int
    domain_id: int | None = None
    port: int | None = None
    extra_args: Sequence[str] = ()
    name: str = ""
    pid: int | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir).absolute()
        if self.domain_id is None:
            self.domain_id = self.server_id
        if not self.name:
            self.name = self.base_dir.name

    # -- layout -------------------------------------------------------------------------------

    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    @property
    def pid_file(self) -> Path:
        return self.base_dir / "mariadbd.pid"

    @property
    def error_log(self) -> Path:
        return self.base_dir / "error.log"

    @property
    def socket_path(self) -> Path:
        path = self.base_dir / "mariadbd.sock"
        if len(str(path)) <= _SOCKET_PATH_LIMIT:
            return path
        digest = hashlib.sha256(str(self.base_dir).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"updatestream-{digest}.sock"

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        label = f"shard {self.name} " if self.name else ""
        return f"{label}({self.address})"

    # -- lifecycle ----------------------------------------------------------------------------

    def initialise(self) -> None:
        """Create the datadir from the installed template unless it exists already."""
        if (self.datadir / "mysql").is_dir():
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        staging = self.base_dir / "data.partial"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(template_datadir(), staging, symlinks=True)
        staging.rename(self.datadir)

    def command(self) -> list[str]:
        assert self.port is not None
        return [
            MARIADBD,
            "--no-defaults",
            "--user=root",
            f"--datadir={self.datadir}",
            f"--port={self.port}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.error_log}",
            f"--log-bin={self.datadir / 'mariadb-bin'}",
            f"--server-id={self.server_id}",
            f"--gtid-domain-id={self.domain_id}",
            *_STORAGE_ARGS,
            *_SERVER_ARGS,
            *self.extra_args,
        ]

    def is_running(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)

    def start(self, timeout: float = 60.0) -> None:
        """Start mariadbd (initialising the datadir first) and wait until it answers."""
        if self.is_running():
            return
        self.initialise()
        dynamic = self.port is None
        for _attempt in range(5 if dynamic else 1):
            if dynamic:
                self.port = free_port()
            log_offset = self.error_log.stat().st_size if self.error_log.exists() else 0
            self._spawn()
            try:
                self.wait_ready(timeout)
                return
            except ServerError:
                log = self._log_since(log_offset)
                self.stop()
                if dynamic and "Bind on TCP/IP port" in log:
                    continue  # someone took the port between our probe and the bind
                raise ServerError(
                    f"mariadbd for {self.describe()} did not start within {timeout:.0f}s; "
                    f"its error log {self.error_log} ends with: {log[-1500:]}"
                ) from None
        raise ServerError(f"no free loopback port found for {self.describe()}; retry")

    def _spawn(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives the CLI that started it; not hit by its Ctrl-C
        )
        self.pid = self._proc.pid

    def _log_since(self, offset: int) -> str:
        try:
            with self.error_log.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                raise ServerError(f"mariadbd for {self.describe()} exited during start-up")
            try:
                self.root_connect(connect_timeout=2).close()
                return
            except pymysql.err.MySQLError:
                time.sleep(0.1)
        raise ServerError(f"mariadbd for {self.describe()} did not answer within {timeout:.0f}s")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM by pid, wait; SIGKILL after `timeout`. Only the process this object started
        (or adopted from a recorded pid whose command line names this datadir)."""
        pid = self.pid
        if pid is None:
            return
        if self._proc is None and str(self.datadir) not in pid_cmdline(pid):
            self.pid = None  # the recorded pid is gone or now belongs to another process
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.05)
        if self._proc is not None:
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=5)
        self._proc = None
        self.pid = None

    # -- connections --------------------------------------------------------------------------

    def root_connect(self, database: str | None = None, connect_timeout: int = 10) -> Connection:
        """root@localhost over the unix socket (installed without a password)."""
        return pymysql.connect(
            unix_socket=str(self.socket_path),
            user="root",
            password="",
            database=database,
            autocommit=True,
            charset="utf8mb4",
            connect_timeout=connect_timeout,
        )

    def connect(
        self,
        user: str,
        password: str,
        database: str | None = None,
        *,
        autocommit: bool = True,
        **kwargs: Any,
    ) -> Connection:
        """A TCP connection to 127.0.0.1:<port> as `user`."""
        return pymysql.connect(
            host=self.host,
            port=self.port or 3306,
            user=user,
            password=password,
            database=database,
            autocommit=autocommit,
            charset="utf8mb4",
            connect_timeout=10,
            **kwargs,
        )

    def run_unlogged(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        """Run `(sql, args)` statements as root with `sql_log_bin=0`, so they never reach the
        binlog. For statements that carry a secret (`CREATE USER ... IDENTIFIED BY`): a binlog
        keeps its text for anyone with REPLICATION SLAVE, which every stream's reader has."""
        with self.root_connect() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for sql, args in statements:
                cur.execute(sql, tuple(args) or None)

    def create_account(self, user: str, password: str, grants: Sequence[str]) -> None:
        """`user`@127.0.0.1 with `password` (set again if it exists) and `grants` (each a
        `GRANT ... TO {user}` template), written without binary logging (`run_unlogged`)."""
        account = f"'{user}'@'127.0.0.1'"
        self.run_unlogged(
            [
                (f"CREATE USER IF NOT EXISTS {account} IDENTIFIED BY %s", (password,)),
                (f"ALTER USER {account} IDENTIFIED BY %s", (password,)),
                *((grant.format(user=account), ()) for grant in grants),
            ]
        )

    def query(self, sql: str, args: object = None) -> list[tuple[object, ...]]:
        with self.root_connect() as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def gtid_position(self) -> str:
        """`@@gtid_binlog_pos`: the GTID position of the last transaction in this binlog."""
        return str(self.query("SELECT @@gtid_binlog_pos")[0][0] or "")

    def binlog_files(self) -> list[tuple[str, int]]:
        """`SHOW BINARY LOGS`: (file name, size) in order."""
        return [(str(r[0]), int(str(r[1]))) for r in self.query("SHOW BINARY LOGS")]

    def variable(self, name: str) -> str:
        rows = self.query("SELECT @@GLOBAL." + name)
        return str(rows[0][0])
