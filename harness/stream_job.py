"""A streaming job run as `updatestream run` against a cluster, for the hop tests.

The job writes to a Version Stream (on a MariaDB server of its own) and to CDCv2 files, and,
given a memcached server, invalidates its keys (with the fast lane, the sink's default) and,
given a database, mirrors the rows there on the Version Stream's server. It follows the
cluster's Keyspace manifest and reports through its status file; the cluster (the development
cluster, or a local Vitess cluster: anything with a manifest, Secrets and its shards' positions)
reshards under traffic that keeps a ledger; `updatestream verify` then compares every sink with
the ledger, and the mirror with the shards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from updatestream_cli.devcluster.cluster import DevCluster
from updatestream_cli.devcluster.reshard import ReshardOptions, ReshardWorkflow, plan_reshard
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions
from updatestream_cli.manifests import update_stream

from harness.accounts import write_secret
from updatestream import spec
from updatestream.core.gtid import parse_position, position_contains

CLI = str(Path(sys.executable).with_name("updatestream"))


def read_status(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


class StreamCluster(Protocol):
    """What a stream job needs of a cluster: its manifest and Secrets."""

    @property
    def manifest_path(self) -> Path: ...

    @property
    def secrets_dir(self) -> Path: ...


@dataclass
class SinkServer:
    """Where the Version Stream sink writes: host, port and the Secret with its account."""

    host: str
    port: int
    secret: str
    database: str


@dataclass
class StreamJob:
    cluster: StreamCluster
    workdir: Path
    sink: SinkServer
    key_range: str = "-"
    name: str = "hop-feed"
    trigger_seconds: float = 1.0
    extra: Sequence[str] = ()
    memcached: str | None = None  # host:port of a memcached server to invalidate, if any
    mirror_database: str | None = None  # a mirror in this database of the sink's server
    # shard -> its GTID position now (default: the development cluster's servers)
    position: Callable[[str], str] | None = None
    process: subprocess.Popen[bytes] | None = None
    launches: int = 0
    logs: list[Path] = field(default_factory=list)
    # in `workdir`: the status file, the checkpoint, the job's default trace file (Spark's and
    # Python's diagnostic output) and the CDCv2 sink's folder
    status: Path = field(init=False)
    checkpoint: Path = field(init=False)
    trace: Path = field(init=False)
    cdc: Path = field(init=False)

    def __post_init__(self) -> None:
        self.status, self.checkpoint = self.workdir / "status.json", self.workdir / "checkpoint"
        self.trace, self.cdc = self.workdir / "checkpoint.log", self.workdir / "cdc"
        if self.position is None:
            assert isinstance(self.cluster, DevCluster)
            servers = self.cluster
            self.position = lambda shard: servers.server(shard).gtid_position()

    def _position(self, shard: str) -> str:
        assert self.position is not None
        return self.position(shard)

    def write_stream(self, start: dict[str, Any]) -> Path:
        sinks: list[dict[str, Any]] = [
            {
                "type": "versionStream",
                "mysql": {"host": self.sink.host, "port": self.sink.port},
                "database": self.sink.database,
                "credentialsSecret": {"name": self.sink.secret},
            },
            {"type": "cdcv2", "path": str(self.cdc), "allowedLatenessSeconds": 1},
        ]
        if self.memcached is not None:
            sinks.append({"type": "memcached", "servers": [self.memcached]})
        if self.mirror_database is not None:
            sinks.append(
                {
                    "type": "mirror",
                    "mysql": {"host": self.sink.host, "port": self.sink.port},
                    "database": self.mirror_database,
                    "credentialsSecret": {"name": self.sink.secret},
                }
            )
        stream = update_stream(self.name, "commerce", start, sinks, [self.key_range])
        path = self.workdir / "stream.yaml"
        path.write_text(yaml.safe_dump(stream))
        return path

    def write_stream_from_now(self) -> Path:
        """The stream, starting on every serving shard at its current GTID position."""
        serving = spec.load_keyspace(self.cluster.manifest_path).spec.serving_shards
        start = {str(s): self._position(str(s)) for s in serving}
        return self.write_stream({"mode": "gtid", "gtid": start})

    def arguments(self) -> list[str]:
        return [
            CLI, "run",
            "--stream", str(self.workdir / "stream.yaml"),
            "--keyspace", str(self.cluster.manifest_path),
            "--secrets-dir", str(self.cluster.secrets_dir),
            "--checkpoint", str(self.checkpoint),
            "--master", "local[2]",
            "--trigger-seconds", str(self.trigger_seconds),
            "--status-file", str(self.status),
            *self.extra,
        ]  # fmt: skip

    def start(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        self.launches += 1
        log = self.workdir / f"job-{self.launches}.log"
        self.logs.append(log)
        with log.open("w") as out:
            self.process = subprocess.Popen(
                self.arguments(),
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self.process

    def log_tail(self) -> str:
        trace = self.trace.read_text()[-4000:] if self.trace.exists() else ""
        return (self.logs[-1].read_text()[-4000:] if self.logs else "") + trace

    def wait_for(
        self, what: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 300
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = read_status(self.status)
            if status and predicate(status):
                return status
            assert self.process is not None and self.process.poll() is None, (
                f"the job ended while waiting for {what}: {self.log_tail()}"
            )
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {status}"
            time.sleep(0.5)

    def wait_first_batch(self) -> dict[str, Any]:
        return self.wait_for("the first batch", lambda s: (s.get("batchId") or 0) >= 1)

    def wait_exit(self, timeout: float = 300) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def wait_caught_up(self, shards: Sequence[str], timeout: float = 300) -> dict[str, Any]:
        """Every shard delivered up to its current position, and heartbeats from a few seconds
        after now, so CDCv2 has declared every second of the traffic complete."""
        want = {s: self._position(s) for s in shards}
        after = time.time() + 3

        def done(status: dict[str, Any]) -> bool:
            got = status.get("shards", {})
            return all(
                got.get(s, {}).get("position") == want[s]
                and (got[s].get("heartbeatTimestamp") or 0) >= after
                for s in shards
            )

        return self.wait_for(f"positions {want}", done, timeout)

    def wait_delivered(self, shards: Sequence[str], timeout: float = 120) -> dict[str, Any]:
        """Every shard delivered at least up to its position now, while traffic goes on."""
        want = {s: parse_position(self._position(s)) for s in shards}

        def done(status: dict[str, Any]) -> bool:
            got = {s: status.get("shards", {}).get(s, {}).get("position") for s in shards}
            return all(p and position_contains(parse_position(p), want[s]) for s, p in got.items())

        return self.wait_for(f"delivery up to {want}", done, timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def verify(self, ledger: Path) -> dict[str, dict[str, Any]]:
        """`updatestream verify` of both sinks against the traffic's ledger."""
        return self._verify("--ledger", str(ledger), "--status-file", str(self.status))

    def verify_state(self) -> dict[str, dict[str, Any]]:
        """`updatestream verify --table-state` of both sinks: what each holds against the
        shards' rows in the job's key range."""
        return self._verify("--table-state", "--keyspace-manifest", str(self.cluster.manifest_path))

    def _run_verify(self, common: Sequence[str], sink: str, *options: str) -> dict[str, Any]:
        command = [CLI, "verify", *common, "--sink", sink, "--key-range", self.key_range]
        command += ["--secrets-dir", str(self.cluster.secrets_dir), *options, "--json"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode in (0, 1), done.stderr
        return dict(json.loads(done.stdout))

    def verify_mirror(self) -> dict[str, Any]:
        """`updatestream verify --sink mirror`: the mirror against the shards' rows now."""
        assert self.mirror_database is not None
        return self._run_verify(
            (), "mirror",
            "--mysql", f"{self.sink.host}:{self.sink.port}", "--secret", self.sink.secret,
            "--database", self.mirror_database,
            "--keyspace-manifest", str(self.cluster.manifest_path),
        )  # fmt: skip

    def _verify(self, *common: str) -> dict[str, dict[str, Any]]:
        def run(sink: str, *options: str) -> dict[str, Any]:
            return self._run_verify(common, sink, *options)

        reports = {
            "versionstream": run(
                "versionstream",
                "--mysql", f"{self.sink.host}:{self.sink.port}",
                "--secret", self.sink.secret,
                "--database", self.sink.database,
            ),
            "cdcv2": run("cdcv2", "--path", str(self.cdc)),
        }  # fmt: skip
        if self.memcached is not None and "--ledger" in common:
            manifest = ("--keyspace-manifest", str(self.cluster.manifest_path))
            # the shards' rows now, read with the stream's own account (a Vitess keyspace's
            # application account lives in vtgate, not in the tablets' mysqld)
            keyspace = spec.load_keyspace(self.cluster.manifest_path)
            reader = ("--secret", keyspace.spec.shards[0].credentials_secret.name)
            reports["memcached"] = run("memcached", "--servers", self.memcached, *manifest, *reader)
        return reports

    def sink_status(self, kind: str) -> dict[str, Any]:
        """The status file's results of the job's sink of `kind` (e.g. `memcached`)."""
        sinks = read_status(self.status).get("sinks", {})
        return dict(next(v for k, v in sinks.items() if k.startswith(f"{kind}(")))


def verify_state(job: StreamJob) -> dict[str, dict[str, Any]]:
    """`updatestream verify --table-state` of both sinks (see `StreamJob.verify_state`)."""
    return job.verify_state()


def completed_hops(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [hop for hop in status.get("hops", []) if hop.get("completedAt") is not None]


def traffic_generator(
    cluster: DevCluster, ledger: Path, options: TrafficOptions
) -> TrafficGenerator:
    """Traffic through the cluster's manifest, recorded in `ledger`; not started yet."""
    return TrafficGenerator(cluster.manifest_path, cluster.secrets_dir, ledger, options)


def reshard(
    cluster: DevCluster, sources: str, targets: str, options: ReshardOptions | None = None
) -> float:
    """Run a split or merge to the end; returns when the serving map changed (unix seconds)."""
    ReshardWorkflow(
        cluster, plan_reshard(cluster, sources, targets), options or ReshardOptions()
    ).run()
    return float(cluster.keyspace().spec.shard_map_history[-1].at)


def sink_secret(cluster: StreamCluster, name: str, username: str, password: str) -> str:
    return write_secret(cluster.secrets_dir, name, username, password)


def job_from_now(
    cluster: StreamCluster,
    workdir: Path,
    sink: tuple[str, int],
    account: tuple[str, str],
    database: str,
    *,
    secret: str = "hop-sink",
    **options: Any,
) -> StreamJob:
    """A stream job of every serving shard from its current position into CDCv2 files and a
    Version Stream on `sink` (host, port) in `database`, with `account` (username, password)
    as the Secret `secret`."""
    name = sink_secret(cluster, secret, *account)
    job = StreamJob(cluster, workdir, SinkServer(*sink, name, database), **options)
    job.write_stream_from_now()
    return job
