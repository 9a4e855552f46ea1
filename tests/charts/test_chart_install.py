"""The chart against the real test API server (kube-apiserver on etcd, see harness/kube.py).

- the rendered manifests pass `kubectl apply --dry-run=server` (CRDs applied first);
- `helm install` creates the operator Deployment, its RBAC and the CRDs, the API server's own
  authoriser grants exactly what the chart means to (a SubjectAccessReview for each
  ServiceAccount), and its PodSecurity admission accepts every Pod the chart defines in a
  namespace enforcing `restricted`;
- `helm uninstall` removes what the release created (Helm keeps CRDs, by design).

The full values enable a ServiceMonitor, PodMonitor and PrometheusRule: the test installs
minimal monitoring.coreos.com CRDs (tests/charts/monitoring-crds.yaml) so that they are really
applied; their contents are checked by the template tests and promtool. No kubelet runs, so
Pods stay Pending.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.kube import KubeApi, free_port
from tests.charts.conftest import CHART, FULL_VALUES, REPO_ROOT, Helm

MONITORING_CRDS = Path(__file__).with_name("monitoring-crds.yaml")
CRD_NAMES = ("keyspaces.updatestream.io", "updatestreams.updatestream.io")
RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"


def apply_crds(api: KubeApi, path: Path) -> None:
    api.kubectl("apply", "-f", str(path))
    names = [d["metadata"]["name"] for d in load_yaml_docs(path)]
    api.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names]
    )


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]


def assert_grants(
    api: KubeApi,
    account: str,
    namespace: str,
    allowed: list[tuple[str, str]],
    denied: list[tuple[str, str]],
) -> None:
    """The authoriser lets `account` do each (verb, resource) of `allowed` in `namespace`,
    and none of `denied`."""
    for verb, resource in allowed:
        assert can_i(api, account, verb, resource, namespace), f"may {verb} {resource}"
    for verb, resource in denied:
        assert not can_i(api, account, verb, resource, namespace), f"may not {verb} {resource}"


def existing_crds(api: KubeApi) -> set[str]:
    found = api.kubectl("get", "crd", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    return set(found)


def can_i(api: KubeApi, account: str, verb: str, resource: str, namespace: str | None) -> bool:
    """What the API server's authoriser answers (a SubjectAccessReview) for a ServiceAccount
    `namespace:name` doing `verb` on `resource[.group][/subresource]` (namespace None: all)."""
    sa_namespace, sa_name = account.split(":")
    resource, _, subresource = resource.partition("/")
    plural, _, group = resource.partition(".")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{sa_namespace}:{sa_name}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{sa_namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "namespace": namespace or "",
                "verb": verb,
                "group": group,
                "resource": plural,
                "subresource": subresource,
            },
        },
    }
    result = api.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review))
    return bool(json.loads(result.stdout)["status"].get("allowed"))


def objects(api: KubeApi, kinds: str, namespace: str, release: str) -> set[str]:
    out = api.kubectl(
        "get", kinds, "-n", namespace, "-l", f"app.kubernetes.io/instance={release}", "-o", "name"
    ).stdout
    return set(out.split())


@dataclass
class Release:
    name: str
    namespace: str
    manifests: list[dict[str, Any]]
    install_output: str
    crds_before: set[str] = field(default_factory=set)  # CRDs that existed before the install


def install(api: KubeApi, release: str, namespace: str, *values: str) -> Release:
    args = ["--values", *values] if values else []
    result = api.helm("install", release, str(CHART), "--namespace", namespace, *args)
    manifest = api.helm("get", "manifest", release, "--namespace", namespace).stdout
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    return Release(release, namespace, docs, result.stdout)


def uninstall(api: KubeApi, release: Release) -> str:
    return api.helm("uninstall", release.name, "--namespace", release.namespace).stdout


def ensure_uninstalled(api: KubeApi, release: Release) -> None:
    listed = api.helm("list", "--namespace", release.namespace, "-o", "json").stdout
    if any(r["name"] == release.name for r in json.loads(listed)):
        uninstall(api, release)


# -- helm install: default values, namespaced --------------------------------------------------


@pytest.fixture(scope="module")
def default_release(kube_api: KubeApi) -> Iterator[Release]:
    """The chart installed with default values into a namespace enforcing `restricted`."""
    namespace = "chart-install"
    kube_api.create_namespace(namespace)
    kube_api.kubectl("label", "--overwrite", "namespace", namespace, RESTRICTED)
    release = Release("us", namespace, [], "")
    before = existing_crds(kube_api)
    try:
        release = install(kube_api, "us", namespace)
        release.crds_before = before
        yield release
    finally:
        ensure_uninstalled(kube_api, release)


def test_install_creates_the_operator_its_rbac_and_the_crds(
    kube_api: KubeApi, default_release: Release
) -> None:
    assert "STATUS: deployed" in default_release.install_output
    found = objects(
        kube_api,
        "deployment,serviceaccount,role,rolebinding,service,configmap,secret,"
        "validatingwebhookconfiguration",
        default_release.namespace,
        default_release.name,
    )
    assert found == {
        "service/us-updatestream-operator-webhook",
        "secret/us-updatestream-operator-webhook",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/"
        f"us-updatestream-operator-webhook-{default_release.namespace}",
        "deployment.apps/us-updatestream-operator",
        "serviceaccount/us-updatestream-operator",
        "serviceaccount/us-updatestream-operator-spark",
        "role.rbac.authorization.k8s.io/us-updatestream-operator",
        "role.rbac.authorization.k8s.io/us-updatestream-operator-spark",
        "rolebinding.rbac.authorization.k8s.io/us-updatestream-operator",
        "rolebinding.rbac.authorization.k8s.io/us-updatestream-operator-spark",
        "service/us-updatestream-operator-metrics",
        "configmap/us-updatestream-operator-spark",
        "configmap/us-updatestream-operator-dashboard",
    }
    deployment = json.loads(
        kube_api.kubectl(
            "get", "deployment/us-updatestream-operator", "-n", default_release.namespace,
            "-o", "json",
        ).stdout
    )  # fmt: skip
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert set(CRD_NAMES) <= existing_crds(kube_api)
    for name in CRD_NAMES:
        crd = json.loads(
            kube_api.kubectl("get", f"crd/{name}", "-o", "json", "--show-managed-fields").stdout
        )
        managers = {entry["manager"] for entry in crd["metadata"]["managedFields"]}
        assert "helm" in managers or name in default_release.crds_before, (
            f"{name} did not exist and helm did not create it"
        )
        source = yaml.safe_load((CHART / "crds" / f"{name}.yaml").read_text())
        assert crd["spec"]["versions"][0]["name"] == source["spec"]["versions"][0]["name"]
        assert crd["spec"]["names"]["kind"] == source["spec"]["names"]["kind"]


def test_the_operator_may_run_streams_in_its_namespace_only(
    kube_api: KubeApi, default_release: Release
) -> None:
    account = f"{default_release.namespace}:us-updatestream-operator"
    namespace = default_release.namespace
    allowed = [
        ("watch", "updatestreams.updatestream.io"),
        ("list", "keyspaces.updatestream.io"),
        ("patch", "updatestreams.updatestream.io/status"),
        ("update", "updatestreams.updatestream.io/finalizers"),
        ("create", "events"),
        ("create", "pods"),
        ("delete", "pods"),
        ("create", "services"),
        ("update", "configmaps"),
    ]
    denied = [("get", "secrets"), ("delete", "updatestreams.updatestream.io")]
    assert_grants(kube_api, account, namespace, allowed, denied)
    assert not can_i(kube_api, account, "create", "pods", "default")
    assert not can_i(kube_api, account, "list", "updatestreams.updatestream.io", None)


def test_spark_drivers_may_run_executors_and_nothing_more(
    kube_api: KubeApi, default_release: Release
) -> None:
    account = f"{default_release.namespace}:us-updatestream-operator-spark"
    allowed = [
        ("create", "pods"),
        ("delete", "pods"),
        ("watch", "pods"),
        ("create", "services"),
        ("delete", "services"),
        ("create", "configmaps"),
        ("patch", "configmaps"),
        ("get", "keyspaces.updatestream.io"),  # a job hopping in place reads its Keyspace
    ]
    denied = [
        ("get", "secrets"),
        ("create", "deployments.apps"),
        ("get", "updatestreams.updatestream.io"),
        ("list", "keyspaces.updatestream.io"),
        ("watch", "keyspaces.updatestream.io"),
        ("patch", "keyspaces.updatestream.io"),
        ("get", "keyspaces.updatestream.io/status"),
        ("create", "persistentvolumeclaims"),
        ("create", "roles.rbac.authorization.k8s.io"),
    ]
    assert_grants(kube_api, account, default_release.namespace, allowed, denied)


def pod_manifest(name: str, namespace: str, spec: dict[str, Any]) -> str:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
    return yaml.safe_dump({**pod, "spec": spec})


def test_the_api_servers_pod_security_admission_accepts_every_pod_of_the_chart(
    kube_api: KubeApi, default_release: Release
) -> None:
    namespace = default_release.namespace
    deployment = next(d for d in default_release.manifests if d["kind"] == "Deployment")
    specs = {"operator": deployment["spec"]["template"]["spec"]}
    config = next(
        d
        for d in default_release.manifests
        if d["kind"] == "ConfigMap" and "spark-defaults.conf" in d["data"]
    )
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    for role in ("driver", "executor"):
        spec = yaml.safe_load(config["data"][f"{role}-pod-template.yaml"])["spec"]
        spec["serviceAccountName"] = "us-updatestream-operator-spark"
        for container in spec["containers"]:
            container["image"] = image
        specs[role] = spec
    for name, spec in specs.items():
        manifest = pod_manifest(f"check-{name}", namespace, spec)
        result = kube_api.kubectl(
            "create", "--dry-run=server", "-f", "-", input=manifest, check=False
        )
        assert result.returncode == 0, f"{name}: {result.stderr}"
        assert "Warning" not in result.stderr, f"{name}: {result.stderr}"
    # the namespace does enforce `restricted`: an ordinary Pod is refused
    plain = {"containers": [{"name": "plain", "image": image}]}
    refused = kube_api.kubectl(
        "create", "--dry-run=server", "-f", "-", input=pod_manifest("plain", namespace, plain),
        check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "violates PodSecurity" in refused.stderr


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


def admission_review() -> dict[str, Any]:
    """What the API server sends the webhook for a Keyspace whose VSchema does not build."""
    keyspace = {
        "apiVersion": "updatestream.io/v1alpha1",
        "kind": "Keyspace",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {
            "shards": [
                {"name": "-", "mysql": {"host": "db"}, "credentialsSecret": {"name": "reader"}}
            ],
            "vschema": {"sharded": False, "vindexes": {"v": {"type": "md5hash"}}},
            "servingShards": ["-"],
        },
    }
    request = {
        "uid": "1",
        "kind": {"group": "updatestream.io", "version": "v1alpha1", "kind": "Keyspace"},
        "resource": {"group": "updatestream.io", "version": "v1alpha1", "resource": "keyspaces"},
        "operation": "CREATE",
        "userInfo": {"username": "test"},
        "object": keyspace,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def webhook_post(
    secret: dict[str, Any], manifests: list[dict[str, Any]], port: int, review: dict[str, Any]
) -> dict[str, Any]:
    """POST to the operator's webhook as the API server would: TLS verified with the CA bundle
    of the chart's ValidatingWebhookConfiguration, for the webhook Service's DNS name."""
    configuration = next(d for d in manifests if d["kind"] == "ValidatingWebhookConfiguration")
    webhook = next(
        w for w in configuration["webhooks"] if "keyspaces" in w["rules"][0]["resources"]
    )
    service = webhook["clientConfig"]["service"]
    assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(webhook["clientConfig"]["caBundle"]).decode()
    )
    host = f"{service['name']}.{service['namespace']}.svc"
    body = json.dumps(review).encode()
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with raw, context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(
            f"POST {service['path']} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        reply = b""
        while chunk := tls.recv(65536):
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    answer: dict[str, Any] = json.loads(payload)
    return answer


def test_an_upgrade_keeps_the_webhooks_certificate(
    kube_api: KubeApi, default_release: Release
) -> None:
    """The chart reads its generated CA and certificate back on upgrade: a new one would leave
    the API server trusting a CA the running operator's certificate no longer matches."""

    def tls() -> tuple[dict[str, str], list[str]]:
        secret = json.loads(
            kube_api.kubectl(
                "get", "secret", "us-updatestream-operator-webhook", "-n",
                default_release.namespace, "-o", "json",
            ).stdout
        )  # fmt: skip
        configuration = json.loads(
            kube_api.kubectl(
                "get", "validatingwebhookconfiguration",
                f"us-updatestream-operator-webhook-{default_release.namespace}", "-o", "json",
            ).stdout
        )  # fmt: skip
        return secret["data"], [w["clientConfig"]["caBundle"] for w in configuration["webhooks"]]

    before = tls()
    assert before[1] == [before[0]["ca.crt"]] * 2
    kube_api.helm(
        "upgrade", default_release.name, str(CHART), "--namespace", default_release.namespace,
        "--reuse-values",
    )  # fmt: skip
    assert tls() == before


