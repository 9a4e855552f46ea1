"""A real Kubernetes API server (kube-apiserver on etcd) for the operator and chart tests.

The binaries are built from the pinned Go modules under `tools/` by
`scripts/build-kube-tools.sh` into `${UPDATESTREAM_CACHE_DIR:-~/.cache/updatestream}/bin`.
No kubelet, scheduler or controller-manager runs: objects are stored, validated, admitted and
authorised exactly as in a cluster, but nothing acts on them (Pods stay Pending, namespaces
are never finalised after deletion, no controller creates ServiceAccounts).

The ServiceAccount admission plugin stays enabled, as in a real cluster, so a Pod needs its
ServiceAccount to exist. Since no controller-manager creates the `default` ServiceAccount of
a namespace, the harness creates it in `default` at start and `KubeApi.create_namespace()`
creates it in every namespace it makes.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.pki import KubePki, write_pki
from updatestream.core.errors import UpdateStreamError

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-kube-tools.sh"
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
_STARTS = 3  # attempts when a freshly picked port was taken by someone else meanwhile


class KubeHarnessError(UpdateStreamError):
    """The test API server (or etcd, or the tools they are built from) could not be used."""


class KubectlError(KubeHarnessError):
    """A kubectl or helm command failed; `result` holds its exit code, stdout and stderr."""

    def __init__(self, message: str, result: subprocess.CompletedProcess[str]) -> None:
        super().__init__(message)
        self.result = result


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


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child: be killed when the test process dies, even if it is itself killed.

    SIGKILL, not SIGTERM: both servers would get it at once, and kube-apiserver's graceful
    shutdown then waits forever on the etcd that is going away. Their data is disposable.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop_process(process: subprocess.Popen[bytes], grace: float = 15.0) -> None:
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


@dataclass
class KubeApi:
    """A running test API server; `kubeconfig` authenticates as a system:masters admin."""

    server: str
    kubeconfig: Path
    workdir: Path
    tools: KubeTools
    pki: KubePki
    etcd_url: str
    startup_seconds: float = 0.0  # etcd + kube-apiserver until /readyz, for the reports
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    _keep_workdir: bool = False

    @property
    def env(self) -> dict[str, str]:
        """Environment for a subprocess (the operator, a CLI) that should use this server."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this server; raise KubectlError on failure if `check`."""
        cache = self.workdir / "kubectl-cache"
        command = [
            str(self.tools.kubectl),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={cache}",
        ]
        return self._run("kubectl", [*command, *args], check, input, timeout)

    def helm(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """Run the built helm against this server, with its caches inside the work dir."""
        command = [str(self.tools.helm), f"--kubeconfig={self.kubeconfig}", *args]
        return self._run("helm", command, check, input, timeout)

    def _run(
        self,
        tool: str,
        command: Sequence[str],
        check: bool,
        input: str | None,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        helm_home = self.workdir / "helm"
        env = {
            **self.env,
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
        }
        result = subprocess.run(
            command, capture_output=True, text=True, input=input, timeout=timeout, env=env
        )
        if check and result.returncode != 0:
            # Only the verb and the resource: later arguments may carry secret values.
            verb = [a for a in command[1:] if not a.startswith("-")][:2]
            raise KubectlError(
                f"`{tool} {' '.join(verb)} ...` failed with exit {result.returncode}: "
                f"{result.stderr.strip()}",
                result,
            )
        return result

    def create_namespace(self, name: str) -> None:
        """Create (or keep) a namespace and its `default` ServiceAccount, so Pods can be made."""
        manifest = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": name},
                },
            ],
        }
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))

    def stop(self) -> None:
        """Stop the API server, then etcd (by pid), and remove the work directory. Idempotent."""
        while self._processes:
            _stop_process(self._processes.pop())
        if not self._keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _remove_stale_workdirs() -> None:
    """Remove work dirs left by test processes that were killed (their owner pid is gone)."""
    for workdir in Path(tempfile.gettempdir()).glob("updatestream-kube-*"):
        try:
            owner = int((workdir / "owner.pid").read_text())
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(workdir, ignore_errors=True)
        except (OSError, ValueError):
            continue  # another user's, or still being created: leave it alone


