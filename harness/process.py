"""Child processes the harnesses and tests start: tied to the test process, stopped by pid."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess


def die_with_parent() -> None:
    """In the child: be killed when the test process dies, even if it is itself killed.

    SIGKILL, not SIGTERM: both servers would get it at once, and kube-apiserver's graceful
    shutdown then waits forever on the etcd that is going away. Their data is disposable.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stop_process(process: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)
