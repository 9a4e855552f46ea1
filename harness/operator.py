"""Helpers for the operator tests: manifests, CRD/RBAC installation, a ServiceAccount identity,
the operator under kopf's test runner, and what a test reads of its streams."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import yaml
from kopf.testing import KopfRunner
from updatestream_operator import config

from harness.kube import KubeApi

REPO_ROOT = Path(__file__).resolve().parents[1]
OPERATOR_NAMESPACE = "updatestream-system"
OPERATOR_ACCOUNT = "updatestream-operator"
SPARK_ACCOUNT = "updatestream-spark"
SECRET_VALUE = "s3cr3t-Pa55word-9f1e"  # the value no status, event or log may ever show

T = TypeVar("T")


def apply_crds(api: KubeApi) -> None:
    api.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    for crd in ("keyspaces.updatestream.io", "updatestreams.updatestream.io"):
        api.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


def keyspace_manifest(
    name: str, serving: list[str] | None = None, secret: str = "reader"
) -> dict[str, Any]:
    shards = ["-80", "80-", "-40", "40-80"]
    return {
        "apiVersion": "updatestream.io/v1alpha1",
        "kind": "Keyspace",
        "metadata": {"name": name},
        "spec": {
            "shards": [
                {
                    "name": shard,
                    "mysql": {"host": "127.0.0.1", "port": 33061 + i},
                    "credentialsSecret": {"name": secret},
                }
                for i, shard in enumerate(shards)
            ],
            "vschema": {
                "sharded": True,
                "vindexes": {"hash": {"type": "hash"}},
                "tables": {"orders": {"column_vindexes": [{"column": "id", "name": "hash"}]}},
            },
            "servingShards": serving or ["-80", "80-"],
        },
    }


def stream_manifest(name: str, keyspace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "updatestream.io/v1alpha1",
        "kind": "UpdateStream",
        "metadata": {"name": name},
        "spec": {
            "keyspace": keyspace,
            "keyRanges": ["-"],
            "tables": ["orders"],
            "start": {"mode": "timestamp", "timestamp": 1_700_000_000},
            "sinks": [{"type": "cdcv2", "path": "/data/cdc"}],
            **spec,
        },
    }


def apply(api: KubeApi, namespace: str, manifest: dict[str, Any]) -> None:
    api.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def get(api: KubeApi, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    result = api.kubectl("get", "-n", namespace, kind, name, "-o", "json", check=False)
    if result.returncode != 0:
        if "NotFound" in result.stderr:
            return None
        raise AssertionError(result.stderr)
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def items(api: KubeApi, namespace: str, kind: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["get", "-n", namespace, kind, "-o", "json"]
    if selector:
        args += ["-l", selector]
    found: list[dict[str, Any]] = json.loads(api.kubectl(*args).stdout)["items"]
    return found


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 120) -> T:
    """Poll `check` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def install_operator_identity(api: KubeApi, workdir: Path) -> Path:
    """Apply the RBAC manifests and return a kubeconfig authenticating as the operator's
    ServiceAccount (a bound token), so the tests run with exactly the permissions the
    manifests grant."""
    api.create_namespace(OPERATOR_NAMESPACE)
    api.kubectl("apply", "-f", str(REPO_ROOT / "crds" / "rbac"))
    path = workdir / "operator.kubeconfig"
    return api.token_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, path, duration="4h")


def prepare_operator(api: KubeApi, workdir: Path, namespace: str) -> Path:
    """Everything an operator test starts from: the CRDs, the operator's identity (its
    kubeconfig is returned) and `namespace` prepared for its streams' jobs."""
    apply_crds(api)
    kubeconfig = install_operator_identity(api, workdir)
    prepare_namespace(api, namespace)
    return kubeconfig


def prepare_namespace(api: KubeApi, namespace: str) -> None:
    """A namespace with the Spark drivers' ServiceAccount and Role, and the reader Secret."""
    api.create_namespace(namespace)
    rbac = (REPO_ROOT / "crds" / "rbac" / "spark-driver.yaml").read_text()
    api.kubectl("apply", "-n", namespace, "-f", "-", input=rbac)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "reader"},
        "stringData": {"username": "updatestream", "password": SECRET_VALUE},
    }
    apply(api, namespace, secret)


def secret_from_files(api: KubeApi, namespace: str, folder: Path) -> None:
    """A Kubernetes Secret named after a mounted-Secret folder, from its `username` and
    `password` files (the values never on a command line)."""
    api.kubectl(
        "create", "secret", "generic", folder.name, "-n", namespace,
        f"--from-file=username={folder / 'username'}",
        f"--from-file=password={folder / 'password'}",
    )  # fmt: skip


@contextlib.contextmanager
def kopf_operator(
    api: KubeApi, namespace: str, kubeconfig: Path, *, verbose: bool = True, **settings: Any
) -> Iterator[KopfRunner]:
    """The operator's handlers under kopf's KopfRunner, watching `namespace` as the identity
    of `kubeconfig`; `settings` are `OperatorConfig` fields (the local launcher, no metrics
    endpoint and a one-second timer unless given).

    On the way out, while the operator still runs, every UpdateStream in the namespace is
    deleted and waited for, so that the operator stops their jobs and removes its finalizers.
    """
    defaults: dict[str, Any] = {"launcher": "local", "metrics_port": 0, "timer_interval": 1.0}
    config.configure(
        config.OperatorConfig(
            namespace=namespace, kubeconfig=str(kubeconfig), **(defaults | settings)
        )
    )
    args = ["run", "--standalone", "-n", namespace, "-m", "updatestream_operator.handlers"]
    if verbose:
        args.append("--verbose")
    with (
        # kopf's own login, and spark-submit's
        mock.patch.dict(os.environ, {"KUBECONFIG": str(kubeconfig)}),
        KopfRunner(args, timeout=60) as runner,
    ):
        try:
            yield runner
        finally:
            _delete_streams(api, namespace)


def _delete_streams(api: KubeApi, namespace: str) -> None:
    for stream in items(api, namespace, "updatestreams"):
        name = stream["metadata"]["name"]
        api.kubectl("delete", "-n", namespace, "updatestream", name, "--wait=false")
    wait_for(lambda: not items(api, namespace, "updatestreams"), "the streams to be deleted")


def condition_of(status: dict[str, Any], type_: str) -> tuple[str, str] | None:
    """(status, reason) of a condition in an UpdateStream's status; None when it has none."""
    for found in status.get("conditions", []):
        if found["type"] == type_:
            return found["status"], found.get("reason", "")
    return None


class StreamWatch:
    """What a test reads of the UpdateStreams in one namespace: status, conditions, Events.
    Every object and Event read is kept as JSON in `seen`, to check no Secret value shows."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.seen: list[str] = []

    def stream(self, name: str) -> dict[str, Any] | None:
        found = get(self.api, self.namespace, "updatestream", name)
        if found is not None:
            self.seen.append(json.dumps(found))
        return found

    def status(self, name: str) -> dict[str, Any]:
        return dict(((self.stream(name) or {}).get("status")) or {})

    def condition(self, name: str, type_: str) -> tuple[str, str] | None:
        return condition_of(self.status(name), type_)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The Events in the namespace (on UpdateStream `name`), oldest first."""
        found = items(self.api, self.namespace, "events")
        self.seen.extend(json.dumps(e) for e in found)
        found = [e for e in found if name is None or e["involvedObject"]["name"] == name]
        return sorted(found, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))

    def reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events(name)]
