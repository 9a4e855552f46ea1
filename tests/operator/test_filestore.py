"""The operator's stream service over local files instead of an API server (what the demo runs).

`FileStore` keeps the UpdateStream, its status and the Events as files and reads the Keyspace
from a manifest file. Driven here by plain calls to `StreamService.reconcile`, with the local
launcher running the stand-in job (`standin_job.py`, a real process that hops when its watched
Keyspace file changes): launch, an in-job hop after the Keyspace file's serving shards change,
the Events, and no relaunch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml
from updatestream_operator.filestore import FileStore, merge_patch
from updatestream_operator.launchers.local import LocalLauncher, _processes_using
from updatestream_operator.reconciler.models import Note, StreamRef
from updatestream_operator.scrub import SCRUBBER
from updatestream_operator.service import StreamService

from harness.operator import keyspace_manifest, stream_manifest, wait_for

STAND_IN = Path(__file__).with_name("standin_job.py")


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}
    patch = {"a": None, "b": {"c": None, "f": 4}, "e": [3], "g": "x"}
    assert merge_patch(target, patch) == {"b": {"d": 3, "f": 4}, "e": [3], "g": "x"}
    assert target["a"] == 1  # the target is not changed in place


def test_streams_status_and_events_as_files(tmp_path: Path) -> None:
    seen: list[Note] = []
    store = FileStore(tmp_path, on_event=lambda ref, note: seen.append(note))
    manifest = stream_manifest("orders", "commerce")
    ref = store.put_stream(manifest, "ns")
    assert (ref.namespace, ref.name, ref.generation) == ("ns", "orders", 1) and ref.uid
    assert store.put_stream(manifest, "ns") == ref  # the same spec: the same generation
    store.patch_stream_status("ns", "orders", {"hopCount": 1, "shards": "-80,80-"})
    store.patch_stream_status("ns", "orders", {"shards": None, "maxLagSeconds": 0.5})
    changed = {**manifest, "spec": {**manifest["spec"], "tables": ["users"]}}
    again = store.put_stream(changed, "ns")
    assert (again.uid, again.generation) == (ref.uid, 2)
    assert store.status("ns", "orders") == {"hopCount": 1, "maxLagSeconds": 0.5}
    assert [s["metadata"]["name"] for s in store.list_streams("ns")] == ["orders"]
    assert store.get_stream("ns", "absent") is None and store.get_keyspace("ns", "x") is None

    SCRUBBER.register(["filestore-s3cret-value"])
    store.post_event(ref, Note("Warning", "LaunchFailed", "login with filestore-s3cret-value"))
    (event,) = store.events("ns", "orders")
    assert (event["type"], event["reason"]) == ("Warning", "LaunchFailed")
    assert "filestore-s3cret-value" not in event["message"]
    assert seen[0].message == event["message"]
    assert "filestore-s3cret-value" not in (tmp_path / "ns" / "events.jsonl").read_text()


def test_the_service_launches_and_hops_a_job_in_place_over_files(tmp_path: Path) -> None:
    keyspace_file = tmp_path / "keyspace.yaml"
    keyspace_file.write_text(yaml.safe_dump(keyspace_manifest("commerce")))
    store = FileStore(tmp_path / "objects", {"commerce": keyspace_file})
    secrets = tmp_path / "secrets" / "reader"
    secrets.mkdir(parents=True)
    (secrets / "username").write_text("updatestream")
    (secrets / "password").write_text("unused")
    launcher = LocalLauncher(
        tmp_path / "jobs",
        command=[sys.executable, str(STAND_IN)],
        secrets_dir=tmp_path / "secrets",
    )
    service = StreamService(store, {"local": launcher}, "local")
    ref: StreamRef = store.put_stream(stream_manifest("orders", "commerce"), "demo")

    def condition(type_: str) -> tuple[str, str] | None:
        for c in store.status("demo", "orders").get("conditions", []):
            if c["type"] == type_:
                return c["status"], c["reason"]
        return None

    def reconciled(type_: str, wanted: tuple[str, str]) -> bool:
        service.reconcile("demo", "orders")
        return condition(type_) == wanted

    def delivering() -> bool:
        service.reconcile("demo", "orders")
        shards = store.status("demo", "orders")["keyRanges"][0]["shards"]
        return len(shards) == 2 and all(s.get("token") for s in shards)

    try:
        wait_for(lambda: reconciled("Ready", ("True", "Streaming")), "the job streaming", 30)
        wait_for(delivering, "the job's positions in status", 30)
        (job,) = launcher.list("demo", ref.uid)
        first = launcher.record(job.key)
        assert first is not None and first["metricsPort"] > 0 and first["inJobHops"] is True

        split = keyspace_manifest("commerce", serving=["-40", "40-80", "80-"])
        split["spec"]["shardMapHistory"] = [{"at": time.time(), "shards": ["-80", "80-"]}]
        keyspace_file.write_text(yaml.safe_dump(split))
        service.reconcile("demo", "orders")
        assert condition("Hopping") == ("True", "ServingShardsChanged")
        watched = yaml.safe_load(
            (launcher.job_dir("demo", job.job_id) / "keyspace.yaml").read_text()
        )
        assert watched["spec"]["servingShards"] == ["-40", "40-80", "80-"]
        wait_for(lambda: reconciled("Hopping", ("False", "HopCompleted")), "the hop", 30)

        status = store.status("demo", "orders")
        (hop,) = status["hops"]
        assert (hop["method"], hop["fromShards"], hop["toShards"]) == (
            "InJob",
            ["-80", "80-"],
            ["-40", "40-80", "80-"],
        )
        assert hop["duplicatesDropped"] == 3  # the stand-in's own count
        reasons = [e["reason"] for e in store.events("demo", "orders")]
        assert reasons == ["Launched", "HopStarted", "HopCompleted"]
        again = launcher.record(job.key)
        assert again is not None and again["pid"] == first["pid"]  # never relaunched
    finally:
        service.cleanup("demo", "orders", ref.uid)
    assert _processes_using(tmp_path / "jobs") == []
