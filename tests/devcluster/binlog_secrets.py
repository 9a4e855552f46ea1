"""Look for secrets in binlog files, decoded by `mariadb-binlog` and in raw bytes (test helper).

Findings name the secret and the file, never the secret's value: a failing assertion must not
print the password it found.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path


def binlog_files(datadir: Path) -> list[Path]:
    """The numbered binlog files of one server's datadir, in order."""
    return sorted(datadir.glob("mariadb-bin.[0-9]*"))


def decoded_binlog(path: Path) -> str:
    """`mariadb-binlog --verbose` of one file: statements and row images as text."""
    out = subprocess.run(
        ["mariadb-binlog", "--verbose", str(path)], capture_output=True, check=True
    ).stdout.decode(errors="replace")
    assert "Gtid list" in out, f"mariadb-binlog decoded nothing of {path}"
    return out


def secrets_in_binlogs(paths: Iterable[Path], secrets: Mapping[str, str]) -> list[str]:
    """`<secret name> in <server dir>/<file>` for every secret found in a file."""
    found: list[str] = []
    for path in paths:
        decoded, raw = decoded_binlog(path), path.read_bytes()
        found += [
            f"{name} in {path.parent.parent.name}/{path.name}"
            for name, value in secrets.items()
            if value in decoded or value.encode() in raw
        ]
    return found
