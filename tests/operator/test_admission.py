"""Admission against a real API server: the chart's ValidatingWebhookConfiguration pointed at
the operator's webhook on 127.0.0.1, and a corpus of objects (admission_corpus.yaml).

First with the operator stopped: the webhook is registered with the chart's failurePolicy
(Ignore), so only the CRDs' own rules refuse, and exactly the entries without `cel: admitted`
are refused (docs/operator.md lists them). Then with one operator process serving the webhook:
every invalid object is refused, naming its field and what to write instead, and every valid
one is admitted. Objects are sent with dryRun=All (admission runs in full, nothing is stored)
and fieldValidation=Strict, as `kubectl apply` sends them.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from updatestream_operator import config

from harness.kube import KubeApi, free_port
from harness.operator import (
    REPO_ROOT,
    apply,
    apply_crds,
    get,
    install_operator_identity,
    wait_for,
)

NS = "us-admit"
CORPUS = yaml.safe_load((Path(__file__).parent / "admission_corpus.yaml").read_text())
CHART = REPO_ROOT / "charts" / "updatestream-operator"
PLURALS = {"Keyspace": "keyspaces", "UpdateStream": "updatestreams"}
# The Keyspaces the corpus' UpdateStreams name, stored (from these entries) before it runs.
COMMERCE, LOOKUP = ("commerce", "ks-base"), ("lookup", "ks-unsharded")
BROKEN = "ks-vindex-type-unknown"


def _entry(entry_id: str) -> dict[str, Any]:
    for entry in CORPUS["valid"] + CORPUS["invalid"]:
        if entry["id"] == entry_id:
            return dict(entry)
    raise KeyError(entry_id)


def _walk(node: Any, parts: list[str]) -> Any:
    for part in parts:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    return node


def build(entry: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """The corpus entry's object: its kind's base with `set` and `unset` applied."""
    obj = copy.deepcopy(CORPUS["bases"][entry["kind"]])
    obj["metadata"] = {"name": name or entry["id"], "namespace": NS}
    for path, value in (entry.get("set") or {}).items():
        *parents, last = path.split(".")
        parent = _walk(obj, parents)
        if isinstance(parent, list):
            parent[int(last)] = value
        else:
            parent[last] = value
    for path in entry.get("unset") or []:
        *parents, last = path.split(".")
        del _walk(obj, parents)[last]
    return obj


@dataclass
class Answer:
    code: int
    message: str

    @property
    def admitted(self) -> bool:
        return self.code in (200, 201)


def submit(api: KubeApi, obj: dict[str, Any], dry_run: bool = True) -> Answer:
    """POST `obj` as `kubectl apply` would create it; the API server's code and message."""
    plural = PLURALS[obj["kind"]]
    query = "fieldValidation=Strict" + ("&dryRun=All" if dry_run else "")
    url = f"{api.server}/apis/updatestream.io/v1alpha1/namespaces/{NS}/{plural}?{query}"
    context = ssl.create_default_context(cafile=str(api.pki.ca_cert))
    context.load_cert_chain(str(api.pki.admin_cert), str(api.pki.admin_key))
    request = urllib.request.Request(
        url,
        data=json.dumps(obj).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return Answer(response.status, "")
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read() or b"{}")
        return Answer(exc.code, str(body.get("message", body)))


