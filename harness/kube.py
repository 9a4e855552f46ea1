"""A real Kubernetes API server (kube-apiserver on etcd) for the operator and chart tests.

The binaries are built from the pinned Go modules under `tools/` (`harness.kubetools`).
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
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.kubetools import KubeHarnessError, KubeTools, cache_dir, ensure_kube_tools
from harness.pki import KubePki, write_pki
from harness.process import die_with_parent, stop_process
from updatestream.local_ports import free_port

__all__ = [
    "KubeApi",
    "KubeHarnessError",
    "KubeTools",
    "KubectlError",
    "cache_dir",
    "ensure_kube_tools",
    "free_port",
    "shared_kube_api",
    "start_kube_api",
    "write_kubeconfig",
]

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "updatestream-admin"  # its client certificate is in the group system:masters
_STARTS = 3  # attempts when a freshly picked port was taken by someone else meanwhile


class KubectlError(KubeHarnessError):
    """A kubectl or helm command failed; `result` holds its exit code, stdout and stderr."""

    def __init__(self, message: str, result: subprocess.CompletedProcess[str]) -> None:
        super().__init__(message)
        self.result = result


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


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

    def token_kubeconfig(
        self, namespace: str, account: str, path: Path, duration: str = "1h"
    ) -> Path:
        """A kubeconfig authenticating as a ServiceAccount with a bound token (TokenRequest)."""
        token = self.kubectl(
            "create", "token", account, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        return write_kubeconfig(path, self.server, self.pki.ca_cert, account, {"token": token})

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
            stop_process(self._processes.pop())
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
            preexec_fn=die_with_parent,
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


def write_kubeconfig(
    path: Path, server: str, ca_cert: Path, user: str, credentials: Mapping[str, str]
) -> Path:
    """A kubeconfig for one user of the test API server (mode 0600: it holds credentials)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "updatestream-test",
                "cluster": {"server": server, "certificate-authority": str(ca_cert)},
            }
        ],
        "users": [{"name": user, "user": dict(credentials)}],
        "contexts": [
            {
                "name": user,
                "context": {"cluster": "updatestream-test", "user": user, "namespace": "default"},
            }
        ],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


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
    pki = write_pki(workdir / "pki", SERVICE_IP, ADMIN_USER)
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
        admin = {"client-certificate": str(pki.admin_cert), "client-key": str(pki.admin_key)}
        write_kubeconfig(api.kubeconfig, api.server, pki.ca_cert, ADMIN_USER, admin)
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
