"""What every local database server of the development cluster shares, whatever its flavor.

`LocalServer` is the common protocol of `MariaDBServer` and `MySQLServer`: a directory of its own
(datadir, socket, pid file, error log), a process started in a session of its own and stopped by
pid, root over the unix socket, TCP connections for the keyspace's users, accounts created
without binary logging, and the binlog's GTID position and files. A flavor says how its datadir
template is made, which command line runs it, and how it reports its GTID position.

Servers listen on 127.0.0.1 unless given another `bind_address` (the address of a bridge the
Pods of a one-node Kubernetes reach, for example); their accounts then accept connections from
any host, since the Pods' addresses are not known in advance.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import pymysql
import pymysql.connections

from updatestream.local_ports import LOOPBACK, free_port
from updatestream_cli.devcluster.errors import ServerError

ServerFlavor = Literal["mariadb", "mysql"]
FLAVORS: tuple[ServerFlavor, ...] = ("mariadb", "mysql")
Connection = pymysql.connections.Connection  # generic only for the type checker
_SOCKET_PATH_LIMIT = 100  # sun_path is 108 bytes; keep a margin


def cache_dir() -> Path:
    base = os.environ.get("UPDATESTREAM_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "updatestream"


def check_bind_address(address: str) -> str:
    """`address` if a server can listen on it and clients can connect to it: an IPv4 address of
    this machine, not a wildcard. Raises `ServerError` saying what to pass instead."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        raise ServerError(
            f"bind address {address!r} is not an IPv4 address; pass one of this machine's "
            "addresses, like 127.0.0.1 or the address of the node's bridge"
        ) from None
    if parsed.version != 4 or parsed.is_unspecified:
        raise ServerError(
            f"bind address {address} cannot be used: it must be one IPv4 address of this "
            "machine (clients connect to it, and the manifest names it), not a wildcard"
        )
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
    except OSError as exc:
        raise ServerError(
            f"cannot listen on {address} ({exc.strerror or exc}); is it an address of this "
            "machine? Start the bridge first (make cluster-up) or pass 127.0.0.1"
        ) from None
    return address


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


