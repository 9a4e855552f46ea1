"""Validating a split or merge of a development cluster's serving shards, before anything runs.

`plan_reshard` turns `--from`/`--to` into a `ReshardPlan` (canonical shard names, the new serving
map, the workflow name) or raises the typed error that says what is wrong; it changes nothing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange, are_contiguous, parse_shard_names
from updatestream.core.shardmap import ShardMap
from updatestream_cli.devcluster.cluster import DevCluster, shard_dir_name
from updatestream_cli.devcluster.errors import (
    ReshardFlavorError,
    ReshardInProgressError,
    ReshardInputError,
    ShardNotServingError,
)


@dataclass
class ReshardPlan:
    sources: list[str]
    targets: list[str]
    new_serving: list[str]
    name: str

    def overlaps(self, target: str) -> list[str]:
        t = KeyRange.parse(target)
        return [s for s in self.sources if KeyRange.parse(s).intersects(t)]


def plan_reshard(cluster: DevCluster, sources_text: str, targets_text: str) -> ReshardPlan:
    """Validate a split or merge against the serving shard map; changes nothing."""
    if cluster.flavor != "mariadb":
        raise ReshardFlavorError(
            f"reshard --from={sources_text} --to={targets_text}: the cluster in {cluster.dir} "
            f"runs {cluster.flavor} shards, and the workflow's copy and filtered replication "
            "read MariaDB binlogs only (not yet MySQL); reshard a cluster made with "
            "`devcluster up --flavor mariadb`"
        )
    try:
        sources = parse_shard_names(sources_text)
        targets = parse_shard_names(targets_text)
    except UpdateStreamError as exc:
        raise ReshardInputError(
            f"reshard --from={sources_text} --to={targets_text}: {exc}"
        ) from None
    serving = cluster.serving_map()
    _check_sources(sources, sources_text, serving)
    _check_targets(targets, targets_text, sources, sources_text)
    names = [s.name for s in sources]
    new_serving = [n for n in serving.names if n not in names] + [t.name for t in targets]
    ShardMap(KeyRange.parse(n) for n in new_serving)
    name = (
        "+".join(shard_dir_name(s.name) for s in sources)
        + ".to."
        + "+".join(shard_dir_name(t.name) for t in targets)
    )
    plan = ReshardPlan(names, [t.name for t in targets], new_serving, name)
    _check_not_busy(cluster, plan)
    return plan


def _check_sources(sources: list[KeyRange], text: str, serving: ShardMap) -> None:
    for source in sources:
        if source not in serving:
            raise ShardNotServingError(
                f"source shard {source.name} is not serving (serving shards: {serving}); "
                "pick sources from `updatestream devcluster status`"
            )
    if len({s.name for s in sources}) != len(sources) or not are_contiguous(sources):
        raise ReshardInputError(
            f"source shards {text} must be distinct and adjacent (like 40-80,80-c0)"
        )


def _check_targets(
    targets: list[KeyRange], text: str, sources: list[KeyRange], sources_text: str
) -> None:
    """The targets partition the sources' range exactly, and are not the sources."""
    for i, a in enumerate(targets):
        for b in targets[i + 1 :]:
            if a.intersects(b):
                raise ReshardInputError(
                    f"target shards {a.name} and {b.name} overlap; targets must partition "
                    f"the source range exactly (like -40,40-80 for -80)"
                )
    src_span = KeyRange(min(s.start for s in sources), _max_end(sources))
    if (
        not are_contiguous(targets)
        or KeyRange(min(t.start for t in targets), _max_end(targets)) != src_span
    ):
        raise ReshardInputError(
            f"target shards {text} do not exactly cover the source range {src_span.name} "
            f"(from {sources_text}); list adjacent ranges from {src_span.start.hex() or '-'} "
            f"to {src_span.end.hex() or 'the end'}"
        )
    if {t.name for t in targets} == {s.name for s in sources}:
        raise ReshardInputError(f"targets {text} are the sources; nothing to reshard")


def _check_not_busy(cluster: DevCluster, plan: ReshardPlan) -> None:
    """No other unfinished workflow holds a shard of this one, and the targets are new unless
    this workflow is resuming."""
    resuming = False
    mine = set(plan.sources) | set(plan.targets)
    for other in _workflow_states(cluster):
        if other.get("phase") == "done":
            continue
        if other["name"] == plan.name:
            resuming = True
            continue
        busy = (set(other["sources"]) | set(other["targets"])) & mine
        if busy:
            raise ReshardInProgressError(
                f"shard(s) {', '.join(sorted(busy))} are already part of the unfinished "
                f"workflow {other['name']}; rerun that reshard to finish it first"
            )
    existing = set(cluster.shard_names())
    for target in plan.targets:
        if target in existing and not resuming:
            raise ReshardInputError(
                f"target shard {target} already exists; retire it first "
                f"(updatestream devcluster retire --shards={target})"
            )


def _max_end(ranges: list[KeyRange]) -> bytes:
    return b"" if any(not r.end for r in ranges) else max(r.end for r in ranges)


def _workflow_states(cluster: DevCluster) -> Iterator[dict[str, Any]]:
    if not cluster.workflows_dir.is_dir():
        return
    for path in sorted(cluster.workflows_dir.glob("*.json")):
        with contextlib.suppress(OSError, json.JSONDecodeError):
            yield json.loads(path.read_text(encoding="utf-8"))
