"""Starting the cluster's long-running processes detached, waiting for them, stopping them by pid.

Every process runs as the service user in a session of its own, with its output in a log file
under the cluster directory. A recorded pid is only ever signalled while its command line still
names the cluster directory, so a reused pid of someone else's process is never touched.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from updatestream_cli.devcluster.local_server import pid_alive, pid_cmdline, terminate
from updatestream_cli.vitess.errors import ProcessStartError
from updatestream_cli.vitess.runtime import ServiceUser


def log_tail(path: Path, size: int = 2000) -> str:
    """The last `size` characters of a log file ('' when there is none)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    user: ServiceUser,
    env: Mapping[str, str],
    cwd: Path,
) -> int:
    """Start `argv` detached as `user`, output appended to `log_path`; returns its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    uid, gid, groups = user.process_ids()
    with log_path.open("ab") as log:
        user.chown(log_path)
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,  # outlives the CLI that started it; not hit by Ctrl-C
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        except OSError as exc:
            raise ProcessStartError(f"cannot start {argv[0]}: {exc}") from None
    pid: int = proc.pid
    return pid


def run(
    argv: Sequence[str],
    *,
    user: ServiceUser,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    log_path: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a short command as `user` and return its result (stdout and stderr as text)."""
    uid, gid, groups = user.process_ids()
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            cwd=cwd,
            env=dict(env),
            timeout=timeout,
            check=False,
            user=uid,
            group=gid,
            extra_groups=groups,
        )
    except subprocess.TimeoutExpired:
        raise ProcessStartError(
            f"`{' '.join(argv[:3])} ...` did not finish within {timeout:.0f}s"
        ) from None
    if log_path is not None:
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}(exit {proc.returncode})\n")
    return proc


def owns(pid: int | None, marker: str) -> bool:
    """True while `pid` runs a process whose command line names `marker`."""
    return pid is not None and pid_alive(pid) and marker in pid_cmdline(pid)


def stop(pid: int | None, marker: str, timeout: float = 30.0) -> bool:
    """SIGTERM `pid` if it still runs our process (see `owns`), SIGKILL after `timeout`."""
    if pid is None or not owns(pid, marker):
        return False
    terminate(pid, timeout)
    return True


def tcp_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_for(
    ready: Callable[[], bool],
    *,
    what: str,
    pid: int | None,
    log_path: Path,
    timeout: float,
) -> None:
    """Poll `ready` until it holds; fail early, with the log's tail, if `pid` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if pid is not None and not pid_alive(pid):
            raise ProcessStartError(
                f"{what} exited during start-up; {log_path} ends with:\n{log_tail(log_path)}"
            )
        time.sleep(0.2)
    raise ProcessStartError(
        f"{what} did not become ready within {timeout:.0f}s; {log_path} ends with:\n"
        f"{log_tail(log_path)}"
    )
