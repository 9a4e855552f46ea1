"""The plain VStream reader (tools/vitess/cmd/vstream-client) against the session cluster."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from updatestream_cli.vitess import runtime
from updatestream_cli.vitess.cluster import VitessCluster

from tests.vitess.conftest import credentials
from tests.vitess.vtgate_writer import VtgateWriter

FIRST_ID = 30_000_000


def _lines(proc: subprocess.Popen[str], out: queue.Queue[dict[str, Any]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        out.put(json.loads(line))


def _wait_until_streaming(events: queue.Queue[dict[str, Any]]) -> None:
    """Until the stream reports a position on every shard: it started at the current one."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            event = events.get(timeout=1)
        except queue.Empty:
            continue
        assert event["type"] != "ERROR", event
        gtids = event.get("vgtid", {}).get("shardGtids", [])
        if gtids and all(g["gtid"] != "current" for g in gtids):
            return
    raise AssertionError("vstream-client reported no position within 60 s")


def test_vstream_client_prints_each_row_change_with_its_commit_time(
    vitess_cluster: VitessCluster, tmp_path: Path
) -> None:
    cluster = vitess_cluster
    vgtid_file = tmp_path / "vgtid.json"
    proc = subprocess.Popen(
        [
            str(runtime.vitess_bin_dir() / "vstream-client"),
            "--server", cluster.vtgate.grpc_address,
            "--keyspace", cluster.keyspace,
            "--vgtid-file", str(vgtid_file),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    events: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(target=_lines, args=(proc, events), daemon=True).start()
    writer = VtgateWriter(
        cluster.vtgate.mysql_port, credentials(cluster, "app"), cluster.keyspace, FIRST_ID
    )
    try:
        _wait_until_streaming(events)
        began = time.time()
        for _ in range(5):
            writer.write_one()
        expected = {str(i) for i in writer.ids}
        inserted: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 60
        while not expected <= set(inserted) and time.monotonic() < deadline:
            try:
                event = events.get(timeout=1)
            except queue.Empty:
                continue
            assert event["type"] != "ERROR", event
            if event["type"] == "ROW" and event["table"] == f"{cluster.keyspace}.users":
                for change in event["changes"]:
                    if change["before"] is None and int(change["after"]["id"]) >= FIRST_ID:
                        inserted[change["after"]["id"]] = event
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        writer.close()
    assert expected and set(inserted) == expected
    for event in inserted.values():
        assert event["shard"] in ("-80", "80-") and event["keyspace"] == cluster.keyspace
        assert began - 1 <= event["commit_time"] <= time.time()
        assert event["received"] >= event["current_time"] > 0
    saved = json.loads(vgtid_file.read_text())
    assert {g["shard"] for g in saved["shardGtids"]} == {"-80", "80-"}
