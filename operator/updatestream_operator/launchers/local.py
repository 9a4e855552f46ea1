"""Launching jobs as local processes: `updatestream run ...` with Spark in local mode.

For an operator running outside a cluster, and for the demo. Each job has a directory under
the state directory (`<state>/<namespace>/<job>/`) holding its configuration, its Secrets as
files (0600), a `job.json` with the pid and the metrics port the launcher picked, and one
`launch-<n>/` per launch (status file, checkpoint, log). A job is never started twice:
launching takes a file lock on the job's directory and looks for a live process first, both
through the pid file and by scanning process command lines for the job's directory (which also
finds a process started by an operator killed before it wrote the pid file).

A job launched for in-job hops watches the job directory's `keyspace.yaml`
(`--keyspace-watch`); `publish_keyspace` rewrites it (a temporary file renamed over it, so the
job never reads half a file) whenever the Keyspace the operator observes differs from it.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from updatestream.contract.job_config import JOB_FILE, SNAPSHOT_REQUESTS_FILE
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange
from updatestream.core.shardmap import ShardMap
from updatestream.local_ports import free_port
from updatestream.spec import Keyspace
from updatestream_operator.launchers.launcher import LaunchError, split_key
from updatestream_operator.reconciler.launch_config import (
    KEYSPACE_FILE,
    job_config,
    keyspace_document,
    run_options,
)
from updatestream_operator.reconciler.models import (
    JobInfo,
    JobPhase,
    JobProgress,
    JobSpec,
    JobStatus,
)
from updatestream_operator.reconciler.progress_reader import ProgressError, loads_progress
from updatestream_operator.scrub import SCRUBBER

log = logging.getLogger(__name__)

SecretReader = Callable[[str, str], dict[str, str]]  # (namespace, name) -> key -> value


def _process_start(pid: int) -> str | None:
    """The start time of a process (clock ticks since boot), None if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _processes_using(directory: Path) -> list[int]:
    """Pids whose command line names `directory` (the job's own processes)."""
    marker = str(directory) + os.sep
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and _process_start(int(entry.name)) is not None:
            found.append(int(entry.name))
    return found