def _webhook_configuration(api: KubeApi, port: int) -> dict[str, Any]:
    """The chart's ValidatingWebhookConfiguration, its Service reference turned into a URL."""
    rendered = api.helm(
        "template",
        "updatestream",
        str(CHART),
        f"--namespace={NS}",
        "--show-only=templates/webhook/webhook.yaml",
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    (configuration,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    ca_bundle = base64.b64encode(api.pki.ca_cert.read_bytes()).decode()
    for webhook in configuration["webhooks"]:
        path = webhook["clientConfig"]["service"]["path"]
        webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
    return dict(configuration)


@dataclass
class World:
    api: KubeApi
    port: int
    workdir: Path


@pytest.fixture(scope="module")
def world(kube_api: KubeApi, tmp_path_factory: pytest.TempPathFactory) -> World:
    apply_crds(kube_api)
    kube_api.create_namespace(NS)
    port = free_port()
    configuration = _webhook_configuration(kube_api, port)
    assert {w["failurePolicy"] for w in configuration["webhooks"]} == {"Ignore"}
    apply(kube_api, NS, configuration)
    for name, entry_id in (COMMERCE, LOOKUP):
        answer = submit(kube_api, build(_entry(entry_id), name=name), dry_run=False)
        assert answer.admitted, answer.message
    return World(kube_api, port, tmp_path_factory.mktemp("admission"))


@pytest.fixture(scope="module")
def operator(world: World) -> Iterator[KopfRunner]:
    """One operator process, serving the webhook; started after the operator-stopped tests."""
    kubeconfig = install_operator_identity(world.api, world.workdir)
    config.configure(
        config.OperatorConfig(
            namespace=NS,
            launcher="local",
            metrics_port=0,
            kubeconfig=str(kubeconfig),
            state_dir=world.workdir / "state",
            webhook=config.WebhookSettings(
                port=world.port,
                address="127.0.0.1",
                cert_file=world.api.pki.serving_cert,
                key_file=world.api.pki.serving_key,
            ),
        )
    )
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig)
    args = ["run", "--standalone", "-n", NS, "-m", "updatestream_operator.handlers"]
    logging.getLogger("kopf").setLevel(logging.INFO)
    try:
        with KopfRunner(args, timeout=60) as runner:
            probe = build(_entry(BROKEN), name="probe")
            wait_for(
                lambda: "denied the request" in submit(world.api, probe).message,
                "the operator's webhook to answer",
                timeout=90,
            )
            yield runner
    finally:
        config.configure(config.OperatorConfig())
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
    assert runner.exception is None, runner.output


def _ids(entries: list[dict[str, Any]]) -> list[str]:
    return [e["id"] for e in entries]


def _assert_refused(answer: Answer, entry: dict[str, Any], says: list[str]) -> None:
    assert not answer.admitted, f"{entry['id']} was admitted"
    assert answer.code in (400, 422), answer
    assert entry["field"] in answer.message, f"the refusal does not name {entry['field']}"
    missing = [s for s in says if s not in answer.message]
    assert not missing, f"{entry['id']}: {missing} not in {answer.message!r}"
    assert "hunter2" not in answer.message


def test_the_corpus_is_large_enough_and_names_are_unique() -> None:
    ids = _ids(CORPUS["valid"] + CORPUS["invalid"])
    assert len(CORPUS["invalid"]) >= 80 and len(CORPUS["valid"]) >= 10
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9-]+", i) for i in ids)


# -- the operator stopped: the CRDs' own rules ------------------------------------------------


@pytest.mark.parametrize("entry", CORPUS["invalid"], ids=_ids(CORPUS["invalid"]))
def test_without_the_operator_the_crds_refuse_what_fits_in_one_object(
    world: World, entry: dict[str, Any]
) -> None:
    answer = submit(world.api, build(entry))
    cel = entry.get("cel", entry["says"])
    if cel == "admitted":
        assert answer.admitted, f"{entry['id']}: the CRD now refuses it: {answer.message}"
    else:
        assert "admission webhook" not in answer.message
        _assert_refused(answer, entry, cel)


@pytest.mark.parametrize("entry", CORPUS["valid"], ids=_ids(CORPUS["valid"]))
def test_without_the_operator_valid_objects_are_admitted(
    world: World, entry: dict[str, Any]
) -> None:
    answer = submit(world.api, build(entry, name=f"{entry['id']}-x"))
    assert answer.admitted, answer.message


