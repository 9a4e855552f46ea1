"""A local memcached: `memcached -l 127.0.0.1 -p <port> -U 0 -m <MB>` on a free loopback port.

For the demo, the tests and the benchmarks. `stop()` ends exactly the process this object
started, or, for a server started by an earlier command (`pid` given), the recorded pid once
its command line shows it is a memcached on that port.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from updatestream.local_ports import free_port
from updatestream_cli.devcluster.errors import ServerError
from updatestream_cli.devcluster.local_server import pid_cmdline, terminate

MEMCACHED = (
    os.environ.get("UPDATESTREAM_MEMCACHED") or shutil.which("memcached") or ("/usr/bin/memcached")
)


@dataclass
class MemcachedServer:
    """One memcached process on loopback."""

    memory_mb: int = 64
    port: int = 0
    pid: int | None = None
    # where its output goes; with a log the server also runs in a session of its own, so it
    # may outlive the command that started it
    log: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        command = [MEMCACHED, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0",
                   "-m", str(self.memory_mb), "-t", "2"]  # fmt: skip
        if os.geteuid() == 0:
            command += ["-u", "root"]  # memcached refuses to run as root without it
        return command

    def start(self, attempts: int = 5) -> MemcachedServer:
        errors = ""
        for _ in range(attempts):
            self.port = free_port()
            if self.log is not None:
                self.log.parent.mkdir(parents=True, exist_ok=True)
                with self.log.open("ab") as out:
                    self.process = subprocess.Popen(
                        self.command(),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            else:
                self.process = subprocess.Popen(
                    self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
            self.pid = self.process.pid
            if self._wait_ready():
                return self
            errors = self._stderr()
            self.stop()  # the port was taken in the meantime: try another
        raise ServerError(f"memcached did not start after {attempts} attempts: {errors}")

    def _stderr(self) -> str:
        if self.process is None or self.process.poll() is None:
            return ""
        if self.process.stderr is not None:
            return self.process.stderr.read().decode("utf-8", "replace").strip()
        with contextlib.suppress(OSError):
            if self.log is not None:
                return self.log.read_text(errors="replace")[-1000:].strip()
        return ""

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"version\r\n")
                    if sock.recv(64).startswith(b"VERSION"):
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def __enter__(self) -> MemcachedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(b"flush_all\r\n")
            assert sock.recv(64).startswith(b"OK")

    def is_ours(self) -> bool:
        """The recorded pid runs a memcached on this server's port."""
        command = pid_cmdline(self.pid) if self.pid is not None else ""
        return "memcached" in command and f"-p {self.port} " in f"{command} "

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=timeout)
            if self.process.stderr is not None:
                self.process.stderr.close()
        elif self.pid is not None and self.is_ours():
            terminate(self.pid, timeout)
        self.process = None
        self.pid = None
