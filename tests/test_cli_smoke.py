"""The console script is installed and answers."""

import subprocess
import sys


def test_version_prints_the_package_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "updatestream_cli", "--version"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "updatestream, version 0.1.0"
