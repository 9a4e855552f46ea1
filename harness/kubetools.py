"""The Kubernetes binaries the test API server runs: built once from pinned Go modules.

`scripts/build-kube-tools.sh` builds kube-apiserver, kubectl, etcd and helm from the modules
under `tools/` into `${UPDATESTREAM_CACHE_DIR:-~/.cache/updatestream}/bin`; a second run with
unchanged modules only compares a hash. See docs/kube-test-harness.md.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from updatestream.core.errors import UpdateStreamError

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-kube-tools.sh"


class KubeHarnessError(UpdateStreamError):
    """The test API server (or etcd, or the tools they are built from) could not be used."""


def cache_dir() -> Path:
    configured = os.environ.get("UPDATESTREAM_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "updatestream"


@dataclass(frozen=True)
class KubeTools:
    """Absolute paths of the built binaries (never the ones on PATH, which may differ)."""

    kube_apiserver: Path
    kubectl: Path
    etcd: Path
    helm: Path

    @classmethod
    def in_dir(cls, directory: Path) -> KubeTools:
        return cls(
            kube_apiserver=directory / "kube-apiserver",
            kubectl=directory / "kubectl",
            etcd=directory / "etcd",
            helm=directory / "helm",
        )


_built: KubeTools | None = None


def ensure_kube_tools(echo: Callable[[str], None] | None = None) -> KubeTools:
    """Run the (idempotent) build script once per process and return the binaries' paths.

    A cold build compiles kube-apiserver from source and takes tens of minutes on two cores;
    afterwards the script only compares a hash and prints one line. `echo` receives each
    progress line as it is printed.
    """
    global _built
    if _built is not None:
        return _built
    process = subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if echo is not None:
            echo(lines[-1])
    if process.wait() != 0:
        tail = "\n".join(lines[-30:])
        raise KubeHarnessError(
            f"building the Kubernetes test tools failed (exit {process.returncode}); "
            f"run `bash scripts/build-kube-tools.sh` to see why. Last output:\n{tail}"
        )
    tools = KubeTools.in_dir(cache_dir() / "bin")
    missing = [str(p) for p in vars(tools).values() if not os.access(p, os.X_OK)]
    if missing:
        raise KubeHarnessError(
            f"the build script succeeded but {', '.join(missing)} is missing; remove "
            "the .stamp-* files in that directory and run scripts/build-kube-tools.sh again"
        )
    _built = tools
    return tools
