"""The demo's steps, from an empty directory to a verdict per sink.

1. a keyspace of two shards (`-80`, `80-`): a development cluster of MariaDB or MySQL 8 shards
   (`flavor`), or a real local Vitess on MySQL 8 (`engine`); a memcached and a server for the
   Version Stream and the mirror (`sink_flavor`, by default the shards');
2. one UpdateStream into the four sinks, launched by the operator's service and local
   launcher (`driver.OperatorDriver`), until its job delivers;
3. live traffic with a ledger (through vtgate on Vitess); after `split_after` seconds a live
   split of `-80` into `-40,40-80` (the development cluster's, or Vitess's `Reshard` up to
   `complete`); the new shards hold copies of changes the stream already delivered; the job hops
   inside its query and the operator records the hop; traffic runs on until `seconds` (and a
   few seconds past the hop);
4. traffic stops, the stream catches up, and `updatestream verify` checks each sink against the
   ledger, and the mirror against the shards' rows.

Everything started is stopped at the end, unless `keep`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from updatestream_operator.reconciler.models import JobPhase, Note, StreamRef

from updatestream import spec
from updatestream_cli.demo import servers as srv
from updatestream_cli.demo.driver import (
    OperatorDriver,
    caught_up,
    delivered_events,
    stream_manifest,
)
from updatestream_cli.demo.engines import Engine
from updatestream_cli.demo.errors import DemoError
from updatestream_cli.devcluster.local_server import ServerFlavor
from updatestream_cli.devcluster.traffic import TrafficGenerator, TrafficOptions

STREAM = "demo-feed"
SPLIT_FROM, SPLIT_TO = "-80", "-40,40-80"
SINKS = ("memcached", "versionstream", "cdcv2", "mirror")
AFTER_HOP_SECONDS = 3.0  # traffic keeps running this long after the hop, onto the new shards


class Reporter(Protocol):
    def begin(self, text: str) -> None: ...  # a step starts

    def update(self, text: str) -> None: ...  # what the current step is at

    def end(self, text: str) -> None: ...  # the current step is done

    def line(self, text: str) -> None: ...  # a line of its own: an address, an Event


@dataclass
class DemoOptions:
    directory: Path = Path(".updatestream") / "demo"
    rate: float = 200.0  # row changes per second
    seconds: float = 30.0  # of traffic
    split_after: float = 8.0  # seconds of traffic before the split starts
    keep: bool = False
    seed: int | None = None
    timeout: float = 300.0  # for each wait
    flavor: ServerFlavor = "mariadb"  # the shards: MariaDB or MySQL 8
    engine: Engine = "devcluster"  # or a real local Vitess (MySQL 8 tablets)
    sink_flavor: ServerFlavor | None = None  # the Version Stream's and mirror's (default: same)


@dataclass
class DemoResult:
    sinks: dict[str, dict[str, Any]]
    hops: list[dict[str, Any]]
    events: int
    elapsed_s: float
    rows: int = 0  # row changes the traffic committed
    metrics_url: str = ""
    exit_codes: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.exit_codes.values())

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ("sinks", "hops", "events", "elapsed_s")}


class Demo:
    def __init__(self, options: DemoOptions, reporter: Reporter) -> None:
        self.options = options
        self.reporter = reporter
        self.directory = options.directory.absolute()
        self.ledger = self.directory / "ledger.jsonl"  # the traffic's
        self.cdc = self.directory / "cdc"  # the CDCv2 sink's files
        shard_flavor: ServerFlavor = "mysql" if options.engine == "vitess" else options.flavor
        self.servers = srv.DemoServers(
            self.directory, shard_flavor, options.sink_flavor or shard_flavor, options.engine
        )
        self.driver: OperatorDriver | None = None
        self.traffic: TrafficGenerator | None = None
        self.metrics_url = ""

    def run(self) -> DemoResult:
        began = time.monotonic()
        try:
            self._set_up()
            self._launch()
            rows = self._traffic_and_split()
            self._catch_up()
            codes, reports = self._verify()
            hops = self._hops()
            events = delivered_events(self._driver.report())
        finally:
            self._finish()
        return DemoResult(
            sinks=reports,
            hops=hops,
            events=events,
            elapsed_s=round(time.monotonic() - began, 1),
            rows=rows,
            metrics_url=self.metrics_url,
            exit_codes=codes,
        )

    @property
    def _driver(self) -> OperatorDriver:
        assert self.driver is not None
        return self.driver

    # -- 1. servers ---------------------------------------------------------------------------

    def _set_up(self) -> None:
        report = self.reporter
        what = "a local Vitess" if self.options.engine == "vitess" else "a development cluster"
        report.begin(f"starting {what} in {self.directory}")
        srv.purge(self.directory)
        report.end(self.servers.start_keyspace("-80,80-"))
        report.begin("starting memcached and the Version Stream's server")
        cache = self.servers.start_memcached()
        sink = self.servers.start_sink()
        report.end(f"memcached on {cache.address}, Version Stream {sink.program} on {sink.address}")

    # -- 2. the stream ------------------------------------------------------------------------

    def _on_event(self, ref: StreamRef, note: Note) -> None:
        if note.reason in ("Launched", "HopStarted", "HopCompleted") or note.type == "Warning":
            self.reporter.line(f"operator Event {note.reason}: {note.message}")

    def _launch(self) -> None:
        report, keyspace = self.reporter, self.servers.keyspace
        assert self.servers.memcached is not None and self.servers.sink is not None
        report.begin("launching the UpdateStream through the operator's local launcher")
        self.driver = OperatorDriver(
            srv.operator_dir(self.directory),
            {keyspace.keyspace_name: keyspace.manifest_path},
            keyspace.secrets_dir,
            on_event=self._on_event,
        )
        start = keyspace.positions()
        sinks: list[dict[str, Any]] = [
            {"type": "memcached", "servers": [self.servers.memcached.address]},
            {
                "type": "versionStream",
                "mysql": {"host": self.servers.sink.host, "port": self.servers.sink.port},
                "database": srv.SINK_DATABASE,
                "credentialsSecret": {"name": srv.SINK_SECRET},
            },
            {"type": "cdcv2", "path": str(self.cdc), "allowedLatenessSeconds": 1},
            {
                "type": "mirror",
                "mysql": {"host": self.servers.sink.host, "port": self.servers.sink.port},
                "database": srv.MIRROR_DATABASE,
                "credentialsSecret": {"name": srv.SINK_SECRET},
            },
        ]
        self._driver.apply(stream_manifest(STREAM, keyspace.keyspace_name, start, sinks))
        self._driver.start()
        record = self._wait("the operator to launch the job", self._driver.job_record)
        self.servers.record(job=self._driver.job_key, jobPid=record.get("pid"))
        self.metrics_url = f"http://127.0.0.1:{record['metricsPort']}/metrics"
        report.line(f"job {self._driver.job_key} runs as pid {record['pid']}")
        report.line(f"Prometheus metrics of the job: {self.metrics_url}")
        report.update("waiting for Spark to start and the job's first batch")

        def streaming() -> bool:
            shards = self._driver.report().shards
            return self._driver.condition("Ready") == ("True", "Streaming") and all(
                s in shards and shards[s].token is not None for s in start
            )

        self._wait("the job's first batch", streaming)
        report.end(f"UpdateStream {STREAM} streaming from {', '.join(start)} (job {record['pid']})")

    # -- 3. traffic, split, hop ---------------------------------------------------------------

    def _live(self, prefix: str = "") -> str:
        rows = self.traffic.stats.rows if self.traffic is not None else 0
        report = self._driver.report()
        lags = [shard.lag_seconds for shard in report.shards.values()]
        return (
            f"{prefix}traffic {rows:,} row changes · stream {delivered_events(report):,} events "
            f"delivered · lag {max(lags, default=0):.1f}s · reading {report.shard_map or '?'}"
        )

    def _traffic_and_split(self) -> int:
        options, report = self.options, self.reporter
        report.begin(f"live traffic at {options.rate:g} row changes/s, ledger {self.ledger}")
        self.traffic = self.servers.keyspace.traffic(
            self.ledger, TrafficOptions(rate=options.rate, seed=options.seed)
        ).start()
        began = time.monotonic()
        self._sleep_until(began + options.split_after)
        report.end(f"live traffic at {options.rate:g} row changes/s")
        self._split()
        self._await_hop()
        report.begin("traffic onto the new shards")
        self._sleep_until(max(began + options.seconds, time.monotonic() + AFTER_HOP_SECONDS))
        stats = self.traffic.stop()
        self.traffic = None
        by_shard = ", ".join(f"{k}: {v:,}" for k, v in sorted(stats.by_shard.items()))
        report.end(f"traffic stopped: {stats.rows:,} row changes in {stats.transactions:,} tx")
        report.line(f"row changes per shard: {by_shard}")
        return stats.rows

    def _split(self) -> None:
        """The live split, in a thread of its own while the traffic runs; its phases are shown."""
        report, keyspace = self.reporter, self.servers.keyspace
        report.begin(f"live split {SPLIT_FROM} -> {SPLIT_TO}")
        split_error: list[BaseException] = []
        phase = ["starting"]

        def split() -> None:
            try:
                keyspace.reshard(SPLIT_FROM, SPLIT_TO, lambda text: phase.__setitem__(0, text))
            except BaseException as exc:
                split_error.append(exc)

        worker = threading.Thread(target=split, name="split", daemon=True)
        worker.start()
        self._wait(
            "the split",
            lambda: not worker.is_alive(),
            live=lambda: f"split {SPLIT_FROM} -> {SPLIT_TO}: {phase[0]} · ",
        )
        if split_error:
            raise DemoError(f"the split failed: {split_error[0]}")
        serving = ",".join(spec.load_keyspace(keyspace.manifest_path).spec.serving_shards)
        report.end(f"live split done: serving {serving}")

    def _await_hop(self) -> None:
        report = self.reporter
        report.begin("hop: the running job moves to the new shards")

        def hopped() -> bool:
            done = self._driver.condition("Hopping") == ("False", "HopCompleted")
            return done and bool(self._driver.status().get("hopCount"))

        self._wait("the hop", hopped, live=lambda: "")
        hop = self._driver.status()["hops"][-1]
        how = "inside the running job" if hop["method"] == "InJob" else "by relaunching the job"
        report.end(
            f"hop {','.join(hop['fromShards'])} -> {','.join(hop['toShards'])} {how}, "
            f"{hop['durationSeconds']:.1f}s"
        )

    # -- 4. catch up and verify ---------------------------------------------------------------

    def _catch_up(self) -> None:
        report = self.reporter
        report.begin("letting the stream catch up")
        positions = self.servers.keyspace.positions()
        after = time.time() + 3
        self._wait(
            "the stream to catch up",
            lambda: caught_up(self._driver.report(), positions, after),
            live=lambda: "",
        )
        self._driver.reconcile()  # the operator folds the job's final numbers
        self._driver.stop()
        report.end(f"caught up: {delivered_events(self._driver.report()):,} events delivered")

    def _verify_command(self, sink: str) -> list[str]:
        keyspace = self.servers.keyspace
        assert self.servers.memcached is not None and self.servers.sink is not None
        status_file = self._driver.status_file()
        common = ["--ledger", str(self.ledger), "--status-file", str(status_file), "--json"]
        options = {
            "memcached": [
                "--servers", self.servers.memcached.address,
                "--keyspace-manifest", str(keyspace.manifest_path),
                "--secrets-dir", str(keyspace.secrets_dir),
                # the shards' rows now, with the shards' own account (a Vitess keyspace's
                # application account lives in vtgate, not in the tablets' mysqld)
                "--secret", self._shard_secret(),
            ],
            "versionstream": [
                "--mysql", self.servers.sink.address,
                "--secrets-dir", str(keyspace.secrets_dir),
                "--secret", srv.SINK_SECRET,
                "--database", srv.SINK_DATABASE,
            ],
            "cdcv2": ["--path", str(self.cdc)],
            "mirror": [
                "--mysql", self.servers.sink.address,
                "--secrets-dir", str(keyspace.secrets_dir),
                "--secret", srv.SINK_SECRET,
                "--database", srv.MIRROR_DATABASE,
                "--keyspace-manifest", str(keyspace.manifest_path),
            ],
        }[sink]  # fmt: skip
        return [
            sys.executable,
            "-m",
            "updatestream_cli",
            "verify",
            "--sink",
            sink,
            *options,
            *common,
        ]

    def _shard_secret(self) -> str:
        keyspace = spec.load_keyspace(self.servers.keyspace.manifest_path)
        return keyspace.spec.shards[0].credentials_secret.name

    def _verify(self) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
        codes: dict[str, int] = {}
        reports: dict[str, dict[str, Any]] = {}
        for sink in SINKS:
            self.reporter.begin(f"updatestream verify --sink {sink}")
            done = subprocess.run(
                self._verify_command(sink), capture_output=True, text=True, timeout=600
            )
            if done.returncode not in (0, 1):
                raise DemoError(f"verify --sink {sink} could not run: {done.stderr.strip()}")
            codes[sink], reports[sink] = done.returncode, json.loads(done.stdout)
            verdict = "clean" if done.returncode == 0 else "FINDINGS"
            self.reporter.end(f"verified {sink}: {verdict}")
        return codes, reports

    def _hops(self) -> list[dict[str, Any]]:
        return [
            {
                "from": hop.get("fromShards", []),
                "to": hop.get("toShards", []),
                "duration_s": hop.get("durationSeconds"),
                "duplicates_dropped": hop.get("duplicatesDropped", 0),
            }
            for hop in self._driver.status().get("hops", [])
        ]

    # -- waiting and stopping -----------------------------------------------------------------

    def _check_running(self) -> None:
        if self.traffic is not None and self.traffic.error is not None:
            raise DemoError(f"the traffic generator failed: {self.traffic.error}")
        if self.driver is None or self.driver.ref is None:
            return
        record = self.driver.job_record()
        if record is not None and self.driver.job_phase() is JobPhase.FAILED:
            raise DemoError(
                f"the streaming job ended; its log ({self.driver.launch_dir()}/job.log) ends "
                f"with:\n{self.driver.log_tail()}"
            )

    def _wait(
        self,
        what: str,
        check: Callable[[], Any],
        *,
        live: Callable[[], str] | None = None,
        step: float = 0.5,
    ) -> Any:
        """Poll `check` until it returns something truthy; fail when a part ended or after
        the timeout. `live` gives a prefix for the live figures shown meanwhile."""
        deadline = time.monotonic() + self.options.timeout
        while True:
            found = check()
            if found:
                return found
            self._check_running()
            if live is not None:
                self.reporter.update(self._live(live()))
            if time.monotonic() > deadline:
                error = self.driver.error if self.driver is not None else None
                why = f" (the operator's last error: {error})" if error else ""
                raise DemoError(
                    f"timed out after {self.options.timeout:.0f}s waiting for {what}{why}"
                )
            time.sleep(step)

    def _sleep_until(self, moment: float) -> None:
        while time.monotonic() < moment:
            self._check_running()
            self.reporter.update(self._live())
            time.sleep(min(0.5, max(0.0, moment - time.monotonic())))

    def _finish(self) -> None:
        if self.traffic is not None:
            with contextlib.suppress(Exception):  # a step failed already; stop what runs
                self.traffic.stop()
            self.traffic = None
        if self.driver is not None:
            self.driver.stop()
        if self.options.keep:
            return
        if self.driver is not None:
            self.driver.stop_job()
        self.servers.stop()
