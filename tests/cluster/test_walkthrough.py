"""The walkthrough of docs/deploy.md, run as the page writes it, so the page cannot drift.

The page's walkthrough is a series of bash blocks between `<!-- walkthrough -->` markers: this
test runs them in one shell from the repository's root, as a newcomer would paste them (the
node, the chart, the development cluster on the bridge address, memcached, the example
UpdateStream, traffic, `updatestream verify`), checks what the page promises on the way (the
stream Ready, the examples admitted, what a stream costs as its table says), then runs the last
block, which stops everything, and checks the machine is as it was.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.node import NODE_DIR, REPO_ROOT, NodeError, firewall

DOC = REPO_ROOT / "docs" / "deploy.md"
NS = "updatestream"
MEMCACHED_PID = Path("/tmp/updatestream-memcached.pid")
LEDGER = Path("/tmp/updatestream-ledger.jsonl")  # the page's traffic writes it
REPORT = REPO_ROOT / ".updatestream" / "walkthrough-report.txt"


def marked(text: str, marker: str) -> str:
    """The part of the page between `<!-- marker -->` and `<!-- /marker -->`."""
    found = re.search(rf"<!-- {marker} -->\n(.*?)<!-- /{marker} -->", text, re.S)
    assert found, f"docs/deploy.md has no {marker} section"
    return found.group(1)


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", marked(text, "walkthrough"), re.S)


def cost_rows(text: str) -> dict[str, tuple[str, str, str]]:
    """container -> (Pod, CPU request, memory request), from the page's table."""
    rows = {}
    for line in marked(text, "stream-cost").splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("container", "---"):
            rows[cells[0]] = (cells[1], cells[2], cells[3])
    return rows


def run(script: str, timeout: float) -> str:
    """`script` in bash from the repository's root, stopping at the first failing command."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VIRTUAL_ENV")},
    )
    if done.returncode != 0:
        raise AssertionError(
            f"the walkthrough failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n"
            f"{done.stderr[-4000:]}"
        )
    return done.stdout + done.stderr


def kubectl(*args: str) -> Any:
    output = run(f"source {NODE_DIR}/env\nkubectl {' '.join(args)} -o yaml", 120)
    return yaml.safe_load(output)


def _leave_nothing_behind() -> None:
    """After a failure: what the page's last block would have stopped."""
    if MEMCACHED_PID.exists():
        pid = int(MEMCACHED_PID.read_text().strip() or 0)
        if pid:
            subprocess.run(["kill", str(pid)], check=False)
    subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "updatestream"), "devcluster", "down", "--purge"],
        cwd=REPO_ROOT,
        check=False,
        capture_output=True,
    )
    if (NODE_DIR / "pids").exists():
        subprocess.run(["bash", "scripts/cluster-down.sh"], cwd=REPO_ROOT, check=False)
    LEDGER.unlink(missing_ok=True)


@pytest.mark.timeout(2400)
def test_the_walkthrough_runs_as_the_page_writes_it() -> None:
    if os.geteuid() != 0:
        raise NodeError("the walkthrough needs root (the one-node cluster)")
    if (NODE_DIR / "pids").exists():
        raise NodeError("a node runs already; the walkthrough brings up its own")
    page = DOC.read_text()
    blocks = bash_blocks(page)
    assert len(blocks) >= 5 and "make cluster-down" in blocks[-1], blocks
    before = firewall()
    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        output = run("\n".join(blocks[:-1]), timeout=2000)
        timings["the walkthrough up to verify"] = time.monotonic() - started
        assert "source .updatestream/node/env" in output  # cluster-up says how to use the node
        assert "UPDATESTREAM_IMAGE_TAG=dev-" in output
        assert re.search(r"users-cache\s+commerce\s+True", output), output[-2000:]
        _check_examples_are_admitted()
        _check_the_cost_table(cost_rows(page))
        started = time.monotonic()
        run(f"source {NODE_DIR}/env\n{blocks[-1]}", timeout=600)
        timings["stopping everything"] = time.monotonic() - started
        assert not LEDGER.exists(), "the page's last block leaves the traffic's ledger"
    finally:
        _leave_nothing_behind()
    assert not (NODE_DIR / "pids").exists()
    assert firewall() == before
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("".join(f"{what}: {seconds:.0f}s\n" for what, seconds in timings.items()))


def _check_examples_are_admitted() -> None:
    """The example manifests pass the operator's admission webhook (a server-side dry run)."""
    examples = sorted((REPO_ROOT / "examples").glob("*.yaml"))
    assert {p.name for p in examples} >= {"users-cache.yaml", "keyspace.yaml"}
    files = " ".join(f"-f {p}" for p in examples)
    run(f"source {NODE_DIR}/env\nkubectl apply --dry-run=server -n {NS} {files}", 120)


def _check_the_cost_table(rows: dict[str, tuple[str, str, str]]) -> None:
    """The page's figures are the requests of the running stream's Pods."""
    pods = kubectl("get", "pods", "-n", NS, "-l", "updatestream.io/stream=users-cache")["items"]
    found = {}
    for pod in pods:
        role = pod["metadata"]["labels"].get("spark-role")
        for container in pod["spec"]["containers"]:
            requests = (container.get("resources") or {}).get("requests") or {}
            found[container["name"]] = (role, requests.get("cpu"), requests.get("memory"))
    assert found == rows, (found, rows)