def test_the_operator_starts_with_the_charts_arguments_and_identity(
    kube_api: KubeApi, default_release: Release, tmp_path: Path
) -> None:
    """The operator process started with the Deployment's exact arguments (the entrypoint
    runs `updatestream <args>`), as the chart's ServiceAccount: the endpoint the probes call
    answers, and so does the metrics endpoint. Addresses are moved to loopback and the ports
    to free ones; the Spark ConfigMap's files, which the Pod mounts, are written to a directory
    that stands for the mount."""
    deployment = next(d for d in default_release.manifests if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    free = {name: free_port() for name in ports}
    env_of = {e["name"]: e.get("value") for e in container["env"]}
    spark_conf = next(
        d
        for d in default_release.manifests
        if d["kind"] == "ConfigMap" and "spark-defaults.conf" in d.get("data", {})
    )
    mount = tmp_path / "spark-conf"
    mount.mkdir()
    for name, text in spark_conf["data"].items():
        (mount / name).write_text(text)
    webhook_tls = tmp_path / "webhook-tls"  # stands for the webhook Secret's mount
    webhook_tls.mkdir()
    secret = next(d for d in default_release.manifests if d["kind"] == "Secret")
    for key in ("tls.crt", "tls.key"):
        (webhook_tls / key).write_bytes(base64.b64decode(secret["data"][key]))
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    args = []
    for arg in container["args"]:
        arg = arg.replace("0.0.0.0", "127.0.0.1").replace(env_of["SPARK_CONF_DIR"], str(mount))
        arg = arg.replace(mounts["webhook-tls"], str(webhook_tls))
        for name, port in ports.items():
            arg = arg.replace(f":{port}/", f":{free[name]}/").replace(f"={port}", f"={free[name]}")
        args.append(arg)
    template = next(a for a in args if a.startswith("--driver-pod-template="))
    assert Path(template.split("=", 1)[1]).parent == mount  # the operator checks it at start
    probe = container["livenessProbe"]["httpGet"]
    assert container["readinessProbe"]["httpGet"] == probe
    probed = f"http://127.0.0.1:{free[probe['port']]}{probe['path']}"
    metrics = free["metrics"]
    assert args[0] == "operator"
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = kube_api.token_kubeconfig(
        default_release.namespace, account, tmp_path / "operator.kubeconfig"
    )
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(kubeconfig),
    }
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["updatestream", *args, "--metrics-address=127.0.0.1", "--webhook-address=127.0.0.1"],
            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        status = 0
        while time.monotonic() < deadline and process.poll() is None:
            status, health = http_get(probed)
            if status == 200:
                break
            time.sleep(0.5)
        output = log.read_text(errors="replace")
        assert status == 200, f"{probed} did not answer (exit {process.poll()}):\n{output[-3000:]}"
        # ready means the webhook listens: the probe checks it, so admission works at once
        assert json.loads(health)["webhook"] == "listening", health
        code, body = http_get(f"http://127.0.0.1:{metrics}/metrics")
        assert code == 200 and "updatestream_reconcile_errors_total" in body
        review = admission_review()
        answer = webhook_post(secret, default_release.manifests, free["webhook"], review)
        assert answer["response"]["allowed"] is False
        assert "unknown vindex type 'md5hash'" in answer["response"]["status"]["message"]
        # the chart's RBAC lets it start without a refused request or a permission fallback
        assert " 403" not in output and "Not enough permissions" not in output, output[-3000:]
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_uninstall_removes_the_release_and_keeps_the_crds(
    kube_api: KubeApi, default_release: Release
) -> None:
    assert "uninstalled" in uninstall(kube_api, default_release)
    left = objects(
        kube_api,
        "deployment,serviceaccount,role,rolebinding,service,configmap",
        default_release.namespace,
        default_release.name,
    )
    assert left == set()
    assert set(CRD_NAMES) <= existing_crds(kube_api), "Helm never deletes CRDs"


