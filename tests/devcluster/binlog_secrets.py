"""Look for secrets in binlog files, decoded by `mariadb-binlog` and in raw bytes (test helper).

MySQL's files are searched in their raw bytes (no `mysqlbinlog` here; a MySQL binlog holds a
password only as the hash in an account statement, so any account statement is a finding).

Findings name the secret and the file, never the secret's value: a failing assertion must not
print the password it found.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path


def binlog_files(datadir: Path) -> list[Path]:
    """The numbered binlog files of one server's datadir (MariaDB or MySQL), in order."""
    return sorted([*datadir.glob("mariadb-bin.[0-9]*"), *datadir.glob("mysql-bin.[0-9]*")])


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
        raw = path.read_bytes()
        mysql = path.name.startswith("mysql-bin.")
        decoded = "" if mysql else decoded_binlog(path)
        if mysql and b"IDENTIFIED" in raw:
            found.append(f"an account statement in {path.parent.parent.name}/{path.name}")
        found += [
            f"{name} in {path.parent.parent.name}/{path.name}"
            for name, value in secrets.items()
            if value in decoded or value.encode() in raw
        ]
    return found
