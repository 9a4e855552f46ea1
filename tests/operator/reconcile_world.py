"""A world for the pure reconcile tests: the jobs that exist and the status written, changed
by each step's actions as a launcher and the API server would change them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from updatestream_operator.reconciler import reconcile as rec
from updatestream_operator.reconciler.models import (
    JobInfo,
    JobPhase,
    JobProgress,
    ReportedHop,
    ShardProgress,
    StreamRef,
    StreamStatus,
)

from updatestream.core.dedup import DedupFilter
from updatestream.core.keyrange import KeyRange
from updatestream.core.token import EventToken
from updatestream.spec import Keyspace, UpdateStreamSpec, parse_keyspace, parse_update_stream

NOW = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
REF = StreamRef(namespace="ns", name="orders", uid="uid-1", generation=3)
T0 = 1_714_560_000
SHARDS = ["-80", "80-", "-40", "40-80", "-", "80-c0", "c0-"]
ROUTED = {"column_vindexes": [{"column": "id", "name": "hash"}]}


def keyspace(
    serving: list[str] | None = None,
    *,
    ports: dict[str, int] | None = None,
    history: list[dict[str, Any]] | None = None,
    **vschema: Any,
) -> Keyspace:
    ports = ports or {}
    return parse_keyspace(
        {
            "metadata": {"name": "commerce", "namespace": "ns"},
            "spec": {
                "shards": [
                    {
                        "name": n,
                        "mysql": {"host": "db", "port": ports.get(n, 3306 + i)},
                        "credentialsSecret": {"name": "reader"},
                    }
                    for i, n in enumerate(SHARDS)
                ],
                "vschema": {
                    "sharded": True,
                    "vindexes": {"hash": {"type": "hash"}},
                    "tables": {"orders": ROUTED, "users": ROUTED},
                    **vschema,
                },
                "servingShards": serving or ["-80", "80-"],
                "shardMapHistory": history or [],
            },
        }
    )


def stream_spec(**overrides: Any) -> UpdateStreamSpec:
    spec = {"keyspace": "commerce", "sinks": [{"type": "console"}], **overrides}
    return parse_update_stream({"metadata": {"name": "orders"}, "spec": spec}).spec


def token(shard: str, ts: int, seq: int) -> EventToken:
    return EventToken.from_json({"ts": ts, "shard": shard, "pos": f"0-1-{seq}"})


@dataclass
class World:
    """What the actions of each step change: the jobs that exist, and the written status."""

    spec: UpdateStreamSpec = field(default_factory=stream_spec)
    keyspace: Keyspace | None = field(default_factory=keyspace)
    status: StreamStatus = field(default_factory=StreamStatus)
    jobs: list[JobInfo] = field(default_factory=list)
    progress: dict[str, JobProgress] = field(default_factory=dict)
    now: dt.datetime = NOW
    settings: rec.Settings = field(default_factory=rec.Settings)
    legacy_jobs: bool = False  # jobs launched as an operator without in-job hops labels them
    decisions: list[rec.Decision] = field(default_factory=list)

    def observe(self) -> rec.Observed:
        progress = {KeyRange.parse(k): report for k, report in self.progress.items()}
        return rec.Observed(
            REF, self.spec, self.keyspace, self.status, list(self.jobs), progress, self.now
        )

    def step(self) -> rec.Decision:
        decision = rec.reconcile(self.observe(), self.settings)
        self.decisions.append(decision)
        # what the API server stores, read back (a restarted operator sees only this)
        self.status = StreamStatus.parse(decision.status.dump())
        for action in decision.actions:
            if isinstance(action, rec.Stop):
                self.jobs = [j for j in self.jobs if j.job_id != action.job.job_id]
            else:
                spec = action.job
                self.jobs.append(
                    JobInfo(
                        job_id=spec.job_id,
                        stream_uid=spec.stream.uid,
                        key_range=spec.key_range,
                        shard_map=spec.shard_map,
                        spec_hash=spec.spec_hash,
                        launch_id=spec.launch_id,
                        phase=JobPhase.PENDING,
                        in_job_hops=spec.in_job_hops and not self.legacy_jobs,
                    )
                )
        self.now += dt.timedelta(seconds=2)
        return decision

    def settle(self, limit: int = 6) -> list[rec.Decision]:
        steps = []
        for _ in range(limit):
            steps.append(self.step())
            if not steps[-1].actions:
                return steps
        raise AssertionError("reconcile did not settle")

    def run(self) -> None:
        """The drivers start."""
        self.jobs = [replace(j, phase=JobPhase.RUNNING) for j in self.jobs]

    def launches(self) -> list[rec.Launch]:
        return [a for d in self.decisions for a in d.actions if isinstance(a, rec.Launch)]

    def stops(self) -> list[rec.Stop]:
        return [a for d in self.decisions for a in d.actions if isinstance(a, rec.Stop)]

    def report(
        self,
        key_range: str,
        *tokens: EventToken,
        shard_map: str | None = None,
        hops: tuple[ReportedHop, ...] = (),
        dedup: DedupFilter | None = None,
        batches: int = 1,
        **named: EventToken,
    ) -> None:
        entry = self.status.key_range(key_range)
        assert entry is not None
        self.progress[key_range] = JobProgress(
            launch_id=entry.launch_id,
            shards={
                t.shard: ShardProgress(token=t, events={"insert": 5}, lag_seconds=1.5)
                for t in (*tokens, *named.values())
            },
            duplicates={"hop": 2},
            shard_map=shard_map,
            hops=hops,
            dedup=dedup,
            batches=batches,
        )


def names(shards: Iterable[KeyRange]) -> list[str]:
    """Key ranges (shards) by name, to compare with the names a test writes."""
    return [shard.name for shard in shards]


def condition(status: StreamStatus, type_: str) -> tuple[str, str]:
    found = status.condition(type_)
    assert found is not None, type_
    return found.status, found.reason
