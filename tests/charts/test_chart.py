"""The Helm chart rendered by the real helm: lint, CRD drift, Pod security, RBAC, labels, docs.

Template-only: tests/charts/test_chart_install.py applies and installs the chart into the
test API server.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts.conftest import CHART, FULL_VALUES, REPO_ROOT, Helm
from tests.charts.podsecurity import pod_specs, restricted_violations

VALUES_TABLE_SCRIPT = REPO_ROOT / "scripts" / "chart-values-table.py"
RECOMMENDED_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/component",
)


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests if doc["kind"] == kind]


def placed(manifests: list[dict[str, Any]], kind: str) -> set[tuple[str, str]]:
    """(name, namespace) of each object of `kind`."""
    names = (doc["metadata"] for doc in by_kind(manifests, kind))
    return {(meta["name"], meta["namespace"]) for meta in names}


def one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(manifests, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def metrics_service(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    (service,) = [
        s for s in by_kind(manifests, "Service") if s["metadata"]["name"].endswith("-metrics")
    ]
    return service


def operator_container(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return dict(containers[0])


# -- CRDs, lint ------------------------------------------------------------------------------


def test_the_charts_crds_are_identical_to_the_top_level_crds() -> None:
    source = {p.name: p.read_bytes() for p in sorted((REPO_ROOT / "crds").glob("*.yaml"))}
    copied = {p.name: p.read_bytes() for p in sorted((CHART / "crds").glob("*.yaml"))}
    assert source, "no CRDs in crds/"
    assert copied.keys() == source.keys(), "run `make sync-crds`"
    drifted = [name for name in source if copied[name] != source[name]]
    assert not drifted, f"{drifted} differ from crds/: run `make sync-crds`"


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_helm_lint_is_clean(helm: Helm, values: Path | None) -> None:
    args = ["lint", "--strict", str(CHART)] + (["--values", str(values)] if values else [])
    result = helm.run(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_include_crds_renders_both_crds(helm: Helm) -> None:
    docs = helm.template("--include-crds")
    names = {d["metadata"]["name"] for d in by_kind(docs, "CustomResourceDefinition")}
    assert names == {"keyspaces.updatestream.io", "updatestreams.updatestream.io"}


# -- Pod security --------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["default", "full"])
def test_every_pod_the_chart_defines_is_restricted(which: str, request: Any) -> None:
    manifests = request.getfixturevalue(f"{which}_manifests")
    pods = dict(pod_specs(manifests))
    assert len(pods) == 3, f"operator Deployment and two Spark pod templates, got {list(pods)}"
    problems = {where: restricted_violations(spec) for where, spec in pods.items()}
    assert all(not found for found in problems.values()), problems


def _deployment_spec(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    return copy.deepcopy(one(manifests, "Deployment")["spec"]["template"]["spec"])


MUTATIONS = {
    "root user": (lambda s: s["containers"][0]["securityContext"].update(runAsUser=0), "runAsUser"),
    "escalation": (
        lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        "allowPrivilegeEscalation",
    ),
    "capabilities": (
        lambda s: s["containers"][0]["securityContext"].update(capabilities={"add": ["SYS_ADMIN"]}),
        "capabilities",
    ),
    "seccomp": (
        lambda s: (
            s["securityContext"].pop("seccompProfile"),
            s["containers"][0]["securityContext"].pop("seccompProfile"),
        ),
        "seccomp",
    ),
    "writable root": (
        lambda s: s["containers"][0]["securityContext"].update(readOnlyRootFilesystem=False),
        "read-only root",
    ),
    "host path": (
        lambda s: s["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
        "forbidden type",
    ),
    "host network": (lambda s: s.update(hostNetwork=True), "hostNetwork"),
    "no scratch": (lambda s: s["containers"][0].pop("volumeMounts"), "/tmp"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_restricted_check_catches_each_kind_of_violation(
    default_manifests: list[dict[str, Any]], mutation: str
) -> None:
    spec = _deployment_spec(default_manifests)
    assert restricted_violations(spec) == []
    change, expected = MUTATIONS[mutation]
    change(spec)
    problems = restricted_violations(spec)
    assert any(expected in problem for problem in problems), problems


# -- the operator Deployment --------------------------------------------------------------


def test_operator_runs_once_with_probes_on_the_health_port_and_a_metrics_port(
    default_manifests: list[dict[str, Any]],
) -> None:
    deployment = one(default_manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = operator_container(default_manifests)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090, "webhook": 9443}
    for probe in ("livenessProbe", "readinessProbe"):  # kopf's own health endpoint
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["args"][0] == "operator"
    assert "--namespace=updatestream" in container["args"]
    assert "--metrics-port=9090" in container["args"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    assert container["image"] == "ghcr.io/updatestream/updatestream:0.1.0"  # appVersion
    service = metrics_service(default_manifests)
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_the_health_port_moves_kopfs_endpoint_and_without_kopf_liveness_probes_use_metrics(
    helm: Helm,
) -> None:
    container = operator_container(helm.template("--set", "operator.healthPort=8081"))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8081, "metrics": 9090, "webhook": 9443}
    assert "--liveness=http://0.0.0.0:8081/healthz" in container["args"]
    container = operator_container(helm.template("--set", "operator.kopfLiveness=false"))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9090, "webhook": 9443}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert not any(a.startswith("--liveness") for a in container["args"])


def test_full_values_reach_the_operator_pod(full_manifests: list[dict[str, Any]]) -> None:
    deployment = one(full_manifests, "Deployment")
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    container = operator_container(full_manifests)
    assert container["image"].startswith("registry.example.com/platform/updatestream@sha256:")
    assert container["imagePullPolicy"] == "Always"
    assert {"--verbose", "--interval=5", "--service-account=updatestream-spark"} <= set(
        container["args"]
    )
    assert f"--image={container['image']}" in container["args"]
    assert not any(a.startswith("--namespace") for a in container["args"]), "cluster-wide"
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"][0]["key"] == "dedicated"
    assert "nodeAffinity" in spec["affinity"]
    assert pod["metadata"]["annotations"]["example.com/owner"] == "data-platform"
    assert pod["metadata"]["labels"]["example.com/tier"] == "control"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["UPDATESTREAM_EXAMPLE"] == "1"


@pytest.mark.parametrize("which", ["default", "full"])
def test_the_operator_command_accepts_every_argument_the_chart_passes(
    which: str, request: Any
) -> None:
    """The container's arguments parsed by the real `updatestream operator` command."""
    from updatestream_operator.cli import operator_command

    args = operator_container(request.getfixturevalue(f"{which}_manifests"))["args"]
    assert args[0] == "operator"
    context = operator_command.make_context("operator", list(args[1:]))
    assert context.params["metrics_port"] == 9090
    assert context.params["launcher"] == "spark-submit"
    assert context.params["liveness"] == "http://0.0.0.0:8080/healthz"
    assert context.params["namespace"] == (None if which == "full" else "updatestream")
    cluster = ("https://10.77.0.1:6443", "500m", "updatestream-checkpoints")
    assert (
        context.params["driver_master"],
        context.params["spark_core_request"],
        context.params["checkpoint_claim"],
    ) == (cluster if which == "full" else (None, None, None))


