"""Vitess-style resharding of a development cluster: split or merge shards on real servers.

Phases, each recorded in the workflow state file `D/workflows/<name>.json` (and the data-bearing
progress in each destination's `_vt.vreplication`, committed with the data):

1. create   - start the destination shards (new servers, new server/domain ids, same schema);
2. copy     - consistent snapshot of each source into its destinations (see `copy`);
3. replicate- filtered replication from each destination's start position (the snapshot, or
              earlier with a replay window, see `replay`) until caught up (see `replication`);
4. switch   - reads switch (recorded), then writes: sources `read_only=ON`, wait until every
              destination applied the source's final position, rewrite the manifest's
              servingShards and shardMapHistory atomically, stop replication (see `cutover`).

A rerun after a crash (kill -9 in any phase) resumes: a destination whose copy did not finish is
emptied and copied again; replication resumes from each destination's `_vt.vreplication.pos`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from updatestream.core.gtid import MariaDBPosition
from updatestream.core.keyrange import KeyRange
from updatestream.core.vschema import VSchema
from updatestream_cli.devcluster import sample_schema as schema
from updatestream_cli.devcluster.cluster import DevCluster, atomic_write
from updatestream_cli.devcluster.copy import (
    CopyTarget,
    ReplicationStart,
    copy_source,
    holds_rows,
    reset_target,
    upgrade_vreplication,
    vreplication_rows,
)
from updatestream_cli.devcluster.cutover import freeze_sources, mark_stopped, switch_serving
from updatestream_cli.devcluster.errors import (
    ReshardError,
    ReshardInProgressError,
    ReshardInputError,
)
from updatestream_cli.devcluster.plan import ReshardPlan, plan_reshard
from updatestream_cli.devcluster.replay import find_replay_window, replication_start
from updatestream_cli.devcluster.replication import Destination, FilteredReplication
from updatestream_cli.devcluster.reporting import QuietReporter, Reporter

__all__ = [
    "QuietReporter",
    "Reporter",
    "ReshardOptions",
    "ReshardPlan",
    "ReshardWorkflow",
    "plan_reshard",
]

PHASES = ("create", "copy", "replicate", "switch_reads", "freeze", "switch_writes", "done")


@dataclass
class ReshardOptions:
    copy_batch_size: int = 1000
    copy_throttle: float = 0.0  # seconds to sleep after each copy batch (tests slow copies)
    min_replicate_seconds: float = 0.0  # stay in filtered replication at least this long
    catchup_seconds: float = 2.0  # freeze once every destination is this close to its source
    catchup_timeout: float = 600.0
    cutover_timeout: float = 120.0
    advance_every: float = 1.0
    heartbeat: float = 0.25  # source heartbeat while idle: bounds the cut-over pause
    hold_after_freeze: float = 0.0  # tests: pause with the sources frozen, before the switch
    # Start filtered replication this many seconds of source binlog before the copy's snapshot
    # (0: at the snapshot); see `replay`.
    replay_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse option values that cannot work, before anything changes."""
        if not math.isfinite(self.replay_seconds) or self.replay_seconds < 0:
            raise ReshardInputError(
                f"--replay-seconds is {self.replay_seconds}; give 0 (replicate from the copy's "
                "snapshot) or a positive number of seconds of source binlog before the snapshot"
            )


