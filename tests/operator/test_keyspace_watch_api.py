"""A running job follows its Keyspace custom resource through the Kubernetes API: the watch the
spark-submit launcher gives the driver (`kubernetes:<namespace>/<name>`), against a real API
server."""

from __future__ import annotations

import json

import pytest
from updatestream_jobs.source.keyspace_watch import KubernetesKeyspaceWatch, open_watch

from harness.kube import KubeApi
from harness.operator import apply, apply_crds, keyspace_manifest
from updatestream.spec import parse_keyspace

NAMESPACE = "watch-test"


def test_the_watch_reads_the_custom_resource_and_follows_a_serving_map_change(
    kube_api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply_crds(kube_api)
    kube_api.create_namespace(NAMESPACE)
    manifest = keyspace_manifest("followed")
    apply(kube_api, NAMESPACE, manifest)
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # The watch starts from another serving map than the custom resource's, so a read that
    # failed (and kept the initial Keyspace) cannot pass for one that worked.
    initial = parse_keyspace({**manifest, "spec": {**manifest["spec"], "servingShards": ["-"]}})
    watch = open_watch(f"kubernetes:{NAMESPACE}/followed", initial, "unused")
    assert isinstance(watch, KubernetesKeyspaceWatch)
    assert watch.current().spec.serving_shards == ["-80", "80-"]

    patch = {"spec": {"servingShards": ["-40", "40-80", "80-"]}}
    kube_api.kubectl(
        "patch", "-n", NAMESPACE, "keyspace", "followed", "--type=merge", "-p", json.dumps(patch)
    )
    watch._last_read = float("-inf")  # do not wait for the poll interval
    assert watch.current().spec.serving_shards == ["-40", "40-80", "80-"]

    kube_api.kubectl("delete", "-n", NAMESPACE, "keyspace", "followed")
    watch._last_read = float("-inf")
    assert watch.current().spec.serving_shards == ["-40", "40-80", "80-"]  # kept