# -- server-side dry run -----------------------------------------------------------------------


def test_default_manifests_pass_a_server_side_dry_run(kube_api: KubeApi, helm: Helm) -> None:
    apply_crds(kube_api, REPO_ROOT / "crds")
    kube_api.create_namespace("chart-dry-run")
    docs = helm.template(release="dry", namespace="chart-dry-run")
    result = kube_api.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs)
    )
    assert result.stdout.count("(server dry run)") == len(docs), result.stdout


def test_full_manifests_pass_a_server_side_dry_run(kube_api: KubeApi, helm: Helm) -> None:
    apply_crds(kube_api, REPO_ROOT / "crds")
    apply_crds(kube_api, MONITORING_CRDS)
    for namespace in ("chart-dry-run-full", "streams-a", "streams-b", "monitoring"):
        kube_api.create_namespace(namespace)
    docs = helm.template(
        "--values", str(FULL_VALUES), release="dry-full", namespace="chart-dry-run-full"
    )
    kinds = {d["kind"] for d in docs}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ClusterRole"} <= kinds
    result = kube_api.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs)
    )
    assert result.stdout.count("(server dry run)") == len(docs), result.stdout


def test_the_dry_run_rejects_an_invalid_manifest(kube_api: KubeApi, helm: Helm) -> None:
    """The dry run validates: a Deployment with a bad field is refused by the server."""
    kube_api.create_namespace("chart-dry-run")
    docs = helm.template(release="dry", namespace="chart-dry-run")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["spec"]["strategy"] = {"type": "Sometimes"}
    result = kube_api.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(deployment), check=False
    )
    assert result.returncode != 0
    assert "strategy" in result.stderr