def _launch_dir_of(pid: int, directory: Path) -> Path | None:
    """The `launch-<n>` directory a job process writes its status file into."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return None
    if "--config" not in args[:-1]:
        return None
    config_file = Path(args[args.index("--config") + 1])
    return config_file.parent if config_file.parent.parent == directory else None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    _write_atomically(path, json.dumps(data, sort_keys=True))


def _write_atomically(path: Path, text: str) -> None:
    """Replace `path` by a whole new file: a reader sees the old content or the new."""
    # kopf runs sync handlers on a thread pool: each writer gets its own temp file
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _replace_if_changed(path: Path, text: str) -> bool:
    """Write `text` to `path` (atomically) unless the file already holds it; True if written."""
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    _write_atomically(path, text)
    return True


class LocalLauncher:
    """Jobs as local processes, tracked in a state directory."""

    name = "local"

    def __init__(
        self,
        state_dir: Path,
        *,
        command: Sequence[str] | None = None,
        secrets_dir: Path | None = None,
        secret_reader: SecretReader | None = None,
        stop_timeout: float = 30.0,
    ) -> None:
        self.state_dir = state_dir
        self.command = list(command or [sys.executable, "-m", "updatestream_cli"])
        self.secrets_dir = secrets_dir
        self.secret_reader = secret_reader
        self.stop_timeout = stop_timeout
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def job_dir(self, namespace: str, job_id: str) -> Path:
        return self.state_dir / namespace / job_id

    @contextlib.contextmanager
    def _locked(self, directory: Path) -> Iterator[None]:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with (directory / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _meta(self, directory: Path) -> dict[str, Any] | None:
        """The job's record; rebuilt from its launch's record when the process runs but the
        operator was killed before writing `job.json`."""
        try:
            data = json.loads((directory / "job.json").read_text())
            return data if isinstance(data, dict) else None
        except (OSError, ValueError):
            pass
        for pid in _processes_using(directory):
            launch_dir = _launch_dir_of(pid, directory)
            try:
                data = json.loads((launch_dir / "meta.json").read_text()) if launch_dir else None
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                data |= {"pid": pid, "pidStart": _process_start(pid)}
                _write_json(directory / "job.json", data)
                return data
        return None

    def _alive(self, directory: Path, meta: dict[str, Any] | None) -> list[int]:
        for pid, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[pid]
        pids = set(_processes_using(directory))
        if meta and meta.get("pid") and _process_start(int(meta["pid"])) == meta.get("pidStart"):
            pids.add(int(meta["pid"]))
        return sorted(pids)

    # -- launch -----------------------------------------------------------------------------

    def _secrets(self, job: JobSpec, directory: Path) -> Path:
        if self.secrets_dir is not None:
            return self.secrets_dir
        if self.secret_reader is None:
            raise LaunchError(
                f"job {job.key} needs Secrets {', '.join(job.secret_names)} but the local "
                "launcher has neither a secrets directory nor API access to read them; "
                "start the operator with --secrets-dir"
            )
        root = directory / "secrets"
        for name in job.secret_names:
            folder = root / name
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            for key, value in self.secret_reader(job.stream.namespace, name).items():
                path = folder / key
                path.touch(mode=0o600, exist_ok=True)
                path.write_text(value)
        return root

    def launch(self, job: JobSpec) -> None:
        directory = self.job_dir(job.stream.namespace, job.job_id)
        with self._locked(directory):
            meta = self._meta(directory)
            if self._alive(directory, meta):
                log.info("job %s is running already; not starting it again", job.key)
                return
            _write_json(directory / "owner.json", {"streamUid": job.stream.uid})
            secrets = self._secrets(job, directory)
            launch_dir = directory / f"launch-{job.launch_id}"
            launch_dir.mkdir(exist_ok=True)
            metrics_port = free_port()
            config = job_config(
                job,
                secrets_dir=str(secrets),
                checkpoint=str(launch_dir / "checkpoint"),
                metrics_port=metrics_port,
                status_file=str(launch_dir / "status.json"),
                keyspace_watch=str(directory / KEYSPACE_FILE),
                snapshot_requests=str(directory / SNAPSHOT_REQUESTS_FILE),
            )
            # the Keyspace the job watches lives beside its launches; the configuration is
            # the launch's own, so the job's command line names its launch directory
            _write_atomically(directory / KEYSPACE_FILE, keyspace_document(job.keyspace))
            requests = job.spec.snapshot_requests_text()
            _write_atomically(directory / SNAPSHOT_REQUESTS_FILE, requests)
            _write_atomically(launch_dir / JOB_FILE, config.dump())
            arguments = ["run", *run_options(str(launch_dir))]
            meta = {
                "streamUid": job.stream.uid,
                "keyRange": job.key_range.name,
                "shardMap": str(job.shard_map),
                "specHash": job.spec_hash,
                "launchId": job.launch_id,
                "inJobHops": job.in_job_hops,
                "metricsPort": metrics_port,
            }
            _write_json(launch_dir / "meta.json", meta)
            with (launch_dir / "job.log").open("ab") as out:
                child = subprocess.Popen(
                    [*self.command, *arguments],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # outlives an operator restart; stopped as a group
                    cwd=launch_dir,
                )
            self._children[child.pid] = child
            _write_json(
                directory / "job.json",
                meta | {"pid": child.pid, "pidStart": _process_start(child.pid)},
            )
            log.info("started job %s (launch %s) as pid %s", job.key, job.launch_id, child.pid)

    def record(self, key: str) -> dict[str, Any] | None:
        """The job's record (`job.json`): pid, launch, key range, metrics port; None if none."""
        namespace, job_id = split_key(key)
        return self._meta(self.job_dir(namespace, job_id))

    # -- stop -------------------------------------------------------------------------------

    def stop(self, key: str) -> bool:
        namespace, job_id = split_key(key)
        directory = self.job_dir(namespace, job_id)
        if not directory.exists():
            return True
        with self._locked(directory):
            pids = self._alive(directory, self._meta(directory))
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, sig)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
                deadline = time.monotonic() + (self.stop_timeout if sig == signal.SIGTERM else 10)
                while pids and time.monotonic() < deadline:
                    for pid, child in list(self._children.items()):
                        if child.poll() is not None:
                            del self._children[pid]
                    pids = [p for p in pids if _process_start(p) is not None]
                    time.sleep(0.1)
                if not pids:
                    break
            (directory / "job.json").unlink(missing_ok=True)
            return not pids

    # -- list, status, cleanup ----------------------------------------------------------------

    def _info(self, namespace: str, directory: Path) -> JobInfo | None:
        meta = self._meta(directory)
        if meta is None:
            return None
        try:
            key_range = KeyRange.parse(str(meta.get("keyRange", "-")))
            shard_map = ShardMap.parse(str(meta.get("shardMap", "")))
        except UpdateStreamError:
            log.warning(
                "ignoring job directory %s: its record names no key range or shard map", directory
            )
            return None
        alive = self._alive(directory, meta)
        message = ""
        if not alive:
            message = self._log_tail(directory / f"launch-{meta.get('launchId')}" / "job.log")
        return JobInfo(
            job_id=directory.name,
            namespace=namespace,
            stream_uid=str(meta.get("streamUid", "")),
            key_range=key_range,
            shard_map=shard_map,
            spec_hash=str(meta.get("specHash", "")),
            launch_id=int(meta.get("launchId", 0)),
            phase=JobPhase.RUNNING if alive else JobPhase.FAILED,
            message=message,
            in_job_hops=meta.get("inJobHops") is True,
        )

    @staticmethod
    def _log_tail(path: Path) -> str:
        try:
            lines = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "the process ended"
        return SCRUBBER.scrub(" | ".join(lines[-3:]))[:600] or "the process ended"

    def list(
        self, namespace: str | None = None, stream_uid: str | None = None
    ) -> builtins.list[JobInfo]:
        roots = [self.state_dir / namespace] if namespace else self._namespaces()
        jobs = []
        for root in roots:
            if not root.is_dir():
                continue
            for directory in sorted(root.iterdir()):
                info = self._info(root.name, directory) if directory.is_dir() else None
                if info is not None and (stream_uid is None or info.stream_uid == stream_uid):
                    jobs.append(info)
        return jobs

    def _namespaces(self) -> builtins.list[Path]:
        return sorted(p for p in self.state_dir.iterdir()) if self.state_dir.is_dir() else []

    def status(self, key: str) -> JobStatus:
        namespace, job_id = split_key(key)
        directory = self.job_dir(namespace, job_id)
        info = self._info(namespace, directory)
        return JobStatus(
            job_id,
            info.phase if info else JobPhase.ABSENT,
            info.message if info else "",
            self._progress(directory),
        )

    def _progress(self, directory: Path) -> JobProgress | None:
        launches = sorted(
            (int(p.name.split("-", 1)[1]), p)
            for p in directory.glob("launch-*")
            if p.name.split("-", 1)[1].isdigit()
        )
        if not launches:
            return None
        launch_id, launch_dir = launches[-1]
        path = launch_dir / "status.json"
        try:
            text = path.read_text()
        except OSError:
            return JobProgress(launch_id=launch_id)
        try:
            return loads_progress(text, launch_id=launch_id, source=str(path))
        except ProgressError as exc:
            log.warning("%s", exc)  # a half-written file: the next read gets the whole
            return JobProgress(launch_id=launch_id)

    def publish_keyspace(self, job: JobInfo, keyspace: Keyspace) -> None:
        """Rewrite the job's keyspace file when the Keyspace differs from it."""
        path = self.job_dir(job.namespace, job.job_id) / KEYSPACE_FILE
        if not path.parent.is_dir():
            return  # the job is gone
        if _replace_if_changed(path, keyspace_document(keyspace)):
            log.info("showed job %s the current Keyspace %s", job.key, keyspace.metadata.name)

    def publish_snapshot_requests(self, job: JobInfo, text: str) -> None:
        """Rewrite the job's snapshot requests file when the stream's requests differ from it:
        the running job reads it at its next batch."""
        path = self.job_dir(job.namespace, job.job_id) / SNAPSHOT_REQUESTS_FILE
        if path.parent.is_dir() and _replace_if_changed(path, text):
            log.info("showed job %s the stream's snapshot requests", job.key)

    def cleanup(self, namespace: str, stream_uid: str) -> None:
        root = self.state_dir / namespace
        if not root.is_dir():
            return
        for directory in root.iterdir():
            try:
                owner = json.loads((directory / "owner.json").read_text())
            except (OSError, ValueError):
                continue
            if owner.get("streamUid") == stream_uid:
                self.stop(f"{namespace}/{directory.name}")
                shutil.rmtree(directory, ignore_errors=True)