def test_the_spark_config_is_mounted_where_spark_submit_reads_it(
    full_manifests: list[dict[str, Any]],
) -> None:
    container = operator_container(full_manifests)
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["spark-config"] == env["SPARK_CONF_DIR"]
    config = next(
        d for d in by_kind(full_manifests, "ConfigMap") if "spark-defaults.conf" in d["data"]
    )
    defaults = dict(
        line.split(" ", 1) for line in config["data"]["spark-defaults.conf"].splitlines()
    )
    assert defaults["spark.kubernetes.authenticate.driver.serviceAccountName"] == (
        "updatestream-spark"
    )
    assert defaults["spark.kubernetes.container.image"] == container["image"]
    assert defaults["spark.kubernetes.container.image.pullSecrets"] == "registry-credentials"
    assert defaults["spark.executor.instances"] == "2"
    for role in ("driver", "executor"):
        path = Path(defaults[f"spark.kubernetes.{role}.podTemplateFile"])
        assert str(path.parent) == env["SPARK_CONF_DIR"] and path.name in config["data"]
        template = yaml.safe_load(config["data"][path.name])
        name = defaults[f"spark.kubernetes.{role}.podTemplateContainerName"]
        assert [c["name"] for c in template["spec"]["containers"]] == [name]


# -- RBAC ----------------------------------------------------------------------------------


