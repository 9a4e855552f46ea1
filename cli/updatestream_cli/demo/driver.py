"""The operator's pieces, driven without kopf and without an API server.

In a cluster, kopf calls `StreamService.reconcile` when an UpdateStream or its Keyspace
changes and on a timer. Here a thread calls the same method every `interval` seconds, over a
`FileStore`: the UpdateStream is a file the demo writes (as `kubectl apply` would), its
Keyspace is the development cluster's manifest, which the reshard workflow rewrites when the
serving shards change, and status and Events are files too. Everything else is the operator's
own code path: the pure reconcile plans the launch and the hop, `LocalLauncher` starts
`updatestream run` with the job's configuration, and shows the running job the new Keyspace
through the file it watches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from updatestream_operator.filestore import FileStore
from updatestream_operator.launchers.local import LocalLauncher
from updatestream_operator.reconciler.models import JobPhase, Note, StreamRef
from updatestream_operator.reconciler.naming import job_name
from updatestream_operator.scrub import SCRUBBER
from updatestream_operator.service import StreamService

from updatestream.contract.progress_report import ProgressError, ProgressReport
from updatestream.core.keyrange import FULL_RANGE
from updatestream_cli.manifests import update_stream
from updatestream_cli.ticker import Ticker

log = logging.getLogger(__name__)

NAMESPACE = "demo"


def stream_manifest(
    name: str, keyspace: str, start: Mapping[str, str], sinks: list[dict[str, Any]]
) -> dict[str, Any]:
    """One UpdateStream over the whole keyspace (`-`), from the shards' current positions."""
    gtid = {"mode": "gtid", "gtid": dict(start)}
    return update_stream(name, keyspace, gtid, sinks, spark={"launcher": "local"})


def caught_up(report: ProgressReport, positions: Mapping[str, str], after: float) -> bool:
    """The job's report shows every shard of `positions` delivered up to its position, with a
    heartbeat from `after` or later (so CDCv2 has declared every earlier second complete)."""
    shards = report.shards
    return all(
        name in shards
        and shards[name].position == position
        and (shards[name].heartbeat_timestamp or 0) >= after
        for name, position in positions.items()
    )


def delivered_events(report: ProgressReport) -> int:
    """Change events the job delivered to its sinks (heartbeats not counted)."""
    return sum(shard.events for shard in report.shards.values())


class OperatorDriver:
    """The stream service over a `FileStore` and a `LocalLauncher`, reconciled by a thread."""

    def __init__(
        self,
        root: Path,
        keyspaces: Mapping[str, Path],
        secrets_dir: Path,
        *,
        interval: float = 1.0,
        on_event: Callable[[StreamRef, Note], None] | None = None,
    ) -> None:
        self.store = FileStore(root / "objects", keyspaces, on_event=on_event)
        self.launcher = LocalLauncher(root / "jobs", secrets_dir=secrets_dir)
        self.service = StreamService(self.store, {"local": self.launcher}, "local")
        self.interval = interval
        self.ref: StreamRef | None = None
        self.error: str | None = None
        self._ticker = Ticker(self.reconcile, interval, "operator")

    # -- what a user does ---------------------------------------------------------------------

    def apply(self, manifest: Mapping[str, Any]) -> StreamRef:
        self.ref = self.store.put_stream(manifest, NAMESPACE)
        return self.ref

    # -- what kopf does -----------------------------------------------------------------------

    def reconcile(self) -> None:
        """One reconciliation of the stream; an error is kept (and retried next time)."""
        assert self.ref is not None
        try:
            self.service.reconcile(self.ref.namespace, self.ref.name)
            self.error = None
        except Exception as exc:  # the next pass retries, as kopf would
            self.error = SCRUBBER.scrub(str(exc))
            log.warning("reconciling %s failed: %s", self.ref.name, self.error)

    def start(self) -> OperatorDriver:
        self._ticker.start()
        return self

    def stop(self) -> None:
        self._ticker.stop(timeout=120)

    # -- what the demo looks at ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        assert self.ref is not None
        return self.store.status(self.ref.namespace, self.ref.name)

    def condition(self, type_: str) -> tuple[str, str] | None:
        for condition in self.status().get("conditions", []):
            if condition.get("type") == type_:
                return str(condition.get("status")), str(condition.get("reason", ""))
        return None

    @property
    def job_key(self) -> str:
        assert self.ref is not None
        return f"{self.ref.namespace}/{job_name(self.ref, FULL_RANGE)}"

    def job_record(self) -> dict[str, Any] | None:
        return self.launcher.record(self.job_key)

    def job_phase(self) -> JobPhase:
        return self.launcher.status(self.job_key).phase

    def launch_dir(self) -> Path | None:
        record = self.job_record()
        if record is None:
            return None
        namespace, _, job_id = self.job_key.partition("/")
        return self.launcher.job_dir(namespace, job_id) / f"launch-{record.get('launchId')}"

    def status_file(self) -> Path | None:
        folder = self.launch_dir()
        return folder / "status.json" if folder is not None else None

    def report(self) -> ProgressReport:
        """The job's own progress report (per shard positions, heartbeats, hops); an empty one
        before the job wrote its first."""
        path = self.status_file()
        try:
            return ProgressReport.read(path) if path is not None else ProgressReport()
        except ProgressError:
            return ProgressReport()

    def log_tail(self, lines: int = 15) -> str:
        folder = self.launch_dir()
        try:
            text = (folder / "job.log").read_text(errors="replace") if folder else ""
        except OSError:
            return ""
        return SCRUBBER.scrub("\n".join(text.splitlines()[-lines:]))

    def stop_job(self) -> None:
        if self.ref is not None:
            self.launcher.stop(self.job_key)