def _spawn(command: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


def _wait_until(
    ready: Callable[[], bool],
    process: subprocess.Popen[bytes],
    what: str,
    log: Path,
    timeout: float,
) -> bool:
    """True once `ready()`; False if the process exited; KubeHarnessError on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if ready():
            return True
        time.sleep(0.2)
    raise KubeHarnessError(
        f"{what} did not become ready within {timeout:.0f}s; its log ends with:\n{_log_tail(log)}"
    )


def _start_etcd(
    tools: KubeTools, workdir: Path, timeout: float
) -> tuple[subprocess.Popen[bytes], str]:
    log = workdir / "etcd.log"
    for _ in range(_STARTS):
        client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        process = _spawn(
            [
                str(tools.etcd),
                "--name=updatestream-test",
                f"--data-dir={workdir / 'etcd-data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=updatestream-test={peer}",
                f"--initial-cluster-token=updatestream-test-{os.getpid()}",
                "--unsafe-no-fsync",  # test data: durability is not needed, speed is
                "--log-level=warn",
            ],
            log,
        )

        def healthy(url: str = client) -> bool:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    return b'"health":"true"' in response.read()
            except (OSError, urllib.error.URLError):
                return False

        if _wait_until(healthy, process, "etcd", log, timeout):
            return process, client
        shutil.rmtree(workdir / "etcd-data", ignore_errors=True)
        if "address already in use" not in _log_tail(log, 200):
            break
    raise KubeHarnessError(f"etcd exited during start; its log ends with:\n{_log_tail(log)}")


def _start_apiserver(
    tools: KubeTools, workdir: Path, pki: KubePki, etcd_url: str, timeout: float
) -> tuple[subprocess.Popen[bytes], str]:
    log = workdir / "kube-apiserver.log"
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    for _ in range(_STARTS):
        port = free_port()
        server = f"https://127.0.0.1:{port}"
        process = _spawn(
            [
                str(tools.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={pki.sa_public_key}",
                f"--service-account-signing-key-file={pki.sa_signing_key}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Loopback addresses are not valid Endpoints; nothing in-cluster calls back.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
            log,
        )

        def ready(url: str = server) -> bool:
            try:
                with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=2) as r:
                    return bool(r.status == 200)
            except (OSError, urllib.error.URLError):
                return False

        if _wait_until(ready, process, "kube-apiserver", log, timeout):
            return process, server
        if "address already in use" not in _log_tail(log, 200):
            break
    raise KubeHarnessError(
        f"kube-apiserver exited during start; its log ends with:\n{_log_tail(log)}"
    )


def _write_kubeconfig(path: Path, server: str, pki: KubePki) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "updatestream-test",
                "cluster": {"server": server, "certificate-authority": str(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "updatestream-admin",
                "user": {
                    "client-certificate": str(pki.admin_cert),
                    "client-key": str(pki.admin_key),
                },
            }
        ],
        "contexts": [
            {
                "name": "updatestream-test",
                "context": {
                    "cluster": "updatestream-test",
                    "user": "updatestream-admin",
                    "namespace": "default",
                },
            }
        ],
        "current-context": "updatestream-test",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def start_kube_api(
    tools: KubeTools | None = None, startup_timeout: float = 120, keep_workdir: bool = False
) -> KubeApi:
    """Start etcd and kube-apiserver on loopback ports; return once /readyz answers ok.

    Both are stopped by `KubeApi.stop()`, at interpreter exit, and (through the parent-death
    signal) if the test process is killed.
    """
    tools = tools or ensure_kube_tools()
    started = time.monotonic()
    _remove_stale_workdirs()
    workdir = Path(tempfile.mkdtemp(prefix="updatestream-kube-"))
    (workdir / "owner.pid").write_text(str(os.getpid()))
    pki = write_pki(workdir / "pki", SERVICE_IP)
    api = KubeApi(
        server="",
        kubeconfig=workdir / "kubeconfig",
        workdir=workdir,
        tools=tools,
        pki=pki,
        etcd_url="",
        _keep_workdir=keep_workdir,
    )
    atexit.register(api.stop)
    try:
        etcd, api.etcd_url = _start_etcd(tools, workdir, startup_timeout)
        api._processes.append(etcd)
        apiserver, api.server = _start_apiserver(tools, workdir, pki, api.etcd_url, startup_timeout)
        api._processes.append(apiserver)
        _write_kubeconfig(api.kubeconfig, api.server, pki)
        # No controller-manager: make the ServiceAccount it would have made.
        api.create_namespace("default")
        api.startup_seconds = time.monotonic() - started
    except BaseException:
        api.stop()
        raise
    return api


_shared: KubeApi | None = None


def shared_kube_api() -> KubeApi:
    """One API server per test process, shared by every conftest that exposes `kube_api`."""
    global _shared
    if _shared is None or not _shared._processes:
        _shared = start_kube_api()
    return _shared
