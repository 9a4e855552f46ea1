"""`updatestream verify` run as a user runs it, for the tests: one sink's report against the
traffic's ledger."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from harness.stream_job import CLI


def verify_sink(ledger: Path, sink: str, *options: str, timeout: float = 300) -> dict[str, Any]:
    """The JSON report of `updatestream verify --sink <sink>` against `ledger`, with the sink's
    `options`; it must exit 0 (clean) or 1 (findings), never with an error."""
    done = subprocess.run(
        [CLI, "verify", "--ledger", str(ledger), "--sink", sink, *options, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode in (0, 1), done.stderr
    return dict(json.loads(done.stdout))