def rules_of(doc: dict[str, Any]) -> dict[str, set[str]]:
    """resource (group/resource) -> verbs."""
    found: dict[str, set[str]] = {}
    for rule in doc["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                found.setdefault(f"{group}/{resource}".lstrip("/"), set()).update(rule["verbs"])
    return found


def test_default_rbac_is_namespaced_to_the_release_namespace(
    default_manifests: list[dict[str, Any]],
) -> None:
    assert not by_kind(default_manifests, "ClusterRole")
    assert not by_kind(default_manifests, "ClusterRoleBinding")
    assert placed(default_manifests, "Role") == {
        ("us-updatestream-operator", "updatestream"),
        ("us-updatestream-operator-spark", "updatestream"),
    }
    operator = next(
        r for r in by_kind(default_manifests, "Role") if not r["metadata"]["name"].endswith("spark")
    )
    rules = rules_of(operator)
    assert {"watch", "patch"} <= rules["updatestream.io/updatestreams"]
    assert "patch" in rules["updatestream.io/updatestreams/status"]
    assert "create" in rules["events"]
    assert {"create", "delete"} <= rules["pods"]
    # spark-submit (Spark 4) applies the driver's Service and NetworkPolicy server-side
    assert {"create", "patch", "delete"} <= rules["services"]
    assert {"create", "patch", "delete"} <= rules["networking.k8s.io/networkpolicies"]
    assert "secrets" not in rules, "the operator never reads Secrets: jobs mount them"


def test_spark_drivers_get_exactly_pods_services_configmaps_and_their_keyspace(
    default_manifests: list[dict[str, Any]], full_manifests: list[dict[str, Any]], helm: Helm
) -> None:
    keyspaces = "updatestream.io/keyspaces"
    no_in_job_hops = helm.template("--set", "operator.inJobHops=false")
    for manifests, extra in (
        (default_manifests, {keyspaces}),
        (full_manifests, {keyspaces, "persistentvolumeclaims"}),
        (no_in_job_hops, set()),
    ):
        spark_roles = [
            r for r in by_kind(manifests, "Role") if r["metadata"]["name"].endswith("spark")
        ]
        assert spark_roles
        for role in spark_roles:
            rules = rules_of(role)
            assert set(rules) == {"pods", "services", "configmaps"} | extra
            assert all("*" not in verbs for verbs in rules.values())
            assert {"create", "delete"} <= rules["pods"] & rules["services"] & rules["configmaps"]
            if keyspaces in extra:
                # a job hopping in place reads its own Keyspace by name; nothing more
                assert rules[keyspaces] == {"get"}


def test_in_job_hops_are_on_by_default_with_their_timeout(
    default_manifests: list[dict[str, Any]], full_manifests: list[dict[str, Any]], helm: Helm
) -> None:
    assert "--in-job-hop-timeout=120" in operator_container(default_manifests)["args"]
    assert "--in-job-hop-timeout=90" in operator_container(full_manifests)["args"]
    args = operator_container(helm.template("--set", "operator.inJobHops=false"))["args"]
    assert "--no-in-job-hops" in args
    assert not [a for a in args if a.startswith("--in-job-hop-timeout")]


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (
            "operator.launcher=spark-operator",
            "operator.launcher: the spark-operator launcher was removed",
        ),
        ("rbac.sparkApplications=true", "rbac.sparkApplications was removed"),
    ],
)
def test_values_of_the_removed_spark_operator_launcher_are_refused(
    values: str, says: str, helm: Helm
) -> None:
    result = helm.run("template", "us", str(CHART), "--set", values, check=False)
    assert result.returncode != 0
    assert says in result.stderr
    assert "spark-submit" in result.stderr


def test_cluster_wide_rbac_and_spark_accounts_in_every_job_namespace(
    full_manifests: list[dict[str, Any]],
) -> None:
    role = one(full_manifests, "ClusterRole")
    binding = one(full_manifests, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "us-updatestream-operator", "namespace": "updatestream"}
    ]
    rules = rules_of(role)
    assert {"list", "watch"} <= rules["apiextensions.k8s.io/customresourcedefinitions"]
    assert not [key for key in rules if key.startswith("sparkoperator.k8s.io/")]
    assert rules["secrets"] == {"get"}, "rbac.extraRules are added"
    assert not [r for r in by_kind(full_manifests, "Role") if "spark" not in r["metadata"]["name"]]
    assert placed(full_manifests, "ServiceAccount") == {
        ("us-updatestream-operator", "updatestream"),
        ("updatestream-spark", "streams-a"),
        ("updatestream-spark", "streams-b"),
    }
    bindings = [b for b in by_kind(full_manifests, "RoleBinding")]
    assert {(b["metadata"]["namespace"], b["subjects"][0]["namespace"]) for b in bindings} == {
        ("streams-a", "streams-a"),
        ("streams-b", "streams-b"),
    }


