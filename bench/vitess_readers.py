"""The two peers of `bench-vitess-peers`, each a reader of vtgate's VStream that saves its place.

- `VStreamReader`: the plain client (`tools/vitess/cmd/vstream-client`), one process per start,
  its VGTID saved after each transaction in a file it resumes from.
- `DebeziumVitessReader`: Debezium's Vitess connector in the embedded-engine harness
  (`bench/peers/debezium`, `make debezium-vitess-peer`), offsets in Kafka Connect's file offset
  store, flushed after every batch and when the engine closes, so a stopped reader resumes.

Both start from vtgate's current position the first time. Each start is a `Start`: when, and
the error that ended it, if one did (the reader's own words). `deliveries()` gives every row
change delivered so far, over all starts (`bench.vitess_ledger`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.debezium_peer import Harness, harness_command
from bench.vitess_ledger import Delivery, debezium_deliveries, vstream_deliveries

DEBEZIUM_VITESS = "3.5.0.Final, embedded engine, Vitess connector"
# Every gRPC error is retriable to the Vitess connector, and Debezium's default retries without
# end; a bounded number lets a reader that cannot go on end with its error.
DEBEZIUM_MAX_RETRIES = 5


@dataclass
class Start:
    at: float
    error: str | None = None
    stopped_at: float | None = None


@dataclass
class _Reader:
    name: str
    workdir: Path
    starts: list[Start] = field(default_factory=list)

    @property
    def failed(self) -> str | None:
        """The error that ended the last start, if one did."""
        return self.starts[-1].error if self.starts else None

    def running(self) -> bool:
        raise NotImplementedError

    def deliveries(self) -> list[Delivery]:
        raise NotImplementedError


class VStreamReader(_Reader):
    def __init__(self, binary: Path, server: str, keyspace: str, workdir: Path) -> None:
        super().__init__("vstream", workdir)
        self.command = [str(binary), "--server", server, "--keyspace", keyspace,
                        "--vgtid-file", str(workdir / "vstream-vgtid.json")]  # fmt: skip
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        start = Start(time.time())
        self.starts.append(start)
        with (self.workdir / "vstream.log").open("ab") as log:
            self._process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=log,
                                             text=True)  # fmt: skip
        self._reader = threading.Thread(target=self._read, args=(self._process.stdout, start))
        self._reader.start()

    def _read(self, stream: IO[str] | None, start: Start) -> None:
        assert stream is not None
        for text in stream:
            with contextlib.suppress(json.JSONDecodeError):
                line = json.loads(text)
                if line.get("type") == "ERROR":
                    start.error = str(line.get("error"))
                with self._lock:
                    self.lines.append(line)

    def streaming(self) -> bool:
        """Positioned on every shard (no `current` left in its last VGTID)."""
        with self._lock:
            for line in reversed(self.lines):
                if line.get("type") == "VGTID":
                    gtids = line["vgtid"].get("shardGtids", [])
                    return bool(gtids) and all(g.get("gtid") != "current" for g in gtids)
        return False

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
        try:
            code = self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            code = self._process.wait()
        if self._reader is not None:
            self._reader.join(timeout=30)
        start = self.starts[-1]
        start.stopped_at = time.time()
        if code not in (0, -15) and start.error is None:
            start.error = f"vstream-client exited with status {code}"
        self._process = None

    def deliveries(self) -> list[Delivery]:
        with self._lock:
            return vstream_deliveries(list(self.lines))


def debezium_vitess_properties(host: str, grpc_port: int, keyspace: str, offsets: Path
                               ) -> dict[str, str]:  # fmt: skip
    """Debezium's Vitess connector on vtgate's gRPC port, from the current position on first
    start (no snapshot), its offsets in `offsets`."""
    return {
        "name": "vitess-peer",
        "connector.class": "io.debezium.connector.vitess.VitessConnector",
        "database.hostname": host,
        "database.port": str(grpc_port),
        "vitess.keyspace": keyspace,
        "topic.prefix": "peer",
        "snapshot.mode": "never",
        "tombstones.on.delete": "false",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(offsets),
        "offset.flush.interval.ms": "0",
        "errors.max.retries": str(DEBEZIUM_MAX_RETRIES),
    }


class DebeziumVitessReader(_Reader):
    def __init__(self, build_dir: Path, host: str, grpc_port: int, keyspace: str,
                 workdir: Path) -> None:  # fmt: skip
        super().__init__("debezium", workdir)
        self.props = debezium_vitess_properties(host, grpc_port, keyspace,
                                                workdir / "debezium-offsets.dat")  # fmt: skip
        self.build_dir = build_dir
        self.harnesses: list[Harness] = []

    def start(self) -> None:
        self.starts.append(Start(time.time()))
        command = harness_command(self.build_dir, self.props, None)
        self.harnesses.append(Harness(command, self.workdir / "debezium.log"))

    def streaming(self) -> bool:
        return bool(self.harnesses) and self.harnesses[-1].output.started_at is not None

    def running(self) -> bool:
        return bool(self.harnesses) and self.harnesses[-1].process.poll() is None

    def _note_error(self) -> None:
        start, output = self.starts[-1], self.harnesses[-1].output
        if start.error is None and output.errors:
            start.error = output.errors[0]
        elif start.error is None and not self.running() and output.stopped is None:
            start.error = f"the harness exited with status {self.harnesses[-1].process.returncode}"

    @property
    def failed(self) -> str | None:
        if self.harnesses:
            self._note_error()
        return super().failed

    def stop(self) -> None:
        if not self.harnesses or self.starts[-1].stopped_at is not None:
            return
        self.harnesses[-1].stop()
        self._note_error()
        self.starts[-1].stopped_at = time.time()

    def deliveries(self) -> list[Delivery]:
        return debezium_deliveries([c for h in self.harnesses for c in list(h.output.changes)])
