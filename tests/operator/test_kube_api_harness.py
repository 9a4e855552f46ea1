"""The test API server is a real one: versions, core objects, admission, CRDs and validation."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from harness.kube import KubeApi, KubectlError, start_kube_api

TOOLS = Path(__file__).resolve().parents[2] / "tools"

WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.updatestream.io
spec:
  group: example.updatestream.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [shard, minReplicas, maxReplicas]
              properties:
                shard:
                  type: string
                  pattern: '^[0-9a-f]*-[0-9a-f]*$'
                minReplicas: {type: integer, minimum: 0}
                maxReplicas: {type: integer}
              x-kubernetes-validations:
                - rule: self.minReplicas <= self.maxReplicas
                  message: maxReplicas must not be below minReplicas
                  fieldPath: .maxReplicas
"""


def pinned(module: str, path: str) -> str:
    """The version of `path` that tools/<module>/go.mod pins."""
    text = (TOOLS / module / "go.mod").read_text()
    match = re.search(rf"^\s*{re.escape(path)} (v\S+)", text, re.MULTILINE)
    assert match, f"{path} is not pinned in tools/{module}/go.mod"
    return match.group(1)


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def widget(name: str, shard: str, min_replicas: int, max_replicas: int) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "example.updatestream.io/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": "harness-crd"},
            "spec": {"shard": shard, "minReplicas": min_replicas, "maxReplicas": max_replicas},
        }
    )


@pytest.fixture(scope="module")
def widgets(kube_api: KubeApi) -> KubeApi:
    kube_api.create_namespace("harness-crd")
    kube_api.kubectl("apply", "-f", "-", input=WIDGET_CRD)
    kube_api.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/widgets.example.updatestream.io",
    )
    return kube_api


def test_kubectl_version_reports_the_pinned_server_version(kube_api: KubeApi) -> None:
    assert kube_api.server.startswith("https://127.0.0.1:")
    assert kube_api.kubeconfig.is_file()
    versions = json.loads(kube_api.kubectl("version", "-o", "json").stdout)
    expected = pinned("kube", "k8s.io/kubernetes")
    assert versions["serverVersion"]["gitVersion"] == expected
    assert versions["clientVersion"]["gitVersion"] == expected
    assert versions["serverVersion"]["minor"] == expected.split(".")[1]


def test_the_admin_is_a_cluster_admin_through_system_masters(kube_api: KubeApi) -> None:
    whoami = json.loads(kube_api.kubectl("auth", "whoami", "-o", "json").stdout)
    assert "system:masters" in whoami["status"]["userInfo"]["groups"]
    assert kube_api.kubectl("auth", "can-i", "*", "*", "--all-namespaces").stdout.strip() == "yes"


def test_namespace_configmap_secret_and_pod_are_stored_and_read_back(kube_api: KubeApi) -> None:
    kube_api.create_namespace("harness-core")
    manifest = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "shards", "namespace": "harness-core"},
                "data": {"serving": "-80,80-"},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "shard-credentials", "namespace": "harness-core"},
                "stringData": {"user": "streamer"},
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "idle", "namespace": "harness-core"},
                "spec": {"containers": [{"name": "idle", "image": "example.invalid/idle:1"}]},
            },
        ],
    }
    kube_api.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))

    get = kube_api.kubectl
    configmap = json.loads(
        get("get", "-n", "harness-core", "configmap/shards", "-o", "json").stdout
    )
    assert configmap["data"] == {"serving": "-80,80-"}
    secret = json.loads(
        get("get", "-n", "harness-core", "secret/shard-credentials", "-o", "json").stdout
    )
    assert base64.b64decode(secret["data"]["user"]) == b"streamer"
    pod = json.loads(get("get", "-n", "harness-core", "pod/idle", "-o", "json").stdout)
    # No scheduler or kubelet: the Pod is admitted (ServiceAccount plugin included) and waits.
    assert pod["status"]["phase"] == "Pending"
    assert pod["spec"]["serviceAccountName"] == "default"
    assert "nodeName" not in pod["spec"]
    names = get("get", "namespaces", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    assert "harness-core" in names


def test_a_pod_needs_its_service_account_since_no_controller_creates_it(
    kube_api: KubeApi,
) -> None:
    kube_api.kubectl("create", "namespace", "harness-no-sa")
    result = kube_api.kubectl(
        "run", "idle", "-n", "harness-no-sa", "--image=example.invalid/idle:1", check=False
    )
    assert result.returncode != 0
    assert 'serviceaccount "default" not found' in result.stderr
    with pytest.raises(KubectlError, match="failed with exit 1"):
        kube_api.kubectl("run", "idle", "-n", "harness-no-sa", "--image=example.invalid/idle:1")


def test_a_crd_is_applied_and_a_custom_object_created(widgets: KubeApi) -> None:
    widgets.kubectl("apply", "-f", "-", input=widget("split", "40-80", 1, 3))
    stored = json.loads(
        widgets.kubectl("get", "-n", "harness-crd", "widget/split", "-o", "json").stdout
    )
    assert stored["spec"] == {"shard": "40-80", "minReplicas": 1, "maxReplicas": 3}
    assert stored["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    ("name", "shard", "replicas", "field", "message"),
    [
        # the schema's pattern
        ("bad-shard", "40..80", (1, 3), "spec.shard", "should match '^[0-9a-f]*-[0-9a-f]*$'"),
        # a CEL rule
        (
            "bad-range",
            "-80",
            (5, 2),
            "spec.maxReplicas",
            "maxReplicas must not be below minReplicas",
        ),
    ],
)
def test_an_invalid_object_is_rejected_naming_the_field(
    widgets: KubeApi, name: str, shard: str, replicas: tuple[int, int], field: str, message: str
) -> None:
    result = widgets.kubectl("apply", "-f", "-", input=widget(name, shard, *replicas), check=False)
    assert result.returncode != 0
    assert field in result.stderr
    assert message in result.stderr
    missing = widgets.kubectl("get", "-n", "harness-crd", f"widget/{name}", check=False)
    assert missing.returncode != 0
    assert "NotFound" in missing.stderr


def test_helm_reaches_the_server_with_the_same_kubeconfig(kube_api: KubeApi) -> None:
    version = kube_api.helm("version", "--template", "{{.Version}}").stdout.strip()
    assert version == pinned("helm", "helm.sh/helm/v3")
    assert json.loads(kube_api.helm("list", "--all-namespaces", "-o", "json").stdout) == []


def test_stop_ends_both_processes_and_removes_the_work_dir(kube_api: KubeApi) -> None:
    stale = Path(tempfile.mkdtemp(prefix="updatestream-kube-"))
    (stale / "owner.pid").write_text(str(dead_pid()))

    other = start_kube_api(tools=kube_api.tools)
    assert not stale.exists(), "a work dir whose owner is gone is swept at start"
    assert kube_api.workdir.exists(), "the live session's work dir is kept"
    pids = [process.pid for process in other._processes]
    assert len(pids) == 2
    assert other.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    other.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not other.workdir.exists()
    other.stop()  # idempotent
