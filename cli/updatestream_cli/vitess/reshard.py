"""A real Vitess Reshard, driven phase by phase with `vtctldclient Reshard`.

1. **tablets**: one new primary tablet per target shard (`VitessCluster.add_tablets`).
2. **create**: `Reshard create` (VReplication copies the schema and rows, then replicates).
3. **catch up**: wait until every stream has finished copying and its lag is small.
4. **switch**: `Reshard SwitchTraffic` (reads and writes; reverse replication stays on), then
   the manifest's serving shards move to the targets with a new history entry.
5. **complete** (unless asked to stop after the switch): `Reshard complete` removes the
   workflow and the source shards from the topology; their tablets and mysqld are then stopped
   and their data removed.

Rerunning the same request resumes: phases already done (the workflow exists, traffic is
switched) are recognised from Vitess's own state and skipped.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from updatestream.core.keyrange import KeyRange, parse_shard_names
from updatestream_cli.vitess.cluster import VitessCluster
from updatestream_cli.vitess.errors import ReshardError, VtctldCommandError


@dataclass(frozen=True)
class ReshardPlan:
    workflow: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]

    @property
    def kind(self) -> str:
        return "split" if len(self.targets) > len(self.sources) else "merge"


def plan_reshard(
    serving: Sequence[str], sources: str, targets: str, workflow: str | None = None
) -> ReshardPlan:
    """Validate a request against the serving shards; nothing is changed when it is wrong."""
    src = sorted(parse_shard_names(sources))
    dst = sorted(parse_shard_names(targets))
    for ranges, what in ((src, "--from"), (dst, "--to")):
        for a, b in itertools.pairwise(ranges):
            if a.intersects(b):
                raise ReshardError(f"{what} has overlapping shards {a.name} and {b.name}")
    if _span(src) != _span(dst) or not _contiguous(src) or not _contiguous(dst):
        raise ReshardError(
            f"the targets {targets} must cover exactly the key range of the sources {sources}"
        )
    missing = [r.name for r in src if r.name not in serving]
    switched = all(r.name in serving for r in dst)  # a rerun after SwitchTraffic completes it
    if missing and not switched:
        raise ReshardError(
            f"source shard(s) {', '.join(missing)} are not serving (serving: "
            f"{', '.join(serving)}); reshard serving shards only"
        )
    if {r.name for r in src} == {r.name for r in dst}:
        raise ReshardError(f"--from and --to name the same shards ({sources}); nothing to do")
    name = workflow or _workflow_name([r.name for r in src], [r.name for r in dst])
    if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", name):
        raise ReshardError(f"workflow name {name!r} must be 1-64 letters, digits or underscores")
    return ReshardPlan(name, tuple(r.name for r in src), tuple(r.name for r in dst))


def _span(ranges: list[KeyRange]) -> tuple[bytes, bytes]:
    return ranges[0].start, ranges[-1].end


def _contiguous(ranges: list[KeyRange]) -> bool:
    return all(a.end == b.start for a, b in itertools.pairwise(ranges))


def _workflow_name(sources: list[str], targets: list[str]) -> str:
    def part(names: list[str]) -> str:
        return "_".join(n.replace("-", "x") for n in names)

    return f"reshard_{part(sources)}_to_{part(targets)}"[:64]


@dataclass(frozen=True)
class StreamStatus:
    """One VReplication stream of the workflow: a (target shard, source shard) pair."""

    target: str
    source: str
    state: str
    copying: int  # tables still being copied
    lag_seconds: float
    position: str
    message: str

    def describe(self) -> str:
        copy = f", copying {self.copying} table(s)" if self.copying else ""
        note = f" ({self.message})" if self.message else ""
        return (
            f"{self.source} -> {self.target}: {self.state}{copy}, lag {self.lag_seconds:.0f}s{note}"
        )


class ReshardReporter(Protocol):
    def phase(self, name: str, detail: str) -> None: ...

    def streams(self, streams: Sequence[StreamStatus]) -> None: ...


class QuietReshardReporter:
    def phase(self, name: str, detail: str) -> None:
        pass

    def streams(self, streams: Sequence[StreamStatus]) -> None:
        pass


class VitessReshard:
    """Drives one Reshard workflow on a `VitessCluster`."""

    def __init__(
        self,
        cluster: VitessCluster,
        plan: ReshardPlan,
        reporter: ReshardReporter | None = None,
        *,
        max_lag_seconds: float = 10.0,
        catch_up_timeout: float = 900.0,
        error_grace_seconds: float = 60.0,
    ) -> None:
        self.cluster = cluster
        self.plan = plan
        self.reporter = reporter or QuietReshardReporter()
        self.max_lag_seconds = max_lag_seconds
        self.catch_up_timeout = catch_up_timeout
        self.error_grace_seconds = error_grace_seconds
        self.vtctl = cluster.vtctl()
        self.timings: dict[str, float] = {}

    def _reshard(self, *args: str, timeout: float = 300.0) -> str:
        return self.vtctl.run(
            "Reshard", "--workflow", self.plan.workflow,
            "--target-keyspace", self.cluster.keyspace, *args, timeout=timeout,
        )  # fmt: skip

    def run(self, *, complete: bool = True) -> None:
        """Every phase up to SwitchTraffic, then `complete` unless asked not to."""
        self._timed("create", self.create)
        self._timed("catch up", self.wait_caught_up)
        self._timed("switch", self.switch_traffic)
        if complete:
            self._timed("complete", self.complete)

    def _timed(self, name: str, action: Any) -> None:
        began = time.monotonic()
        action()
        self.timings[name] = time.monotonic() - began

    # -- phases ---------------------------------------------------------------------------------

    def exists(self) -> bool:
        names = self.vtctl.json("Workflow", "--keyspace", self.cluster.keyspace, "list")
        return self.plan.workflow in (names or [])

    def traffic_state(self) -> str:
        """Vitess's own words, e.g. `Reads Not Switched. Writes Not Switched`."""
        data = self.vtctl.json(
            "Reshard", "--workflow", self.plan.workflow,
            "--target-keyspace", self.cluster.keyspace, "status", "--format", "json",
        )  # fmt: skip
        return str(data.get("traffic_state", ""))

    def create(self) -> None:
        plan = self.plan
        self.reporter.phase("tablets", f"starting primary tablets for {', '.join(plan.targets)}")
        self.cluster.add_tablets(plan.targets)
        if self.exists():
            self.reporter.phase("create", f"workflow {plan.workflow} exists; resuming it")
            return
        self.reporter.phase(
            "create", f"Reshard {','.join(plan.sources)} -> {','.join(plan.targets)}"
        )
        self._reshard(
            "create",
            f"--source-shards={','.join(plan.sources)}",
            f"--target-shards={','.join(plan.targets)}",
            "--tablet-types=PRIMARY",
        )

    def status(self) -> list[StreamStatus]:
        data = self.vtctl.json(
            "Workflow", "--keyspace", self.cluster.keyspace, "show",
            "--workflow", self.plan.workflow, "--include-logs=false",
        )  # fmt: skip
        workflows = data.get("workflows") or []
        if not workflows:
            raise ReshardError(
                f"workflow {self.plan.workflow} is gone from keyspace {self.cluster.keyspace}; "
                "was it cancelled or completed elsewhere?"
            )
        return [_stream(s) for shard in workflows[0]["shard_streams"].values()
                for s in shard["streams"]]  # fmt: skip

    def wait_caught_up(self) -> None:
        """Until every stream runs, has copied every table, and lags by at most the bound."""
        if self.writes_switched():
            return
        deadline = time.monotonic() + self.catch_up_timeout
        failing_since: float | None = None
        while True:
            streams = self.status()
            self.reporter.streams(streams)
            errors = [s for s in streams if s.state == "Error"]
            # VReplication retries a failed stream itself every few seconds (a copy's LOCK
            # TABLES that timed out, a lost connection): only an error that lasts is one
            failing_since = (failing_since or time.monotonic()) if errors else None
            lasting = failing_since is not None and (
                time.monotonic() - failing_since > self.error_grace_seconds
            )
            if lasting:
                raise ReshardError(
                    f"VReplication stopped with an error: {errors[0].describe()}; fix the cause "
                    f"and run `vtctldclient Workflow --keyspace {self.cluster.keyspace} start "
                    f"--workflow {self.plan.workflow}`, then rerun the reshard"
                )
            if streams and all(
                s.state == "Running" and not s.copying and s.lag_seconds <= self.max_lag_seconds
                for s in streams
            ):
                return
            if time.monotonic() > deadline:
                raise ReshardError(
                    f"workflow {self.plan.workflow} did not catch up within "
                    f"{self.catch_up_timeout:.0f}s: " + "; ".join(s.describe() for s in streams)
                )
            time.sleep(1.0)

    def writes_switched(self) -> bool:
        return self.exists() and "Writes Switched" in self.traffic_state().replace(
            "Writes Not Switched", ""
        )

    def switch_traffic(self) -> None:
        """SwitchTraffic for reads and writes (retried while VReplication is still behind)."""
        if not self.writes_switched():
            self.reporter.phase("switch", "SwitchTraffic (reads and writes)")
            for attempt in range(1, 6):
                try:
                    self._reshard("SwitchTraffic", "--timeout=60s", timeout=300.0)
                    break
                except VtctldCommandError as exc:
                    if attempt == 5 or "lag" not in str(exc).lower():
                        raise ReshardError(
                            f"SwitchTraffic of {self.plan.workflow} failed: {exc}"
                        ) from None
                    self.reporter.phase("switch", f"VReplication still behind, retry {attempt}")
                    self.wait_caught_up()
        self._record_serving(self.plan.targets, self.plan.sources)
        self.cluster.wait_vtgate_serving()

    def _record_serving(self, now: Sequence[str], before: Sequence[str]) -> None:
        """The manifest follows what Vitess serves now (read from vtctld, not assumed)."""
        serving = self.cluster.sync_manifest().spec.serving_shards
        self.reporter.phase("switch", f"serving shards: {', '.join(serving)}")

    def cancel(self) -> None:
        """`Reshard cancel` before SwitchTraffic: the targets' tablets go, the sources serve."""
        if self.exists():
            self.reporter.phase("cancel", f"Reshard cancel of {self.plan.workflow}")
            self._reshard("cancel", timeout=300.0)
        present = {t.shard for t in self.cluster.tablets()}
        added = [s for s in self.plan.targets if s in present and s not in self.plan.sources]
        if added:
            self.cluster.remove_tablets(added)

    def complete(self) -> None:
        """`Reshard complete`, then stop the source shards' tablets and remove their data."""
        if self.exists():
            self.reporter.phase("complete", "Reshard complete (removes the source shards)")
            self._reshard("complete", timeout=300.0)
        present = {t.shard for t in self.cluster.tablets()}
        retired = [s for s in self.plan.sources if s in present]
        if retired:
            self.reporter.phase("complete", f"stopping tablets of {', '.join(retired)}")
            self.cluster.remove_tablets(retired)


def _stream(data: dict[str, Any]) -> StreamStatus:
    source = data.get("binlog_source") or {}
    updated = int((data.get("time_updated") or {}).get("seconds") or 0)
    return StreamStatus(
        target=str(data.get("shard", "")),
        source=str(source.get("shard", "")),
        state=str(data.get("state", "")),
        copying=len(data.get("copy_states") or []),
        lag_seconds=max(0.0, time.time() - updated) if updated else float("inf"),
        position=str(data.get("position", "")),
        message=str(data.get("message", "")),
    )