def test_a_watched_namespace_and_job_namespaces_each_get_the_operators_role(helm: Helm) -> None:
    docs = helm.template(
        "--set", "operator.watchNamespace=shop", "--set", "spark.jobNamespaces={shop,jobs}"
    )
    operator_roles = {
        r["metadata"]["namespace"]
        for r in by_kind(docs, "Role")
        if not r["metadata"]["name"].endswith("spark")
    }
    assert operator_roles == {"shop", "jobs"}
    assert "--namespace=shop" in operator_container(docs)["args"]


def test_rbac_and_accounts_can_be_left_to_the_user(helm: Helm) -> None:
    docs = helm.template(
        "--set", "rbac.create=false",
        "--set", "spark.rbac.create=false",
        "--set", "operator.serviceAccount.create=false",
        "--set", "operator.serviceAccount.name=existing",
        "--set", "spark.serviceAccount.create=false",
    )  # fmt: skip
    kinds = {d["kind"] for d in docs}
    assert not kinds & {
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceAccount",
    }
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


# -- labels, monitoring --------------------------------------------------------------------


@pytest.mark.parametrize("which", ["default", "full"])
def test_every_resource_has_the_recommended_labels(which: str, request: Any) -> None:
    for doc in request.getfixturevalue(f"{which}_manifests"):
        labels = doc["metadata"].get("labels") or {}
        missing = [k for k in RECOMMENDED_LABELS if k not in labels]
        assert not missing, f"{doc['kind']}/{doc['metadata']['name']} lacks {missing}"
        assert labels["app.kubernetes.io/instance"] == "us"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_monitoring_objects_are_optional_and_select_the_operator(
    default_manifests: list[dict[str, Any]], full_manifests: list[dict[str, Any]]
) -> None:
    assert not {d["kind"] for d in default_manifests} & {
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
    }
    monitor = one(full_manifests, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selected = [
        s
        for s in by_kind(full_manifests, "Service")
        if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert selected == [metrics_service(full_manifests)]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    monitors = {m["metadata"]["name"]: m for m in by_kind(full_manifests, "PodMonitor")}
    assert set(monitors) == {"us-updatestream-operator"}
    pod_labels = one(full_manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    selector = monitors["us-updatestream-operator"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()


def test_the_job_pod_monitor_selects_driver_pods_in_the_job_namespaces(helm: Helm) -> None:
    docs = helm.template(
        "--values", str(FULL_VALUES), "--set", "metrics.jobPodMonitor.enabled=true"
    )
    monitor = next(
        m for m in by_kind(docs, "PodMonitor") if m["metadata"]["name"].endswith("-jobs")
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["streams-a", "streams-b"]}
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/managed-by": "updatestream-operator",
        "updatestream.io/role": "driver",
    }


def test_the_dashboard_configmap_carries_the_dashboard_for_the_grafana_sidecar(
    full_manifests: list[dict[str, Any]],
) -> None:
    config = next(
        d for d in by_kind(full_manifests, "ConfigMap") if "updatestream.json" in d.get("data", {})
    )
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config["metadata"]["namespace"] == "monitoring"
    assert config["metadata"]["annotations"] == {"grafana_folder": "UpdateStream"}
    shipped = json.loads(config["data"]["updatestream.json"])
    assert shipped == json.loads((CHART / "dashboards" / "updatestream.json").read_text())


def test_the_prometheus_rule_renders_the_alert_file_with_the_values_settings(
    full_manifests: list[dict[str, Any]], tmp_path: Path
) -> None:
    rule = one(full_manifests, "PrometheusRule")
    source = yaml.safe_load((CHART / "alerts" / "updatestream-rules.yaml").read_text())
    rendered = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    expected = {r["alert"] for g in source["groups"] for r in g["rules"]}
    assert set(rendered) == expected - {"UpdateStreamReconcileErrors"}, (
        "disabled alerts are left out"
    )
    assert rendered["UpdateStreamLagHigh"]["expr"] == "updatestream_lag_seconds > 120"
    assert rendered["UpdateStreamLagHigh"]["for"] == "5m"
    assert rendered["UpdateStreamHopSlow"]["expr"].endswith("[1h]) > 600")
    assert rendered["UpdateStreamHopSlow"]["labels"] == {
        "severity": "critical",
        "team": "data-platform",
    }
    assert rendered["UpdateStreamDegraded"]["labels"]["severity"] == "critical"
    # What the PrometheusRule holds is a valid rule file for Prometheus itself.
    rules_file = tmp_path / "rendered-rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run(
        ["promtool", "check", "rules", str(rules_file)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(rendered)} rules found" in check.stdout


def test_an_alert_without_settings_fails_the_render_saying_which_value(helm: Helm) -> None:
    result = helm.run(
        "template", "us", str(CHART),
        "--set", "prometheusRule.enabled=true",
        "--set", "prometheusRule.alerts.lagHigh=null",
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "prometheusRule.alerts.lagHigh" in result.stderr


# -- values documentation --------------------------------------------------------------------


def run_values_table(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(VALUES_TABLE_SCRIPT), *args], capture_output=True, text=True
    )


def test_the_readme_values_table_is_current() -> None:
    result = run_values_table("--check", str(CHART))
    assert result.returncode == 0, result.stderr
    readme = (CHART / "README.md").read_text()
    assert "| `rbac.clusterWide` | bool | `false` |" in readme


def test_every_value_is_documented_and_an_undocumented_one_is_refused(tmp_path: Path) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["rbac"]["clusterWide"] is False
    chart = tmp_path / "chart"
    chart.mkdir()
    text = (CHART / "values.yaml").read_text()
    (chart / "values.yaml").write_text(text.replace("rbac:\n", "rbac:\n  surprise: 1\n", 1))
    result = run_values_table(str(chart))
    assert result.returncode == 2
    assert "rbac.surprise" in result.stderr


def test_a_stale_readme_table_is_detected(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "values.yaml").write_text((CHART / "values.yaml").read_text())
    (chart / "README.md").write_text((CHART / "README.md").read_text())
    assert run_values_table("--write", str(chart)).returncode == 0
    readme = (chart / "README.md").read_text()
    assert "| `rbac.create` |" in readme
    (chart / "README.md").write_text(readme.replace("| `rbac.create` |", "| `rbac.created` |"))
    assert run_values_table("--check", str(chart)).returncode == 1
    assert run_values_table("--write", str(chart)).returncode == 0
    assert (chart / "README.md").read_text() == readme


# -- the driver Pods spark-submit builds from the operator's template ------------------------


def _spark_template(manifests: list[dict[str, Any]], role: str) -> dict[str, Any]:
    config = next(d for d in by_kind(manifests, "ConfigMap") if "spark-defaults.conf" in d["data"])
    return dict(yaml.safe_load(config["data"][f"{role}-pod-template.yaml"]))


def test_driver_pods_keep_the_charts_scheduling_and_stay_restricted(
    full_manifests: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The operator's driver template, built on the chart's, as spark-submit gets it."""
    from kubernetes import client
    from updatestream_operator.config import ClusterSettings
    from updatestream_operator.launchers.cluster_launcher import DRIVER_CONTAINER, SCRATCH_MOUNT
    from updatestream_operator.launchers.spark_submit import SparkSubmitLauncher
    from updatestream_operator.storage import KubeStore

    from tests.operator.test_local_launcher import job_spec

    args = operator_container(full_manifests)["args"]
    flag = next(a for a in args if a.startswith("--driver-pod-template="))
    base = _spark_template(full_manifests, "driver")
    path = tmp_path / Path(flag.split("=", 1)[1]).name
    path.write_text(yaml.safe_dump(base))
    settings = ClusterSettings(driver_pod_template=path)
    store = KubeStore(client.ApiClient())  # building a template never calls the API
    launcher = SparkSubmitLauncher(store, settings, master="k8s://https://api.invalid")
    job = job_spec()
    pod = launcher.pod_template(job)
    spec = pod["spec"]

    values = yaml.safe_load(FULL_VALUES.read_text())["spark"]["podTemplates"]
    assert spec["nodeSelector"] == values["nodeSelector"]
    assert spec["tolerations"] == values["tolerations"]
    assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    annotations = pod["metadata"]["annotations"]
    assert annotations["example.com/owner"] == "data-platform"
    assert annotations["updatestream.io/launch-id"] == "1"  # the operator's kept too
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "spark-driver"
    assert pod["metadata"]["labels"]["updatestream.io/role"] == "driver"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == job.stream.uid
    names = [c["name"] for c in spec["containers"]]
    assert names == [DRIVER_CONTAINER, "progress-publisher"]
    driver = spec["containers"][0]
    paths = [m["mountPath"] for m in driver["volumeMounts"]]
    assert len(paths) == len(set(paths)), f"a path mounted twice: {paths}"
    assert SCRATCH_MOUNT in paths and "/var/lib/updatestream" in paths
    volumes = [v["name"] for v in spec["volumes"]]
    assert len(volumes) == len(set(volumes))
    for container in spec["containers"]:
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, f"{container['name']} mounts a missing volume"
    assert restricted_violations(spec) == []
    # without a base, the operator's template alone (what ran before the chart passed one)
    alone = SparkSubmitLauncher(store, ClusterSettings(), master="k8s://x").pod_template(job)
    assert "nodeSelector" not in alone["spec"]


def test_a_bad_driver_pod_template_stops_the_operator_with_the_files_name(
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner
    from updatestream_operator.cli import operator_command

    cases = {
        "missing.yaml": None,
        "not-yaml.yaml": "spec: [unclosed\n",
        "deployment.yaml": "kind: Deployment\nspec: {}\n",
        "containers.yaml": "kind: Pod\nspec:\n  containers: {name: x}\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        result = CliRunner().invoke(
            operator_command, ["--metrics-port=0", f"--driver-pod-template={path}"]
        )
        assert result.exit_code == 2, (name, result.output)
        assert "--driver-pod-template" in result.output and name in result.output, result.output


# -- admission webhook -----------------------------------------------------------------------


def test_the_webhook_is_registered_for_the_operators_handlers_with_its_own_certificate(
    default_manifests: list[dict[str, Any]],
) -> None:
    from cryptography import x509
    from updatestream_operator.admission import KEYSPACE_WEBHOOK, STREAM_WEBHOOK

    configuration = one(default_manifests, "ValidatingWebhookConfiguration")
    secret = one(default_manifests, "Secret")
    (service,) = [
        s
        for s in by_kind(default_manifests, "Service")
        if s["metadata"]["name"].endswith("-webhook")
    ]
    hooks = {w["rules"][0]["resources"][0]: w for w in configuration["webhooks"]}
    assert {p: w["clientConfig"]["service"]["path"] for p, w in hooks.items()} == {
        "keyspaces": f"/{KEYSPACE_WEBHOOK}",
        "updatestreams": f"/{STREAM_WEBHOOK}",
    }
    for webhook in hooks.values():
        assert webhook["failurePolicy"] == "Ignore" and webhook["sideEffects"] == "None"
        assert webhook["rules"][0]["operations"] == ["CREATE", "UPDATE"]  # not status, not DELETE
        assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
        assert webhook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
        assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == ["updatestream"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert host in names.get_values_for_type(x509.DNSName)
    container = operator_container(default_manifests)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert f"--webhook-cert-dir={mounts['webhook-tls']}" in container["args"]
    assert "--webhook-port=9443" in container["args"]
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"


def test_the_webhook_can_be_turned_off_or_made_strict(helm: Helm) -> None:
    off = helm.template("--set", "webhook.enabled=false")
    assert not {d["kind"] for d in off} & {"ValidatingWebhookConfiguration", "Secret"}
    assert not any(a.startswith("--webhook") for a in operator_container(off)["args"])
    strict = helm.template("--set", "webhook.failurePolicy=Fail", "--set", "rbac.clusterWide=true")
    webhooks = one(strict, "ValidatingWebhookConfiguration")["webhooks"]
    assert {w["failurePolicy"] for w in webhooks} == {"Fail"}
    assert all("namespaceSelector" not in w for w in webhooks)  # every namespace is served
    given = helm.template(
        "--set", "webhook.certificate.secretName=from-cert-manager",
        "--set", "webhook.certificate.caBundle=Q0EK",
    )  # fmt: skip
    assert "Secret" not in {d["kind"] for d in given}
    volumes = one(given, "Deployment")["spec"]["template"]["spec"]["volumes"]
    (tls,) = [v for v in volumes if v["name"] == "webhook-tls"]
    assert tls["secret"]["secretName"] == "from-cert-manager"
    refused = helm.run(
        "template", str(CHART), "--set", "webhook.certificate.secretName=x", check=False
    )
    assert refused.returncode != 0 and "needs webhook.certificate.caBundle" in refused.stderr