def test_the_docs_list_what_the_crds_refuse_alone() -> None:
    docs = (REPO_ROOT / "docs" / "operator.md").read_text()
    _, _, lists = docs.partition("With the operator stopped the CRDs alone")
    refused, _, admitted = lists.partition("which only the webhook refuses")
    admitted = admitted.partition("A test fails")[0]

    def ids(text: str) -> set[str]:
        return set(re.findall(r"`((?:ks|us)-[a-z0-9-]+)`", text))

    assert ids(refused) == {e["id"] for e in CORPUS["invalid"] if e.get("cel") != "admitted"}
    assert ids(admitted) == {e["id"] for e in CORPUS["invalid"] if e.get("cel") == "admitted"}
    assert f"refuse these {len(ids(refused))} " in docs
    assert f"admit these {len(ids(admitted))}, " in docs


def test_an_invalid_keyspace_stored_while_the_operator_was_down(world: World) -> None:
    answer = submit(world.api, build(_entry(BROKEN)), dry_run=False)
    assert answer.admitted, answer.message


# -- the operator running: its webhook --------------------------------------------------------


@pytest.mark.parametrize("entry", CORPUS["invalid"], ids=_ids(CORPUS["invalid"]))
def test_the_webhook_refuses_every_invalid_object_saying_what_to_write(
    world: World, operator: KopfRunner, entry: dict[str, Any]
) -> None:
    answer = submit(world.api, build(entry, name=f"{entry['id']}-w"))
    _assert_refused(answer, entry, entry["says"])
    if entry.get("cel") == "admitted":
        assert "admission webhook" in answer.message and "denied the request" in answer.message


@pytest.mark.parametrize("entry", CORPUS["valid"], ids=_ids(CORPUS["valid"]))
def test_the_webhook_admits_valid_objects(
    world: World, operator: KopfRunner, entry: dict[str, Any]
) -> None:
    answer = submit(world.api, build(entry, name=f"{entry['id']}-w"))
    assert answer.admitted, answer.message


def _ready(api: KubeApi, name: str) -> dict[str, Any] | None:
    found = get(api, NS, "keyspace", name) or {}
    for condition in (found.get("status") or {}).get("conditions", []):
        if condition["type"] == "Ready":
            return dict(condition)
    return None


def test_a_keyspace_whose_vschema_does_not_build_is_not_ready(
    world: World, operator: KopfRunner
) -> None:
    condition = wait_for(lambda: _ready(world.api, BROKEN), "the broken Keyspace's status")
    assert condition["status"] == "False"
    assert condition["reason"] == "InvalidVSchema"
    assert "unknown vindex type 'md5hash'" in condition["message"]
    good = wait_for(lambda: _ready(world.api, COMMERCE[0]), "the valid Keyspace's status")
    assert (good["status"], good["reason"]) == ("True", "ShardMapValid")


def test_a_stored_invalid_object_can_still_be_labelled_changed_and_deleted(
    world: World, operator: KopfRunner
) -> None:
    world.api.kubectl("label", "-n", NS, "keyspace", BROKEN, "team=data")
    refused = world.api.kubectl(
        "patch", "-n", NS, "keyspace", BROKEN, "--type=merge",
        "-p", json.dumps({"spec": {"vschema": {"vindexes": {"hash": {"type": "md6"}}}}}),
        check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "unknown vindex type 'md6'" in refused.stderr
    fixed = {"spec": {"vschema": {"vindexes": {"hash": {"type": "hash"}}}}}
    world.api.kubectl(
        "patch", "-n", NS, "keyspace", BROKEN, "--type=merge", "-p", json.dumps(fixed)
    )
    wait_for(
        lambda: (_ready(world.api, BROKEN) or {}).get("status") == "True",
        "the repaired Keyspace to become Ready",
    )
    world.api.kubectl("delete", "-n", NS, "keyspace", BROKEN, "--wait=false")
    wait_for(lambda: get(world.api, NS, "keyspace", BROKEN) is None, "the Keyspace to go")
