"""The job's fatal error reaches the operator twice: in the status file the progress sidecar
copies, and at once in the container's termination message the Pod's status carries."""

from __future__ import annotations

from pathlib import Path

from updatestream_cli import manifests
from updatestream_jobs import fatal_error

from updatestream import spec
from updatestream.binlog.errors import BinlogPurged
from updatestream.contract.job_config import JobConfig
from updatestream.contract.progress_report import ProgressReport
from updatestream.core.errors import UpdateStreamError


def _config(tmp_path: Path, status_file: Path | None) -> JobConfig:
    stream = spec.parse_update_stream(
        {
            "metadata": {"name": "orders-feed"},
            "spec": {
                "keyspace": "commerce",
                "tables": ["orders"],
                "sinks": [{"type": "console", "path": str(tmp_path / "out.jsonl")}],
            },
        }
    )
    shard = manifests.shard("-", "db", None, "r")
    keyspace = spec.parse_keyspace(manifests.keyspace([shard], {"sharded": False}))
    secrets = tmp_path / "secrets"
    (secrets / "r").mkdir(parents=True)
    (secrets / "r" / "password").write_text("hunter2-secret\n")
    return JobConfig(
        stream=stream,
        keyspace=keyspace,
        secrets_dir=secrets,
        checkpoint=tmp_path / "cp",
        status_file=status_file,
    )


def test_the_error_goes_into_the_status_file_and_the_termination_message_without_secrets(
    tmp_path: Path,
) -> None:
    status, termination = tmp_path / "status.json", tmp_path / "termination-log"
    termination.write_text("")  # the kubelet creates it in a Pod
    error = UpdateStreamError("memcached 10.0.0.1:11211 does not answer (password hunter2-secret)")
    fatal_error.record(_config(tmp_path, status), error, termination_log=termination)

    line = "memcached 10.0.0.1:11211 does not answer (password ***)"
    assert termination.read_text() == line + "\n"
    report = ProgressReport.read(status)
    assert (report.phase, report.error, report.retryable) == ("failed", line, True)


def test_outside_a_pod_no_termination_message_is_created_and_purged_binlogs_are_final(
    tmp_path: Path,
) -> None:
    status, termination = tmp_path / "status.json", tmp_path / "termination-log"
    purged = BinlogPurged("gone", shard="-80", requested="s:1-5", oldest="s:1-9")
    fatal_error.record(_config(tmp_path, status), purged, termination_log=termination)
    assert not termination.exists()
    report = ProgressReport.read(status)
    assert (report.error, report.retryable) == ("gone", False)


def test_without_a_status_file_the_termination_message_still_says_why(tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    termination.write_text("")
    fatal_error.record(
        _config(tmp_path, None), UpdateStreamError("first\nsecond"), termination_log=termination
    )
    assert termination.read_text() == "first\n"
