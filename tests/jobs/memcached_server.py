"""A real memcached for tests and benchmarks: `memcached -l 127.0.0.1 -p <port> -U 0 -m 64`."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field

from updatestream.devcluster.server import free_port

MEMCACHED = "/usr/bin/memcached"


@dataclass
class MemcachedServer:
    """One memcached process on loopback; `stop()` ends exactly this process."""

    memory_mb: int = 64
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, attempts: int = 5) -> MemcachedServer:
        for _ in range(attempts):
            self.port = free_port()
            command = [MEMCACHED, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0",
                       "-m", str(self.memory_mb), "-t", "2"]  # fmt: skip
            if os.geteuid() == 0:
                command += ["-u", "root"]  # memcached refuses to run as root without it
            self.process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            if self._wait_ready():
                return self
            errors = self._stderr()
            self.stop()  # the port was taken in the meantime: try another
        raise RuntimeError(f"memcached did not start after {attempts} attempts: {errors}")

    def _stderr(self) -> str:
        if self.process is None or self.process.stderr is None or self.process.poll() is None:
            return ""
        return self.process.stderr.read().decode("utf-8", "replace").strip()

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

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(b"flush_all\r\n")
            assert sock.recv(64).startswith(b"OK")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None
