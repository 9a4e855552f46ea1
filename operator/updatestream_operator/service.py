"""The stream service: observe, decide (the pure `reconcile`), write status, act; repeat.

One lock per UpdateStream: kopf runs a stream's timer and its change handlers concurrently,
and the Keyspace handler reconciles streams too, so every reconciliation of one stream takes
the lock, reads the stream fresh from the API, and writes its status itself (inside the lock,
before acting) rather than leaving the write to kopf after the handler returns, when another
reconciliation could already have read the older status.

Once a step needs no action, the jobs that hop in place are shown the Keyspace just observed
(`Launcher.publish_keyspace`): after the status recording their hop is written, so the record
comes first. Every reconciliation does it, so a Keyspace change missed while the operator was
down reaches them too.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from updatestream.core.keyrange import KeyRange
from updatestream.spec import (
    Keyspace,
    SpecError,
    UpdateStream,
    UpdateStreamSpec,
    parse_keyspace,
    parse_update_stream,
)
from updatestream_operator.launchers.launcher import Launcher, LaunchError
from updatestream_operator.metrics_book import MetricsBook
from updatestream_operator.reconciler import reconcile as rec
from updatestream_operator.reconciler.models import (
    JobInfo,
    JobProgress,
    Note,
    StreamRef,
    StreamStatus,
)
from updatestream_operator.reconciler.naming import job_name
from updatestream_operator.reconciler.progress_reader import ProgressError
from updatestream_operator.scrub import SCRUBBER

log = logging.getLogger(__name__)

MAX_STEPS = 6  # a hop takes three steps (stop, plan and launch, complete)
LAUNCH_BACKOFF = (20.0, 300.0)  # seconds before retrying a failed launch: first, at most


class ObjectStore(Protocol):
    """Where the service reads UpdateStreams and Keyspaces and writes status and Events: the
    API server (`storage.KubeStore`), or local files (`filestore.FileStore`, the demo)."""

    def get_stream(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_keyspace(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list_streams(self, namespace: str) -> list[dict[str, Any]]: ...

    def patch_stream_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...

    def post_event(self, ref: StreamRef, note: Note) -> None: ...


class StreamGone(Exception):
    """The UpdateStream was deleted meanwhile: nothing to reconcile."""


def stream_ref(stream: UpdateStream) -> StreamRef:
    extra = stream.metadata.model_extra or {}
    return StreamRef(
        namespace=stream.metadata.namespace or "default",
        name=stream.metadata.name,
        uid=str(extra.get("uid", "")),
        generation=int(extra.get("generation", 0) or 0),
    )


def _status_patch(status: StreamStatus) -> dict[str, Any]:
    """The status as a merge patch: fields that became empty are removed (null)."""
    dumped = status.dump()
    fields = (f.alias or name for name, f in StreamStatus.model_fields.items())
    return {key: dumped.get(key) for key in fields}


class StreamService:
    def __init__(
        self,
        store: ObjectStore,
        launchers: Mapping[str, Launcher],
        default_launcher: str,
        metrics: MetricsBook | None = None,
        *,
        max_restarts: int = 3,
        in_job_hops: bool = True,
        in_job_hop_timeout: float = 120.0,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        if default_launcher not in launchers:
            raise ValueError(f"unknown launcher {default_launcher!r}")
        self.store = store
        self.launchers = dict(launchers)
        self.default_launcher = default_launcher
        self.metrics = metrics or MetricsBook()
        self.max_restarts = max_restarts
        self.in_job_hops = in_job_hops
        self.in_job_hop_timeout = in_job_hop_timeout
        self.clock = clock
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._backoff: dict[tuple[str, str], tuple[float, float]] = {}

    def _backing_off(self, namespace: str, name: str) -> bool:
        until, _ = self._backoff.get((namespace, name), (0.0, 0.0))
        return time.monotonic() < until

    def _back_off(self, namespace: str, name: str) -> None:
        _, delay = self._backoff.get((namespace, name), (0.0, 0.0))
        delay = min(max(delay * 2, LAUNCH_BACKOFF[0]), LAUNCH_BACKOFF[1])
        self._backoff[(namespace, name)] = (time.monotonic() + delay, delay)

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    # -- observing ----------------------------------------------------------------------------

    def _read_stream(self, namespace: str, name: str) -> tuple[UpdateStream, dict[str, Any]]:
        raw = self.store.get_stream(namespace, name)
        if raw is None or raw.get("metadata", {}).get("deletionTimestamp"):
            raise StreamGone(f"{namespace}/{name}")
        stream = parse_update_stream(
            {k: raw[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in raw},
            source=f"UpdateStream {namespace}/{name}",
        )
        return stream, raw.get("status") or {}

    def _read_keyspace(self, namespace: str, name: str) -> tuple[Keyspace | None, str | None]:
        raw = self.store.get_keyspace(namespace, name)
        if raw is None:
            return None, None
        try:
            return parse_keyspace(
                {k: raw[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in raw},
                source=f"Keyspace {namespace}/{name}",
            ), None
        except SpecError as exc:
            return None, str(exc)

    def jobs(self, namespace: str, stream_uid: str) -> list[JobInfo]:
        found = []
        for name, launcher in self.launchers.items():
            for job in launcher.list(namespace, stream_uid):
                found.append(dataclasses.replace(job, launcher=name))
        return found

    def _progress(
        self,
        ref: StreamRef,
        status: StreamStatus,
        key_ranges: list[KeyRange],
        launcher_name: str,
    ) -> dict[KeyRange, JobProgress]:
        progress = {}
        for key_range in key_ranges:
            entry = status.key_range(key_range)
            name = (entry.launcher if entry and entry.launcher else None) or launcher_name
            launcher = self.launchers.get(name, self.launchers[launcher_name])
            try:
                report = launcher.status(f"{ref.namespace}/{job_name(ref, key_range)}").progress
            except ProgressError as exc:
                log.warning("ignoring a progress report of %s: %s", ref.name, exc)
                continue
            if report is not None:
                progress[key_range] = report
        return progress

    # -- acting -----------------------------------------------------------------------------

    def _execute(self, ref: StreamRef, actions: tuple[rec.Action, ...], launcher_name: str) -> None:
        for action in sorted(actions, key=lambda a: isinstance(a, rec.Launch)):
            if isinstance(action, rec.Stop):
                job = action.job
                launcher = self.launchers.get(job.launcher) or self.launchers[launcher_name]
                log.info("stopping job %s of %s: %s", job.key, ref.name, action.reason)
                launcher.stop(job.key)
            else:
                log.info("launching job %s of %s", action.job.key, ref.name)
                try:
                    self.launchers[launcher_name].launch(action.job)
                except LaunchError as exc:
                    note = Note("Warning", "LaunchFailed", str(exc))
                    self.store.post_event(ref, note)
                    raise

    def _publish_keyspace(self, jobs: tuple[JobInfo, ...], keyspace: Keyspace) -> None:
        for job in jobs:
            launcher = self.launchers.get(job.launcher)
            if launcher is not None:
                launcher.publish_keyspace(job, keyspace)

    def _publish_requests(self, jobs: tuple[JobInfo, ...], spec: UpdateStreamSpec) -> None:
        text = spec.snapshot_requests_text()
        for job in jobs:
            launcher = self.launchers.get(job.launcher)
            if launcher is not None:
                launcher.publish_snapshot_requests(job, text)

    def reconcile(self, namespace: str, name: str) -> StreamStatus | None:
        """Bring one stream to its desired state; None if it is gone or being deleted."""
        with self._lock(namespace, name):
            decision: rec.Decision | None = None
            ref: StreamRef | None = None
            for _ in range(MAX_STEPS):
                try:
                    observed, settings, raw_status = self._observe(namespace, name)
                except StreamGone:
                    return None
                ref = observed.stream
                decision = rec.reconcile(observed, settings)
                if self._backing_off(namespace, name) and any(
                    isinstance(a, rec.Launch) for a in decision.actions
                ):
                    break  # a launch failed moments ago: try again after the backoff
                self._record(ref, decision, raw_status)
                if not decision.actions:
                    if observed.keyspace is not None:
                        self._publish_keyspace(decision.keyspace_watchers, observed.keyspace)
                    self._publish_requests(decision.keyspace_watchers, observed.spec)
                    break
                self._act(ref, decision.actions, settings.launcher)
            if decision is not None and ref is not None:
                self.metrics.update(ref, decision.status)
                return decision.status
            return None

    def _observe(
        self, namespace: str, name: str
    ) -> tuple[rec.Observed, rec.Settings, dict[str, Any]]:
        """What one step looks at, the settings it decides with, and the status as read."""
        stream, raw_status = self._read_stream(namespace, name)
        ref = stream_ref(stream)
        spec = stream.spec
        launcher_name = spec.spark.launcher or self.default_launcher
        if launcher_name not in self.launchers:
            raise LaunchError(
                f"spec.spark.launcher {launcher_name!r} is not available here; "
                f"use one of {', '.join(self.launchers)}"
            )
        status = StreamStatus.parse(raw_status)
        keyspace, keyspace_error = self._read_keyspace(namespace, spec.keyspace)
        wanted = list(spec.key_ranges)
        observed = rec.Observed(
            stream=ref,
            spec=spec,
            keyspace=keyspace,
            status=status,
            jobs=self.jobs(namespace, ref.uid),
            progress=self._progress(ref, status, wanted, launcher_name),
            now=self.clock(),
            keyspace_error=keyspace_error,
        )
        settings = rec.Settings(
            launcher=launcher_name,
            max_restarts=self.max_restarts,
            in_job_hops=self.in_job_hops,
            in_job_hop_timeout=self.in_job_hop_timeout,
        )
        return observed, settings, raw_status

    def _record(self, ref: StreamRef, decision: rec.Decision, raw_status: dict[str, Any]) -> None:
        """Write the decided status (when it changed), then post the step's Events."""
        patch = _status_patch(decision.status)
        if SCRUBBER.scrub_any(patch) != {k: raw_status.get(k) for k in patch}:
            self.store.patch_stream_status(ref.namespace, ref.name, patch)
        for note in decision.notes:
            log.info("%s/%s: %s: %s", ref.namespace, ref.name, note.reason, note.message)
            self.store.post_event(ref, note)

    def _act(self, ref: StreamRef, actions: tuple[rec.Action, ...], launcher_name: str) -> None:
        """Take the step's actions; a failed launch backs the stream off before the next."""
        try:
            self._execute(ref, actions, launcher_name)
        except LaunchError:
            self._back_off(ref.namespace, ref.name)
            raise
        self._backoff.pop((ref.namespace, ref.name), None)

    def streams_of_keyspace(self, namespace: str, keyspace: str) -> list[str]:
        return [
            item["metadata"]["name"]
            for item in self.store.list_streams(namespace)
            if (item.get("spec") or {}).get("keyspace") == keyspace
        ]

    def cleanup(self, namespace: str, name: str, uid: str) -> bool:
        """Stop every job of a deleted stream and remove what they left; True when done."""
        with self._lock(namespace, name):
            done = True
            for job in self.jobs(namespace, uid):
                log.info("stopping job %s: the UpdateStream is being deleted", job.key)
                done = self.launchers[job.launcher].stop(job.key) and done
            if done:
                for launcher in self.launchers.values():
                    launcher.cleanup(namespace, uid)
                self.metrics.forget(namespace, name)
            return done
