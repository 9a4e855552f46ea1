"""`updatestream demo --json` end to end, with short traffic, as `make demo` runs it (MariaDB
shards, Version Stream and mirror; the hop tests run both flavors): real shards, memcached, a
Version Stream server, the operator's service and local launcher running a real Spark job, a
live split and its hop, and the verifier on every sink. Then nothing it started may still run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from updatestream_cli.devcluster.local_server import pid_alive
from updatestream_operator.launchers.local import _processes_using

CLI = str(Path(sys.executable).with_name("updatestream"))
REPORT_KEYS = {
    "committed",
    "delivered",
    "lost",
    "duplicates_delivered",
    "duplicates_dropped",
    "duplicates_dropped_by_cause",
    "out_of_order_keys",
}


def test_the_demo_hops_a_live_split_and_every_sink_verifies_clean(tmp_path: Path) -> None:
    """`make demo` as it runs, on MariaDB shards (the hop tests run on both flavors)."""
    directory = tmp_path / "demo"
    done = subprocess.run(
        [CLI, "demo", "--json", "--dir", str(directory),
         "--rate", "100", "--seconds", "10", "--split-after", "3", "--seed", "7"],
        capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)  # exactly one JSON object on stdout
    assert set(result) == {"sinks", "hops", "events", "elapsed_s"}

    assert set(result["sinks"]) == {"memcached", "versionstream", "cdcv2", "mirror"}
    committed = result["sinks"]["versionstream"]["committed"]
    assert committed > 300
    mirror = result["sinks"].pop("mirror")  # against the shards' rows, not the ledger
    assert mirror["missing"] == mirror["extra"] == mirror["different"] == 0, mirror
    assert mirror["mirror_rows"] == mirror["source_rows"] > 0, mirror
    for sink, report in result["sinks"].items():
        # stale: memcached only; progress violations: CDCv2 only
        assert set(report) - {"stale_keys", "progress_violations"} == REPORT_KEYS, sink
        assert report["committed"] == committed, (sink, report)
        assert report["lost"] == 0 and report["duplicates_delivered"] == 0, (sink, report)
        assert report["duplicates_dropped"] > 0, (sink, report)  # the split's overlap

    assert result["sinks"]["memcached"]["stale_keys"] == 0
    assert result["sinks"]["cdcv2"]["progress_violations"] == 0

    (hop,) = result["hops"]
    assert hop["from"] == ["-80", "80-"] and hop["to"] == ["-40", "40-80", "80-"]
    assert 0 < hop["duration_s"] < 120
    assert 0 < hop["duplicates_dropped"] <= result["sinks"]["cdcv2"]["duplicates_dropped"]
    assert result["events"] >= committed
    assert 0 < result["elapsed_s"] < 540

    # everything the demo started is stopped: servers, memcached, the job
    state = json.loads((directory / "demo.json").read_text())
    assert state["versionstream"]["flavor"] == "mariadb"
    pids = [state["memcached"]["pid"], state["versionstream"]["pid"], state["jobPid"]]
    assert all(pids) and not [p for p in pids if pid_alive(p)], pids
    assert _processes_using(directory) == []  # the shards' servers and the job's processes
