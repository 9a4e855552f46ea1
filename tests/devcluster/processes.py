"""The reshard command run as its own process, killed with SIGKILL at a chosen moment (test
helper)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from updatestream_cli.devcluster.cluster import DevCluster


def run_reshard_and_kill(
    cluster: DevCluster, args: list[str], ready: Callable[[], bool], log: Path
) -> None:
    """Run `updatestream devcluster reshard ARGS`, SIGKILL it as soon as `ready()` holds."""
    cmd = [
        sys.executable,
        "-m",
        "updatestream_cli",
        "devcluster",
        "reshard",
        "--dir",
        str(cluster.dir),
    ]
    with log.open("ab") as out:
        proc = subprocess.Popen([*cmd, *args], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 90
        while not ready():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "reshard never reached the moment to kill it"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
