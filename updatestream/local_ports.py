"""TCP ports for the servers this project starts on one machine.

A port is chosen here and bound later by another process (mysqld, vttablet, etcd, a job's metrics
server), sometimes seconds later. A port the kernel picked by binding to port 0 comes from the
ephemeral range, the same range every outgoing connection takes its local port from, so in that
gap a connection of any process may take it and the server dies with "address already in use".
So ports come from below the ephemeral range, where the kernel never hands out a port by itself
(and below Kubernetes' NodePort range), and each is reserved for `RESERVATION_SECONDS` by a file
in a directory every process of this machine's user shares: two processes picking at once never
get the same port.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
import time
from pathlib import Path

from updatestream.core.errors import UpdateStreamError

LOOPBACK = "127.0.0.1"
RESERVATION_SECONDS = 600.0  # time enough for the process given the port to bind it
_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000  # below this, well-known services of the machine
_HIGHEST = 29999  # 30000-32767 is Kubernetes' NodePort range, which kube-proxy may hold
_ATTEMPTS = 500


class NoFreePortError(UpdateStreamError):
    """No port could be reserved; the message says which range was searched."""


def free_port(host: str = LOOPBACK, ports: tuple[int, int] | None = None) -> int:
    """A TCP port of `host` that nobody listens on, from `ports` (`port_range()` unless given),
    reserved for this caller for `RESERVATION_SECONDS` against every other caller of this
    function. With no room below the ephemeral range, the kernel picks one as a last resort."""
    low, high = ports or port_range()
    if low > high:
        return _kernel_port(host)
    rng = random.SystemRandom()
    for _ in range(_ATTEMPTS):
        port = rng.randint(low, high)
        if _reserve(port) and _bindable(host, port):
            return port
    raise NoFreePortError(
        f"no free TCP port on {host} in {low}-{high} after {_ATTEMPTS} tries; see what listens "
        f"with `ss -ltn` and remove stale reservations in {reservations_dir()}"
    )


def port_range(ephemeral_file: Path = _EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The ports to pick from: 10000-29999, ending earlier if the kernel's ephemeral range
    (Linux's default is 32768-60999) begins there. Empty (low > high) when there is no room."""
    try:
        first = int(ephemeral_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32768
    return _LOWEST, min(_HIGHEST, first - 1)


def reservations_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"updatestream-ports-{os.getuid()}"


def _reserve(port: int) -> bool:
    """Claim `port` by creating its file; a claim older than `RESERVATION_SECONDS` is taken
    over (its server bound the port by then, or never will)."""
    directory = reservations_dir()
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / str(port)
    with contextlib.suppress(OSError):
        if time.time() - path.stat().st_mtime > RESERVATION_SECONDS:
            path.unlink()
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
