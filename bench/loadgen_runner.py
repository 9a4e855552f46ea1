"""The C load generator (`bench/loadgen/`): build it, run it on a development cluster, read its
ledger.

The generator writes the sample keyspace's traffic (the tables, columns and statement mix of
`updatestream devcluster traffic`) with several writer threads per shard, one round trip per
transaction, and records every committed row change in a ledger of the project's format
(`updatestream_cli.devcluster.ledger`), with the writer's clock right after COMMIT returned.
`updatestream verify` and `updatestream devcluster check` read that ledger as they read the
Python generator's. It is built by `bench/loadgen/build.sh` into the cache directory, once per
hash of its sources.

    run = run_load(cluster.manifest_path, cluster.secrets_dir, ledger, LoadOptions(rate=5000))
    run.figures.committed_rows_per_s, run.ledger[0].commit_time

The generator routes rows with the sample keyspace's VSchema (`hash` on `users.id` and
`orders.user_id`, `xxhash` on `events.event_key`) over the serving shards of the manifest when
it starts; it does not follow a reshard (use the Python generator for that).
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updatestream_cli.devcluster import sample_schema
from updatestream_cli.devcluster.ledger import LedgerEntry, last_entry, read_ledger

from updatestream import spec
from updatestream.core.errors import UpdateStreamError
from updatestream.core.vschema import VSchema

SOURCE_DIR = Path(__file__).resolve().parent / "loadgen"


class LoadgenError(UpdateStreamError):
    """The load generator could not be built, could not start, or failed while writing."""


@functools.cache
def build() -> Path:
    """The generator's binary, built first if this hash of its sources has not been built."""
    done = subprocess.run(
        ["bash", str(SOURCE_DIR / "build.sh")], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise LoadgenError(f"building the load generator failed: {done.stderr.strip()[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class LoadOptions:
    rate: float = 0.0  # row changes per second over all writers; 0: as fast as they can
    duration: float = 10.0  # seconds; 0: until stopped
    seed: int = 1
    max_tx_rows: int = 5  # rows of a transaction: 1..max_tx_rows, as the Python generator
    connections: int = 4  # writers (threads, each with its own connection) per shard
    pipeline: int = 1  # transactions per round trip of a writer (each its own COMMIT)
    weights: tuple[float, float, float] = (0.5, 0.35, 0.15)  # insert, update, delete
    progress: bool = False  # a line of figures on stderr every second


@dataclass(frozen=True)
class LoadFigures:
    """The generator's own account of a run (its ledger has every change)."""

    rows: int
    transactions: int
    by_op: dict[str, int]
    by_shard: dict[str, int]
    writers: int
    seconds: float
    cpu_s: float  # the generator's own CPU time (user and system, every thread)
    first_commit: float  # unix seconds, the writers' clock after the first COMMIT
    last_commit: float

    @property
    def committed_rows_per_s(self) -> float:
        span = self.last_commit - self.first_commit
        return self.rows / span if span > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "committed_rows_per_s": round(self.committed_rows_per_s)}


@dataclass
class LoadRun:
    figures: LoadFigures
    ledger_path: Path
    ledger: list[LedgerEntry] = field(default_factory=list)


def _check_sample_keyspace(keyspace: spec.Keyspace, manifest: Path) -> None:
    name = keyspace.metadata.name
    if VSchema.from_dict(keyspace.spec.vschema, keyspace=name) != VSchema.from_dict(
        sample_schema.VSCHEMA, keyspace=name
    ):
        raise LoadgenError(
            f"the Keyspace in {manifest} does not have the sample VSchema; the C load generator "
            "writes only the sample keyspace (users, orders, events), as a development cluster "
            "has it"
        )


class Load:
    """One run of the generator in its own process: `start()`, then `wait()` or `stop()`."""

    def __init__(
        self,
        manifest: Path,
        secrets_dir: Path,
        ledger: Path,
        options: LoadOptions | None = None,
        *,
        stderr: Path | None = None,
    ) -> None:
        self.options = options or LoadOptions()
        self.ledger_path = Path(ledger)
        keyspace = spec.load_keyspace(Path(manifest))
        _check_sample_keyspace(keyspace, Path(manifest))
        self.shards = {s.name: s for s in keyspace.spec.shards}
        self.serving = list(keyspace.spec.serving_shards)
        secret = spec.SecretRef(name=sample_schema.secret_name(keyspace.metadata.name, "app"))
        self._credentials = spec.read_credentials(Path(secrets_dir), secret)
        self.stderr_path = stderr
        self.process: subprocess.Popen[str] | None = None

    def command(self) -> list[str]:
        opts = self.options
        last = last_entry(self.ledger_path)
        command = [
            str(build()), "--rate", str(opts.rate), "--duration", str(opts.duration),
            "--seed", str(opts.seed), "--max-tx-rows", str(opts.max_tx_rows),
            "--connections", str(opts.connections), "--pipeline", str(opts.pipeline),
            "--weights", ",".join(map(str, opts.weights)),
            "--database", sample_schema.DATABASE, "--ledger", str(self.ledger_path),
            "--first-order", str(last.order + 1 if last else 1),
            "--first-tx", str(last.tx + 1 if last else 1),
        ]  # fmt: skip
        for name in self.serving:
            endpoint = self.shards[name].mysql
            command += ["--shard", f"{name}={endpoint.host}:{endpoint.port}"]
        return command + (["--progress"] if opts.progress else [])

    def start(self) -> Load:
        err = self.stderr_path.open("ab") if self.stderr_path else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True,
            )  # fmt: skip
        finally:
            if not isinstance(err, int):
                err.close()
        assert self.process.stdin is not None
        creds = self._credentials
        # stdin stays open: the generator stops when it closes (stop(), or this process ending)
        self.process.stdin.write(f"{creds.username}\n{creds.password}\n")
        self.process.stdin.flush()
        return self

    def stop(self, timeout: float = 60.0) -> LoadRun:
        """Ask the writers to stop after their current transaction, then collect the run."""
        if self.process is not None and self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        return self.wait(timeout)

    def wait(self, timeout: float | None = None, *, read: bool = True) -> LoadRun:
        """The run's figures and (with `read`) its ledger, once the process ended."""
        process = self.process
        if process is None or process.stdout is None:
            raise LoadgenError("the load generator was not started")
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise LoadgenError(f"the load generator did not end within {timeout}s") from None
        finally:
            if process.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    process.stdin.close()
        out = process.stdout.read()  # one line of figures: the pipe cannot fill up
        process.stdout.close()
        lines = out.strip().splitlines()
        data = json.loads(lines[-1]) if lines else {}
        if process.returncode != 0 or data.get("error"):
            reason = data.get("error") or f"exit status {process.returncode}"
            raise LoadgenError(f"the load generator failed: {reason}")
        data.pop("error", None)
        figures = LoadFigures(**data)
        ledger = list(read_ledger(self.ledger_path)) if read else []
        return LoadRun(figures, self.ledger_path, ledger)


def run_load(
    manifest: Path, secrets_dir: Path, ledger: Path, options: LoadOptions | None = None
) -> LoadRun:
    """Run the generator to the end of its duration; its figures and its ledger."""
    load = Load(manifest, secrets_dir, ledger, options)
    timeout = None if not load.options.duration else load.options.duration + 120
    return load.start().wait(timeout)
