"""`updatestream devcluster up/status/down` as a user runs them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.local_server import pid_alive


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "updatestream_cli", "devcluster", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_up_is_idempotent_status_reports_down_stops(tmp_path: Path) -> None:
    directory = str(tmp_path / "dc")
    first = _cli("up", "--dir", directory)
    cluster = DevCluster(directory)
    try:
        pids = {s: cluster.server(s).pid for s in ("-80", "80-")}
        manifest = cluster.manifest_path.read_bytes()
        second = _cli("up", "--dir", directory)
        assert "nothing changed" in second.stderr
        assert {s: cluster.server(s).pid for s in ("-80", "80-")} == pids
        assert cluster.manifest_path.read_bytes() == manifest

        report = json.loads(_cli("status", "--json", "--dir", directory).stdout)
        assert report["serving_shards"] == ["-80", "80-"]
        for shard in report["shards"]:
            assert shard["running"] and shard["gtid_position"].startswith(
                f"{shard['domain_id']}-{shard['server_id']}-"
            )
            assert shard["binlog_files"][0]["name"].startswith("mariadb-bin.")

        outputs = first.stdout + first.stderr + second.stdout + second.stderr + json.dumps(report)
        for role in ("reader", "app", "admin"):
            creds = cluster.credentials(role)
            assert creds.password not in outputs
            assert creds.password not in cluster.manifest_path.read_text()
            folder = (
                cluster.secrets_dir / f"commerce-{'binlog-reader' if role == 'reader' else role}"
            )
            for key in ("username", "password"):
                assert stat.S_IMODE((folder / key).stat().st_mode) == 0o600

        with cluster.connect("-80", "admin") as conn, conn.cursor() as cur:
            cur.execute("SHOW GRANTS FOR 'commerce_reader'@'127.0.0.1'")
            grants = " ".join(str(r[0]) for r in cur.fetchall())
            assert "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.*" in grants
            cur.execute("SHOW GRANTS FOR 'commerce_app'@'127.0.0.1'")
            app = " ".join(str(r[0]) for r in cur.fetchall())
            assert "SUPER" not in app and "READ_ONLY ADMIN" not in app and "ON `commerce`.*" in app
    finally:
        down = _cli("down", "--dir", directory)
    assert "stopped -80, 80-" in down.stderr
    assert not any(pid_alive(pid) for pid in pids.values() if pid)
