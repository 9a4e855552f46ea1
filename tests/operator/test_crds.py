"""The CRDs against a real API server: they install, accept valid objects, and reject invalid
ones with a message that names the offending field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from harness.kube import KubeApi
from harness.operator import (
    REPO_ROOT,
    apply,
    apply_crds,
    get,
    keyspace_manifest,
    stream_manifest,
)
from updatestream.spec import CDCv2Sink, MemcachedSink, MirrorSink, parse_update_stream

NAMESPACE = "crd-validation"

Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def api(kube_api: KubeApi) -> KubeApi:
    apply_crds(kube_api)
    kube_api.create_namespace(NAMESPACE)
    return kube_api


def _dry_run(api: KubeApi, manifest: dict[str, Any]) -> tuple[int, str]:
    result = api.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        NAMESPACE,
        "-f",
        "-",
        input=yaml.safe_dump(manifest),
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


def _set(path: str, value: Any) -> Edit:
    def edit(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = obj
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is _DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


_DELETE = object()


def _one_sink(**fields: Any) -> Edit:
    """The stream's sinks become one sink with `fields`."""
    return _set("spec.sinks", [fields])


def test_the_crds_install_and_describe_their_printer_columns(api: KubeApi) -> None:
    result = api.kubectl("get", "crd", "updatestreams.updatestream.io", "-o", "yaml")
    crd = yaml.safe_load(result.stdout)
    columns = {c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert {"Ready", "Lag", "Shards"} <= columns
    assert crd["status"]["acceptedNames"]["kind"] == "UpdateStream"
    assert (REPO_ROOT / "crds" / "rbac").is_dir()


def test_kubectl_finds_both_kinds_by_singular_and_short_names(api: KubeApi) -> None:
    apply(api, NAMESPACE, keyspace_manifest("names"))
    apply(api, NAMESPACE, stream_manifest("names", "names"))
    for kind in ("keyspace", "ks", "updatestream", "us"):
        result = api.kubectl("get", "-n", NAMESPACE, kind, "names", "-o", "name")
        assert result.stdout.strip().endswith("/names"), kind
    listed = api.kubectl("get", "-n", NAMESPACE, "updatestream-all", "-o", "name").stdout
    assert "keyspace.updatestream.io/names" in listed
    assert "updatestream.updatestream.io/names" in listed


def test_valid_objects_are_accepted(api: KubeApi) -> None:
    for manifest in (keyspace_manifest("ks"), stream_manifest("s", "ks")):
        code, output = _dry_run(api, manifest)
        assert code == 0, output


def test_sink_fields_the_job_reads_are_kept_not_pruned(api: KubeApi) -> None:
    sinks = [
        {
            "type": "memcached",
            "servers": ["cache:11211"],
            "keyTemplate": {"orders": "order:{id}"},
            "extraKeys": {"orders": ["customer-orders:{customer_id}"]},
            "writeFrom": "executors",
        },
        {
            "type": "cdcv2",
            "path": "/data/cdc",
            "allowedLatenessSeconds": 30,
            "writeFrom": "executors",
            "writePartitions": 8,
        },
        {
            "type": "mirror",
            "mysql": {"host": "mirror-db", "port": 3306, "tls": "disabled"},
            "credentialsSecret": {"name": "mirror-writer"},
            "database": "mirror",
            "tablePrefix": "src_",
            "tombstoneHorizonSeconds": 3600,
            "purgeEveryBatches": 10,
            "sourceDatabase": "commerce",
            "writeFrom": "executors",
        },
    ]
    apply(api, NAMESPACE, stream_manifest("kept", "ks", sinks=sinks))
    stored = get(api, NAMESPACE, "updatestream", "kept")
    assert stored is not None
    assert stored["spec"]["sinks"] == sinks
    parsed = parse_update_stream(stored)
    memcached, cdcv2, mirror = parsed.spec.sinks
    assert isinstance(memcached, MemcachedSink) and isinstance(cdcv2, CDCv2Sink)
    assert memcached.write_from == "executors"
    assert isinstance(mirror, MirrorSink) and mirror.tombstone_horizon == 3600
    assert mirror.table_prefix == "src_" and mirror.source_database == "commerce"
    assert mirror.write_from == "executors"
    assert memcached.extra_keys == {"orders": ["customer-orders:{customer_id}"]}
    assert cdcv2.allowed_lateness == 30
    assert (cdcv2.write_from, cdcv2.write_partitions) == ("executors", 8)


KEYSPACE_CASES: list[tuple[str, Edit, str]] = [
    ("bad key range syntax", _set("spec.shards.0.name", "8g-"), "spec.shards[0].name"),
    ("key range start not below end", _set("spec.shards.1.name", "c0-80"), "start must be below"),
    ("unnormalised key range", _set("spec.shards.0.name", "-8000"), "spec.shards[0].name"),
    ("gap in serving shards", _set("spec.servingShards", ["-40", "80-"]), "spec.servingShards"),
    ("overlap in serving shards", _set("spec.servingShards", ["-80", "40-"]), "servingShards"),
    ("two shards reach the end", _set("spec.servingShards", ["-80", "80-", "40-"]), "end of"),
    ("no shard at the start", _set("spec.servingShards", ["80-"]), "servingShards"),
    ("undeclared serving shard", _set("spec.servingShards", ["-", "80-"]), "declared in shards"),
    ("empty serving shards", _set("spec.servingShards", []), "spec.servingShards"),
    ("missing vschema", _set("spec.vschema", _DELETE), "spec.vschema"),
    ("vschema without sharded", _set("spec.vschema", {"tables": {}}), "spec.vschema.sharded"),
    ("port out of range", _set("spec.shards.0.mysql.port", 70000), "spec.shards[0].mysql.port"),
    ("unknown tls mode", _set("spec.shards.0.mysql.tls", "maybe"), "spec.shards[0].mysql.tls"),
    (
        "missing credentials",
        _set("spec.shards.0.credentialsSecret", _DELETE),
        "spec.shards[0].credentialsSecret",
    ),
    ("unknown flavor", _set("spec.shards.0.flavor", "postgres"), "spec.shards[0].flavor"),
    ("duplicate shard", _set("spec.shards.1.name", "-80"), "spec.shards[1]"),
]

STREAM_CASES: list[tuple[str, Edit, str]] = [
    ("missing keyspace", _set("spec.keyspace", _DELETE), "spec.keyspace"),
    ("no sinks", _set("spec.sinks", []), "spec.sinks"),
    ("bad key range syntax", _set("spec.keyRanges", ["xyz"]), "spec.keyRanges[0]"),
    ("key range start not below end", _set("spec.keyRanges", ["80-40"]), "spec.keyRanges[0]"),
    (
        "timestamp mode without timestamp",
        _set("spec.start", {"mode": "timestamp"}),
        "spec.start.timestamp",
    ),
    ("gtid mode without gtid", _set("spec.start", {"mode": "gtid"}), "spec.start.gtid"),
    ("tokens mode without tokens", _set("spec.start", {"mode": "tokens"}), "spec.start.tokens"),
    (
        "timestamp in another mode",
        _set("spec.start", {"mode": "now", "timestamp": 5}),
        "spec.start.timestamp",
    ),
    ("unknown start mode", _set("spec.start", {"mode": "yesterday"}), "spec.start.mode"),
    (
        "malformed gtid",
        _set("spec.start", {"mode": "gtid", "gtid": {"-80": "zero"}}),
        "spec.start.gtid[-80]",
    ),
    (
        "memcached without servers",
        _one_sink(type="memcached"),
        "spec.sinks[0].servers",
    ),
    (
        "memcached server without port",
        _one_sink(type="memcached", servers=["cache"]),
        "spec.sinks[0].servers[0]",
    ),
    (
        "versionStream without mysql",
        _one_sink(type="versionStream", credentialsSecret={"name": "w"}),
        "spec.sinks[0].mysql",
    ),
    (
        "versionStream without credentials",
        _one_sink(type="versionStream", mysql={"host": "db"}),
        "spec.sinks[0].credentialsSecret",
    ),
    ("cdcv2 without path", _one_sink(type="cdcv2"), "spec.sinks[0].path"),
    ("unknown sink type", _one_sink(type="kafka"), "spec.sinks[0].type"),
    (
        "servers on a cdcv2 sink",
        _one_sink(type="cdcv2", path="/x", servers=["a:1"]),
        "spec.sinks[0].servers",
    ),
    (
        "bad database name",
        _one_sink(
            type="versionStream",
            mysql={"host": "db"},
            credentialsSecret={"name": "w"},
            database="my-db",
        ),
        "spec.sinks[0].database",
    ),
    (
        "non-spark conf key",
        _set("spec.spark", {"conf": {"executor.memory": "1g"}}),
        "spec.spark.conf",
    ),
    (
        "negative allowed lateness",
        _one_sink(type="cdcv2", path="/x", allowedLatenessSeconds=-1),
        "spec.sinks[0].allowedLatenessSeconds",
    ),
    (
        "writeFrom on a console sink",
        _one_sink(type="console", writeFrom="executors"),
        "spec.sinks[0].writeFrom",
    ),
    (
        "writePartitions on a mirror sink",
        _one_sink(
            type="mirror", mysql={"host": "db"}, credentialsSecret={"name": "w"}, writePartitions=2
        ),
        "spec.sinks[0].writePartitions",
    ),
    (
        "no cdcv2 write partitions",
        _one_sink(type="cdcv2", path="/x", writeFrom="executors", writePartitions=0),
        "spec.sinks[0].writePartitions",
    ),
    (
        "unknown writeFrom",
        _one_sink(
            type="mirror",
            mysql={"host": "db"},
            credentialsSecret={"name": "w"},
            writeFrom="workers",
        ),
        "spec.sinks[0].writeFrom",
    ),
    (
        "allowed lateness on a memcached sink",
        _one_sink(type="memcached", servers=["a:1"], allowedLatenessSeconds=5),
        "spec.sinks[0].allowedLatenessSeconds",
    ),
    (
        "extra keys not a list",
        _one_sink(type="memcached", servers=["a:1"], extraKeys={"t": "k"}),
        "spec.sinks[0].extraKeys.t",
    ),
    (
        "extra keys on a cdcv2 sink",
        _one_sink(type="cdcv2", path="/x", extraKeys={"t": ["k"]}),
        "spec.sinks[0].extraKeys",
    ),
    (
        "mirror without a Secret",
        _one_sink(type="mirror", mysql={"host": "db"}),
        "spec.sinks[0].credentialsSecret",
    ),
    (
        "tombstone horizon on a cdcv2 sink",
        _one_sink(type="cdcv2", path="/x", tombstoneHorizonSeconds=60),
        "spec.sinks[0].tombstoneHorizonSeconds",
    ),
    (
        "mirror table prefix not a MySQL name",
        _one_sink(
            type="mirror", mysql={"host": "db"}, credentialsSecret={"name": "w"}, tablePrefix="m-"
        ),
        "spec.sinks[0].tablePrefix",
    ),
    ("unknown launcher", _set("spec.spark", {"launcher": "yarn"}), "spec.spark.launcher"),
    (
        "removed launcher",
        _set("spec.spark", {"launcher": "spark-operator"}),
        "spec.spark.launcher",
    ),
    ("suspend not a boolean", _set("spec.suspend", "yes"), "spec.suspend"),
]


@pytest.mark.parametrize(
    ("kind", "case", "edit", "field"),
    [("Keyspace", *c) for c in KEYSPACE_CASES] + [("UpdateStream", *c) for c in STREAM_CASES],
    ids=[f"Keyspace: {c[0]}" for c in KEYSPACE_CASES]
    + [f"UpdateStream: {c[0]}" for c in STREAM_CASES],
)
def test_invalid_objects_are_rejected_naming_the_field(
    api: KubeApi, kind: str, case: str, edit: Edit, field: str
) -> None:
    base = keyspace_manifest("ks") if kind == "Keyspace" else stream_manifest("s", "ks")
    manifest = copy.deepcopy(base)
    edit(manifest)
    code, output = _dry_run(api, manifest)
    assert code != 0, f"{case}: accepted\n{yaml.safe_dump(manifest)}"
    assert "is invalid" in output or "Invalid value" in output or "Required value" in output, output
    assert field in output, output


def test_there_are_at_least_twenty_rejection_cases() -> None:
    assert len(KEYSPACE_CASES) + len(STREAM_CASES) >= 20