def server_version(argv: Sequence[str], fix: str, error: type[ServerError] = ServerError) -> str:
    """What a server program prints for `--version`, run as `argv` (the program and its options)
    with `--version` added; `error` saying `fix` when it cannot run."""
    try:
        out = subprocess.run(
            [*argv, "--version"], check=True, capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise error(f"cannot run {argv[0]} --version ({exc}); {fix}") from None
    return out.strip()


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM `pid`, wait up to `timeout` seconds for it to end, then SIGKILL it and wait."""
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


def pid_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def cached_template(label: str, key_parts: Sequence[str], install: Callable[[Path], None]) -> Path:
    """A freshly installed datadir to copy from, made once per `key_parts` (the server's version
    and the flags that shape its files) by `install(datadir)`, under the cache directory."""
    key = hashlib.sha256("\n".join(key_parts).encode("utf-8")).hexdigest()[:16]
    template = cache_dir() / f"{label}-datadir-{key}"
    if (template / "mysql").exists():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{label}-datadir-", dir=template.parent))
    try:
        datadir = staging / "data"
        install(datadir)
        try:
            datadir.rename(template)
        except OSError:
            # Someone else (another test session) created it first: use theirs.
            if not (template / "mysql").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return template


def run_installer(command: Sequence[str], datadir: Path, hint: str) -> None:
    """Run a datadir installer; a `ServerError` with its output's end and `hint` if it fails."""
    proc = subprocess.run(list(command), capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 or not (datadir / "mysql").exists():
        tail = (proc.stderr or proc.stdout)[-2000:]
        raise ServerError(
            f"{Path(command[0]).name} failed (exit {proc.returncode}) for {datadir}: {tail}; {hint}"
        )


@dataclass(kw_only=True)
class LocalServer(abc.ABC):
    """One database server process with its own directory (`datadir`, socket, pid file, log)."""

    flavor: ClassVar[ServerFlavor]
    program: ClassVar[str]  # the server program's name, for messages and file names

    base_dir: Path
    server_id: int
    port: int | None = None
    extra_args: Sequence[str] = ()
    name: str = ""
    pid: int | None = None
    bind_address: str = LOOPBACK
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir).absolute()
        if not self.name:
            self.name = self.base_dir.name

    # -- what a flavor provides -----------------------------------------------------------------

    @abc.abstractmethod
    def template(self) -> Path:
        """The installed datadir this server's datadir is copied from."""

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The command line that runs this server."""

    def local_args(self) -> list[str]:
        """The options of every local server: no option files, and its own datadir, address,
        port, socket, pid file, error log and binlog (named `<program>-bin`) and server id."""
        assert self.port is not None
        return [
            "--no-defaults",
            "--user=root",
            f"--datadir={self.datadir}",
            f"--bind-address={self.bind_address}",
            f"--port={self.port}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.error_log}",
            f"--log-bin={self.datadir / f'{self.flavor}-bin'}",
            f"--server-id={self.server_id}",
        ]

    @abc.abstractmethod
    def gtid_position(self) -> str:
        """The GTID position of the last transaction in this server's binlog."""

    @abc.abstractmethod
    def prepare_datadir(self, datadir: Path) -> None:
        """Adjust a fresh copy of the template before the server first starts on it."""

    # -- layout ---------------------------------------------------------------------------------

    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    @property
    def pid_file(self) -> Path:
        return self.base_dir / f"{self.program}.pid"

    @property
    def error_log(self) -> Path:
        return self.base_dir / "error.log"

    @property
    def socket_path(self) -> Path:
        path = self.base_dir / f"{self.program}.sock"
        if len(str(path)) <= _SOCKET_PATH_LIMIT:
            return path
        digest = hashlib.sha256(str(self.base_dir).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"updatestream-{digest}.sock"

    @property
    def host(self) -> str:
        return self.bind_address

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def account_host(self) -> str:
        """The host part of the accounts this server's users get."""
        return LOOPBACK if self.bind_address == LOOPBACK else "%"

    def describe(self) -> str:
        label = f"shard {self.name} " if self.name else ""
        return f"{label}({self.address})"

    # -- lifecycle ------------------------------------------------------------------------------

    def initialise(self) -> None:
        """Create the datadir from the installed template unless it exists already."""
        if (self.datadir / "mysql").exists():
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        staging = self.base_dir / "data.partial"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(self.template(), staging, symlinks=True)
        self.prepare_datadir(staging)
        staging.rename(self.datadir)

    def is_running(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)

    def start(self, timeout: float = 60.0) -> None:
        """Start the server (initialising the datadir first) and wait until it answers."""
        if self.is_running():
            return
        self.initialise()
        dynamic = self.port is None
        for _attempt in range(5 if dynamic else 1):
            if dynamic:
                self.port = free_port(self.bind_address)
            log_offset = self.error_log.stat().st_size if self.error_log.exists() else 0
            self._spawn()
            try:
                self.wait_ready(timeout)
                return
            except ServerError:
                log = self._log_since(log_offset)
                self.stop()
                if dynamic and "Bind on TCP/IP port" in log and "in use" in log:
                    continue  # someone took the port between our probe and the bind
                raise ServerError(
                    f"{self.program} for {self.describe()} did not start within {timeout:.0f}s; "
                    f"its error log {self.error_log} ends with: {log[-1500:]}"
                ) from None
        raise ServerError(f"no free port found on {self.bind_address} for {self.describe()}")

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
                raise ServerError(f"{self.program} for {self.describe()} exited during start-up")
            try:
                self.root_connect(connect_timeout=2).close()
                return
            except pymysql.err.MySQLError:
                time.sleep(0.1)
        raise ServerError(
            f"{self.program} for {self.describe()} did not answer within {timeout:.0f}s"
        )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM by pid, wait; SIGKILL after `timeout`. Only the process this object started
        (or adopted from a recorded pid whose command line names this datadir)."""
        pid = self.pid
        if pid is None:
            return
        if self._proc is None and str(self.datadir) not in pid_cmdline(pid):
            self.pid = None  # the recorded pid is gone or now belongs to another process
            return
        terminate(pid, timeout)
        if self._proc is not None:
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=5)
        self._proc = None
        self.pid = None

    # -- connections ----------------------------------------------------------------------------

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
        """A TCP connection to the server's address and port as `user`, without TLS."""
        kwargs.setdefault("ssl_disabled", True)
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
        """`user`@`account_host` with `password` (set again if it exists) and `grants` (each a
        `GRANT ... TO {user}` template), written without binary logging (`run_unlogged`)."""
        account = f"'{user}'@'{self.account_host}'"
        quoted = account.replace("%", "%%")  # in a statement with arguments
        self.run_unlogged(
            [
                (f"CREATE USER IF NOT EXISTS {quoted} IDENTIFIED BY %s", (password,)),
                (f"ALTER USER {quoted} IDENTIFIED BY %s", (password,)),
                *((grant.format(user=account), ()) for grant in grants),
            ]
        )

    def query(self, sql: str, args: object = None) -> list[tuple[object, ...]]:
        with self.root_connect() as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def binlog_files(self) -> list[tuple[str, int]]:
        """`SHOW BINARY LOGS`: (file name, size) in order."""
        return [(str(r[0]), int(str(r[1]))) for r in self.query("SHOW BINARY LOGS")]

    def variable(self, name: str) -> str:
        rows = self.query("SELECT @@GLOBAL." + name)
        return str(rows[0][0])