@dataclass
class ReshardWorkflow:
    cluster: DevCluster
    plan: ReshardPlan
    options: ReshardOptions = field(default_factory=ReshardOptions)
    reporter: Reporter = field(default_factory=QuietReporter)
    state: dict[str, Any] = field(default_factory=dict)
    replications: list[FilteredReplication] = field(default_factory=list)

    @property
    def state_path(self) -> Any:
        return self.cluster.workflows_dir / f"{self.plan.name}.json"

    # -- state ----------------------------------------------------------------------------------

    def _load_or_create(self) -> None:
        if self.state_path.exists():
            self.state = json.loads(self.state_path.read_text(encoding="utf-8"))
            if self.state.get("phase") == "done":
                raise ReshardInputError(
                    f"workflow {self.plan.name} already finished; nothing to do"
                )
            return
        with self.cluster.locked():
            cstate = self.cluster.state()
            seq = int(cstate.get("next_workflow", 1))
            cstate["next_workflow"] = seq + 1
            atomic_write(self.cluster.state_path, json.dumps(cstate, indent=2, sort_keys=True))
        self.state = {
            "name": self.plan.name,
            "seq": seq,
            "sources": self.plan.sources,
            "targets": self.plan.targets,
            "new_serving": self.plan.new_serving,
            "phase": "create",
            "timings": {},
            "created_at": time.time(),
        }
        self._save()

    def _save(self) -> None:
        atomic_write(self.state_path, json.dumps(self.state, indent=2, sort_keys=True) + "\n")

    def _enter(self, phase: str) -> None:
        if PHASES.index(phase) < PHASES.index(self.state["phase"]):
            return
        self.state["phase"] = phase
        self.state["timings"].setdefault(phase, {})["start"] = time.time()
        self._save()

    def _finish(self, phase: str) -> None:
        self.state["timings"].setdefault(phase, {})["end"] = time.time()
        self._save()

    def _vrep_id(self, source: str) -> int:
        return int(self.state["seq"]) * 100 + self.plan.sources.index(source) + 1

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.cluster.workflows_dir.mkdir(parents=True, exist_ok=True)
        with (self.cluster.workflows_dir / f"{self.plan.name}.lock").open("a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ReshardInProgressError(
                    f"workflow {self.plan.name} is running in another process; wait for it"
                ) from None
            yield

    # -- running --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.options.validate()
        with self._exclusive():
            self._load_or_create()
            self.state["pid"] = os.getpid()
            self._save()
            try:
                self._create()
                self._upgrade_vreplication()
                self._copy()
                self._replicate()
                self._switch()
            except pymysql.err.MySQLError as exc:
                raise ReshardError(
                    f"workflow {self.plan.name} stopped in phase {self.state.get('phase')}: "
                    f"{exc}; fix the cause and rerun the same reshard to resume"
                ) from exc
            finally:
                for replication in self.replications:
                    replication.stop()
        return self.state

    def _create(self) -> None:
        if self.state["phase"] != "create":
            return
        self._enter("create")
        self.reporter.phase("create", ", ".join(self.plan.targets))
        for target in self.plan.targets:
            self.cluster.add_shard(target)
        self._finish("create")
        self._enter("copy")

    def _upgrade_vreplication(self) -> None:
        """Add `start_pos` to targets made by an earlier version; a copy they finished started
        replication at its snapshot: recorded in the state, or (still in the copy phase, so
        replication has not moved it) the row's `pos`."""
        for target in self.plan.targets:
            snapshots = dict(self.state.get("copy_positions", {}).get(target, {}))
            if self.state["phase"] == "copy":
                for source, row in self._vrep_rows(target).items():
                    if row.get("copy_done"):
                        snapshots.setdefault(source, row["pos"])
            with self.cluster.connect(target, "admin") as conn:
                upgrade_vreplication(conn, self.plan.name, snapshots)

    def _vrep_rows(self, target: str) -> dict[str, dict[str, Any]]:
        with self.cluster.connect(target, "admin") as conn:
            return vreplication_rows(conn, self.plan.name)

    def _copy(self) -> None:
        if self.state["phase"] != "copy":
            return
        self.reporter.phase("copy")
        vschema = VSchema.from_dict(self.cluster.keyspace().spec.vschema)
        pending: dict[str, list[str]] = {s: [] for s in self.plan.sources}
        for target in self.plan.targets:
            rows = self._vrep_rows(target)
            sources = self.plan.overlaps(target)
            if all(rows.get(s, {}).get("copy_done") for s in sources):
                # The positions were recorded when the snapshot was taken; a state written by an
                # earlier version has none, and there replication started at the snapshot (which
                # `pos` still is, and `_upgrade_vreplication` wrote as `start_pos`).
                copied = self.state.setdefault("copy_positions", {}).setdefault(target, {})
                starts = self.state.setdefault("start_positions", {}).setdefault(target, {})
                for source in sources:
                    copied.setdefault(source, rows[source]["pos"])
                    starts.setdefault(source, rows[source]["start_pos"])
                continue
            if rows or self._has_rows(target):
                with self.cluster.connect(target, "admin", autocommit=False) as conn:
                    reset_target(conn, self.plan.name)
            for source in sources:
                pending[source].append(target)
        for source, targets in pending.items():
            if not targets:
                continue
            conns = [
                self.cluster.connect(t, "admin", schema.DATABASE, autocommit=False) for t in targets
            ]
            try:
                copy_targets = [
                    CopyTarget(t, KeyRange.parse(t), self._vrep_id(source), c)
                    for t, c in zip(targets, conns, strict=True)
                ]
                with self.cluster.connect(source, "admin", autocommit=False) as src:
                    copy_source(
                        workflow=self.plan.name,
                        source_shard=source,
                        source=src,
                        targets=copy_targets,
                        vschema=vschema,
                        batch_size=self.options.copy_batch_size,
                        throttle=self.options.copy_throttle,
                        progress=functools.partial(self.reporter.copied, source),
                        start_position=functools.partial(self._snapshot_taken, source, targets),
                    )
            finally:
                for conn in conns:
                    conn.close()
        self._finish("copy")
        self._enter("replicate")

    def _snapshot_taken(
        self, source: str, targets: list[str], position: str, snapshot_time: int
    ) -> ReplicationStart:
        """Record the copy's snapshot and choose where replication starts, before any row of
        the copy is written (so a rerun after a crash finds both in the state)."""
        keyspace = self.cluster.keyspace()
        window = find_replay_window(
            keyspace,
            self.cluster.secrets_dir,
            source,
            position,
            snapshot_time,
            self.options.replay_seconds,
        )
        self.state.setdefault("snapshots", {})[source] = position
        if self.options.replay_seconds:
            self.state.setdefault("replay", {})[source] = window.as_dict()
        for target in targets:
            self.state.setdefault("copy_positions", {}).setdefault(target, {})[source] = position
            starts = self.state.setdefault("start_positions", {}).setdefault(target, {})
            starts[source] = window.start_pos
        self._save()
        if self.options.replay_seconds:
            self.reporter.replay(window)
        return replication_start(keyspace, self.cluster.secrets_dir, window)

    def _has_rows(self, target: str) -> bool:
        with self.cluster.connect(target, "admin", schema.DATABASE) as conn:
            return holds_rows(conn)

    def _start_replication(self) -> None:
        if self.replications:
            return
        keyspace = self.cluster.keyspace()
        vschema = VSchema.from_dict(keyspace.spec.vschema)
        reader = self.cluster.credentials("reader")
        for source in self.plan.sources:
            destinations = []
            for target in self.plan.targets:
                if source not in self.plan.overlaps(target):
                    continue
                row = self._vrep_rows(target).get(source)
                if row is None or not row.get("copy_done"):
                    raise ReshardError(
                        f"destination {target} has no finished copy from {source}; "
                        "rerun the reshard to redo the copy"
                    )
                destinations.append(
                    Destination(
                        shard=target,
                        key_range=KeyRange.parse(target),
                        vrep_id=int(row["id"]),
                        connect=functools.partial(
                            self.cluster.connect,
                            target,
                            "admin",
                            autocommit=False,
                            client_flag=CLIENT.MULTI_STATEMENTS,
                        ),
                        pos=MariaDBPosition.parse(row["pos"]),
                        transaction_timestamp=int(row["transaction_timestamp"]),
                        snapshot=self._snapshot_of(target, source),
                    )
                )
            server = self.cluster.server(source)
            self.replications.append(
                FilteredReplication(
                    workflow=self.plan.name,
                    source_shard=source,
                    host=server.host,
                    port=server.port or 0,
                    reader=reader,
                    vschema=vschema,
                    destinations=destinations,
                    advance_every=self.options.advance_every,
                    heartbeat=self.options.heartbeat,
                ).start()
            )

    def _snapshot_of(self, target: str, source: str) -> MariaDBPosition | None:
        position = self.state.get("copy_positions", {}).get(target, {}).get(source)
        return None if position is None else MariaDBPosition.parse(position)

    def lag_report(self) -> list[dict[str, Any]]:
        report: list[dict[str, Any]] = []
        for replication in self.replications:
            now = MariaDBPosition.parse(
                self.cluster.server(replication.source_shard).gtid_position()
            )
            report += replication.lag(now)
        return report

    def _wait(self, done: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last_report = 0.0
        while True:
            for replication in self.replications:
                replication.check()
            if done():
                return
            if time.monotonic() - last_report >= 0.5:
                self.reporter.lag(self.lag_report())
                last_report = time.monotonic()
            if time.monotonic() > deadline:
                raise ReshardError(
                    f"{what} did not happen within {timeout:.0f}s; lag: {self.lag_report()}; "
                    "rerun the reshard to continue"
                )
            time.sleep(0.05)

    def _replicate(self) -> None:
        if self.state["phase"] not in ("replicate", "switch_reads", "freeze", "switch_writes"):
            return
        self._start_replication()
        if self.state["phase"] != "replicate":
            return
        self.reporter.phase("replicate")
        began = time.monotonic()

        def caught_up() -> bool:
            if time.monotonic() - began < self.options.min_replicate_seconds:
                return False
            return all(
                r["seconds_behind"] <= self.options.catchup_seconds
                and r["transactions_behind"] < 500
                for r in self.lag_report()
            )

        self._wait(caught_up, self.options.catchup_timeout, "catch-up of filtered replication")
        self._finish("replicate")
        self._enter("switch_reads")

    def _switch(self) -> None:
        if self.state["phase"] == "switch_reads":
            # Reads of replicas would move here; the manifest has one serving map, which moves
            # with the writes below, so this step is recorded in the workflow state only.
            self.reporter.phase("switch reads")
            self.state["reads_switched_at"] = time.time()
            self._finish("switch_reads")
            self._enter("freeze")
        if self.state["phase"] in ("freeze", "switch_writes"):
            # Always (re)freeze: after a crash a restarted source would accept writes again,
            # and a final position read before that would miss them.
            self.reporter.phase("switch writes", "freezing sources (read_only=ON)")
            self.state["final_positions"] = freeze_sources(self.cluster, self.plan.sources)
            self._save()
            if self.state["phase"] == "freeze":
                self._finish("freeze")
                self._enter("switch_writes")
                time.sleep(self.options.hold_after_freeze)
        if self.state["phase"] == "switch_writes":
            finals = self.state["final_positions"]
            for replication in self.replications:
                replication.request_flush()

            def applied() -> bool:
                return all(
                    r.caught_up(MariaDBPosition.parse(finals[r.source_shard]))
                    for r in self.replications
                )

            self._wait(applied, self.options.cutover_timeout, "applying the final positions")
            self._switch_manifest()
            for replication in self.replications:
                replication.stop()
            mark_stopped(self.cluster, self.plan.targets, self.plan.name)
            self._finish("switch_writes")
            self._enter("done")
            self.reporter.phase("done", "serving " + ",".join(self.state["new_serving"]))

    def _switch_manifest(self) -> None:
        switched = switch_serving(self.cluster, self.plan.sources, self.plan.targets)
        if switched is not None:
            self.state["new_serving"], self.state["switched_at"] = switched
            self._save()
