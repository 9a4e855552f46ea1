"""Ports for local servers: outside the kernel's ephemeral range, reserved across processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from updatestream import local_ports
from updatestream.core.errors import UpdateStreamError
from updatestream.local_ports import NoFreePortError, free_port, port_range


@pytest.fixture(autouse=True)
def own_reservations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Reservations in a directory of this test alone (the suite's servers use the shared one)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(local_ports.tempfile, "tempdir", None)  # read TMPDIR again
    return tmp_path


def test_a_port_comes_from_below_the_ephemeral_range_and_can_be_listened_on() -> None:
    low, high = port_range()
    ephemeral_first = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert (low, high) == (10000, min(29999, ephemeral_first - 1))
    port = free_port()
    assert low <= port <= high
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_the_range_ends_below_the_ephemeral_and_node_port_ranges(tmp_path: Path) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("20000\t60999\n")
    assert port_range(ranges) == (10000, 19999)
    ranges.write_text("40000\t60999\n")
    assert port_range(ranges) == (10000, 29999)  # below Kubernetes' NodePort range
    ranges.write_text("not numbers\n")
    assert port_range(ranges) == (10000, 29999)


def test_with_no_room_below_the_ephemeral_range_the_kernel_picks() -> None:
    port = free_port(ports=(10000, 9999))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_processes_picking_at_once_never_get_the_same_port(own_reservations: Path) -> None:
    """Four processes take 20 ports each from 100: without reservations some would collide."""
    low = free_port(ports=(20000, 29900))  # a hundred ports nobody else here picks from
    script = (
        "import sys, time; from updatestream.local_ports import free_port\n"
        f"time.sleep(max(0.0, {time.time() + 1.5} - time.time()))\n"
        f"print(*(free_port(ports=({low + 1}, {low + 100})) for _ in range(20)))\n"
    )
    env = {**os.environ, "TMPDIR": str(own_reservations)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
        for _ in range(4)
    ]
    picked = [int(p) for proc in procs for p in proc.communicate(timeout=60)[0].split()]
    assert all(proc.returncode == 0 for proc in procs)
    assert len(picked) == 80
    assert len(set(picked)) == 80, sorted(picked)


def test_a_port_in_use_is_never_handed_out() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(NoFreePortError, match=f"in {port}-{port} after") as refused:
            free_port(ports=(port, port))
    assert isinstance(refused.value, UpdateStreamError)  # the CLI prints it on one line


def test_a_reservation_holds_until_it_expires(own_reservations: Path) -> None:
    port = free_port(ports=(20000, 29999))
    with pytest.raises(NoFreePortError, match="stale reservations"):
        free_port(ports=(port, port))
    claim = local_ports.reservations_dir() / str(port)
    assert claim.parent.parent == own_reservations
    old = time.time() - local_ports.RESERVATION_SECONDS - 1
    os.utime(claim, (old, old))
    assert free_port(ports=(port, port)) == port
