"""Helpers for the operator tests: manifests, CRD/RBAC installation, a ServiceAccount identity."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from harness.kube import KubeApi

REPO_ROOT = Path(__file__).resolve().parents[1]
OPERATOR_NAMESPACE = "updatestream-system"
OPERATOR_ACCOUNT = "updatestream-operator"
SPARK_ACCOUNT = "updatestream-spark"
SECRET_VALUE = "s3cr3t-Pa55word-9f1e"  # the value no status, event or log may ever show

T = TypeVar("T")

# The Kubeflow spark-operator's SparkApplication kind, served without its controller: enough for
# the spark-operator launcher, whose objects nothing runs here.
SPARK_APPLICATION_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {
        "name": "sparkapplications.sparkoperator.k8s.io",
        # *.k8s.io groups need this; the spark-operator's own CRD carries it too
        "annotations": {"api-approved.kubernetes.io": "unapproved, test-only"},
    },
    "spec": {
        "group": "sparkoperator.k8s.io",
        "scope": "Namespaced",
        "names": {"kind": "SparkApplication", "plural": "sparkapplications"},
        "versions": [
            {
                "name": "v1beta2",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def apply_crds(api: KubeApi) -> None:
    api.kubectl("apply", "-f", str(REPO_ROOT / "crds"))
    for crd in ("keyspaces.updatestream.io", "updatestreams.updatestream.io"):
        api.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


def apply_spark_application_crd(api: KubeApi) -> None:
    apply(api, "default", SPARK_APPLICATION_CRD)
    api.kubectl("wait", "--for=condition=Established", "crd/sparkapplications.sparkoperator.k8s.io")


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
    token = api.kubectl(
        "create", "token", OPERATOR_ACCOUNT, "-n", OPERATOR_NAMESPACE, "--duration=4h"
    ).stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": api.server, "certificate-authority": str(api.pki.ca_cert)},
            }
        ],
        "users": [{"name": OPERATOR_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": "operator",
                "context": {"cluster": "test", "user": OPERATOR_ACCOUNT, "namespace": "default"},
            }
        ],
        "current-context": "operator",
    }
    path = workdir / "operator.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


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
