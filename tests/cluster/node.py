"""The one-node Kubernetes cluster of scripts/cluster-up.sh, for the tests in this folder.

`Node.up()` runs the script (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
containerd and kubelet, pods on a bridge of their own), then builds the image and loads it into
the node's containerd (both cached); `Node.down()` runs scripts/cluster-down.sh and checks the
firewall is as it was. The servers the test starts on loopback are reached from pods through
`Forwarder`s listening on the bridge address: the servers keep their loopback accounts, and
nothing listens on an outside interface.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from harness.kube import ensure_kube_tools
from tests.charts.prometheus import pod_targets

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = REPO_ROOT / "scripts"
NODE_DIR = REPO_ROOT / ".updatestream" / "node"
BRIDGE_IP = "10.77.0.1"
API_SERVER = f"https://{BRIDGE_IP}:6443"
T = TypeVar("T")


class NodeError(AssertionError):
    """The node could not be brought up or down: the test fails (it is never skipped)."""


def _run(command: list[str], timeout: float) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise NodeError(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
            f"{done.stderr[-3000:]}"
        )
    return done.stdout


def firewall() -> str:
    return _run(["iptables", "-S"], 30) + _run(["iptables", "-t", "nat", "-S"], 30)


@dataclass
class Node:
    image: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    firewall_before: str = ""

    @property
    def kubeconfig(self) -> Path:
        return NODE_DIR / "kubeconfig"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def up(self) -> None:
        if os.geteuid() != 0:
            raise NodeError("the one-node cluster needs root (bridge, firewall, cgroups)")
        tools = ensure_kube_tools()
        self.bin_dir = tools.kube_apiserver.parent
        self.firewall_before = firewall()
        started = time.monotonic()
        _run(["bash", str(SCRIPTS / "cluster-up.sh")], 300)
        self.timings["cluster-up"] = time.monotonic() - started
        started = time.monotonic()
        _run(["bash", str(SCRIPTS / "build-image.sh"), "all"], 1800)
        self.timings["image"] = time.monotonic() - started
        cache = Path(
            os.environ.get("UPDATESTREAM_CACHE_DIR") or Path.home() / ".cache/updatestream"
        )
        self.image = (cache / "images" / "app.ref").read_text().strip()

    def down(self) -> None:
        _run(["bash", str(SCRIPTS / "cluster-down.sh")], 300)
        after = firewall()
        if after != self.firewall_before:
            raise NodeError(
                f"the firewall changed:\nbefore\n{self.firewall_before}\nafter\n{after}"
            )

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        command = [str(self.bin_dir / "kubectl"), *args]
        done = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=180, env=self.env
        )
        if check and done.returncode != 0:
            raise NodeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def helm(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin_dir / "helm"), *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=self.env,
        )
        if done.returncode != 0:
            raise NodeError(f"helm {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def apply(self, namespace: str, *documents: dict[str, Any]) -> None:
        self.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(documents))

    def items(self, namespace: str, kind: str, selector: str = "") -> list[dict[str, Any]]:
        args = ["get", kind, "-n", namespace, "-o", "yaml"]
        if selector:
            args += ["-l", selector]
        return list(yaml.safe_load(self.kubectl(*args)).get("items") or [])


def create_secret(node: Node, namespace: str, name: str, folder: Path) -> None:
    """A Secret of the `username` and `password` files in `folder`."""
    node.kubectl(
        "create", "secret", "generic", name, "-n", namespace,
        f"--from-file=username={folder / 'username'}",
        f"--from-file=password={folder / 'password'}",
    )  # fmt: skip


def chart_image_values(node: Node) -> list[str]:
    """`--set` arguments naming the image the node holds, never pulled."""
    registry, _, rest = node.image.partition("/")
    repository, _, tag = rest.partition(":")
    return [
        "--set", f"image.registry={registry}", "--set", f"image.repository={repository}",
        "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
    ]  # fmt: skip


def install_chart(node: Node, namespace: str, *values: str) -> None:
    """`helm install` of the chart with the node's image, its drivers reaching the API server
    on the bridge address and asking for half a core each; `values` are more arguments."""
    node.helm(
        "install", "updatestream", str(REPO_ROOT / "charts" / "updatestream-operator"),
        "-n", namespace, "--wait", "--timeout", "180s", *chart_image_values(node),
        "--set", f"spark.driverMaster={API_SERVER}", "--set", "spark.coreRequest=500m",
        "--set", "operator.resources.requests.cpu=100m", *values,
    )  # fmt: skip


class PodDiscovery:
    """An HTTP service discovery on loopback for a Prometheus on this machine: the node's Pods
    (read through the API server on each request) with the meta labels of Prometheus'
    Kubernetes discovery, which Debian's Prometheus is built without."""

    def __init__(self, node: Node) -> None:
        node_ref = node

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pods = yaml.safe_load(node_ref.kubectl("get", "pods", "-A", "-o", "yaml"))
                body = json.dumps(pod_targets(pods.get("items") or [])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/pods"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 180.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


class Forwarder:
    """Accepts TCP connections on the bridge address and relays each to a loopback port."""

    def __init__(self, target_port: int, host: str = BRIDGE_IP) -> None:
        self.target_port = target_port
        self.listener = socket.create_server((host, 0))
        self.port: int = self.listener.getsockname()[1]
        self.closed = False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            upstream.settimeout(None)
            self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for sock in self.sockets:
            sock.close()