# -- helm install: full values, cluster-wide ---------------------------------------------------


def test_a_cluster_wide_install_with_every_option_and_its_uninstall(kube_api: KubeApi) -> None:
    apply_crds(kube_api, MONITORING_CRDS)
    for namespace in ("chart-full", "streams-a", "streams-b", "monitoring"):
        kube_api.create_namespace(namespace)
    release = Release("full", "chart-full", [], "")
    try:
        release = install(kube_api, "full", "chart-full", str(FULL_VALUES))
        assert "STATUS: deployed" in release.install_output
        cluster = kube_api.kubectl(
            "get", "clusterrole,clusterrolebinding", "-l", "app.kubernetes.io/instance=full",
            "-o", "name",
        ).stdout.split()  # fmt: skip
        assert set(cluster) == {
            "clusterrole.rbac.authorization.k8s.io/full-updatestream-operator",
            "clusterrolebinding.rbac.authorization.k8s.io/full-updatestream-operator",
        }
        monitoring = objects(
            kube_api, "servicemonitor,podmonitor,prometheusrule", "chart-full", "full"
        )
        assert {name.split("/")[0].split(".")[0] for name in monitoring} == {
            "servicemonitor",
            "podmonitor",
            "prometheusrule",
        }
        assert objects(kube_api, "configmap", "monitoring", "full") == {
            "configmap/full-updatestream-operator-dashboard"
        }
        operator = "chart-full:full-updatestream-operator"
        assert can_i(kube_api, operator, "list", "updatestreams.updatestream.io", None)
        assert can_i(kube_api, operator, "create", "pods", "streams-b")
        assert not can_i(
            kube_api, operator, "create", "sparkapplications.sparkoperator.k8s.io", None
        )
        spark = "streams-a:updatestream-spark"
        assert can_i(kube_api, spark, "create", "pods", "streams-a")
        assert can_i(kube_api, spark, "create", "persistentvolumeclaims", "streams-a")
        assert not can_i(kube_api, spark, "create", "pods", "streams-b")
    finally:
        ensure_uninstalled(kube_api, release)
    assert not kube_api.kubectl(
        "get", "clusterrole,clusterrolebinding", "-l", "app.kubernetes.io/instance=full",
        "-o", "name",
    ).stdout.strip()  # fmt: skip
    for namespace in ("chart-full", "streams-a", "streams-b", "monitoring"):
        assert (
            objects(kube_api, "all,serviceaccount,role,rolebinding,configmap", namespace, "full")
            == set()
        )
