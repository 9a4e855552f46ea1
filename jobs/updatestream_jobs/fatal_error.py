"""A job's fatal error, written into its progress report for the operator.

The job ends with one line on standard error (`error: ...`); the same line goes into its status
file (`phase: failed`, `error`, `retryable`), keeping the positions the report already holds, so
the operator can say in the stream's Degraded condition why the key range stopped, and decide
whether relaunching it may help. The line carries no Secret value: every value of the Secrets
mounted for the job is blanked out of it.

In a Pod the line also goes into the container's termination message (`/dev/termination-log`),
which Kubernetes puts into the Pod's status at the moment the driver exits: the operator then
knows why at once, without waiting for the progress sidecar's next copy of the status file.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from updatestream.binlog.errors import (
    BinlogPurged,
    BinlogSettingsError,
    HopGapError,
    SourceOptionsError,
    UnknownTable,
)
from updatestream.cache.key_templates import KeyTemplateError
from updatestream.contract.job_config import JobConfig
from updatestream.contract.progress_report import ProgressError, ProgressReport
from updatestream.core.errors import UpdateStreamError
from updatestream.core.vschema import VSchemaError
from updatestream.spec import SpecError

MAX_CHARS = 500
TERMINATION_LOG = Path("/dev/termination-log")  # Kubernetes' default terminationMessagePath
# What a relaunch with the same configuration meets again: the spec, the Keyspace or the
# shards' settings must change first.
NOT_RETRYABLE: tuple[type[UpdateStreamError], ...] = (
    SpecError,
    SourceOptionsError,
    KeyTemplateError,
    VSchemaError,
    UnknownTable,
    BinlogSettingsError,
    BinlogPurged,
    HopGapError,
)


def retryable(exc: BaseException) -> bool:
    """Whether relaunching the job may get past `exc` (a server down, a network failure)."""
    return not isinstance(exc, NOT_RETRYABLE)


def one_line(exc: BaseException, secrets_dir: Path | None = None) -> str:
    """The error's first line, without any Secret value mounted under `secrets_dir`, at most
    MAX_CHARS long."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    for value in sorted(_secret_values(secrets_dir), key=len, reverse=True):
        text = text.replace(value, "***")
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


def _secret_values(secrets_dir: Path | None) -> set[str]:
    if secrets_dir is None or not secrets_dir.is_dir():
        return set()
    values = set()
    for path in secrets_dir.glob("*/*"):
        try:
            value = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if len(value) >= 4:  # a blanked 1-3 character value would blank ordinary words
            values.add(value)
    return values


def record(config: JobConfig, exc: BaseException, termination_log: Path = TERMINATION_LOG) -> None:
    """Write the job's fatal error into its status file (if it has one), keeping what the last
    report held, and into the container's termination message when it runs in a Pod; never
    raises (the job is ending with `exc` already)."""
    line = one_line(exc, config.secrets_dir)
    if termination_log.exists():
        with contextlib.suppress(OSError):
            termination_log.write_text(line + "\n", encoding="utf-8")
    if config.status_file is None:
        return
    try:
        report = ProgressReport.read(config.status_file)
    except ProgressError:
        report = ProgressReport(stream=config.name, key_range=config.key_range)
    failed = report.model_copy(
        update={
            "phase": "failed",
            "updated_at": time.time(),
            "error": line,
            "retryable": retryable(exc),
        }
    )
    with contextlib.suppress(OSError):
        failed.write(config.status_file)
