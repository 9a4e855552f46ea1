"""A stand-in for `updatestream run` in the operator's API-server tests (run as a program).

A real process that takes the job's arguments (`run --config job.yaml`) and writes its status
file the way a job that hops inside its running query does: it re-reads its Keyspace from the
configuration's `keyspaceWatch` (else the job directory's `keyspace.yaml`), and when the serving
shards of its key range change it reports the hop in flight (`phase: hopping`), then,
`HOP_SECONDS` later, the new `shardMap`, the completed hop and tokens on the new shards. Tokens
advance on every tick, so positions move as a real stream's would. A stream whose name starts
with `silent` never hops: it keeps reporting the map it was started with, like a job that does
not notice the change.

The real job needs MariaDB shards and a Spark JVM; what these tests check is the operator.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from updatestream.contract.job_config import JobConfig
from updatestream.core.shardmap import ShardMap

HOP_SECONDS = 3.0
TICK_SECONDS = 0.3
DUPLICATES_PER_HOP = 3


def _argument(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args[:-1] else None


class StandIn:
    def __init__(self, args: list[str]) -> None:
        config_file = _argument(args, "--config")
        assert config_file, "missing --config"
        config = JobConfig.load(Path(config_file))
        assert config.status_file, "no status file"
        # a job launched for in-job hops watches its Keyspace; others read the local launcher's
        # copy (<job dir>/keyspace.yaml, beside <job dir>/launch-<n>/job.yaml) once
        watch = config.keyspace_watch or str(Path(config_file).parent.parent / "keyspace.yaml")
        self.name = config.name
        self.silent = self.name.startswith("silent")
        self.key_range = config.serving_key_range()
        self.watch = Path(watch)
        self.status_file = config.status_file
        seen = self.keyspace()
        assert seen is not None, f"cannot read {watch}"
        self.shard_map = seen[0]
        self.seq: dict[str, int] = {}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.hops: list[dict[str, Any]] = []
        self.phase = "running"
        self.dropped = 0
        self.batches = 0  # one per tick, as a job reports its micro-batches

    def keyspace(self) -> tuple[str, float | None] | None:
        """The serving map of the watched Keyspace and when it last changed."""
        try:
            spec = yaml.safe_load(self.watch.read_text())["spec"]
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            return None
        history = spec.get("shardMapHistory") or []
        changed = max((float(h["at"]) for h in history), default=None)
        return str(ShardMap.parse(",".join(spec["servingShards"]))), changed

    def shards(self, shard_map: str) -> list[str]:
        return [s.name for s in ShardMap.parse(shard_map).shards_for(self.key_range)]

    def tick(self) -> None:
        now = int(time.time())
        self.batches += 1
        for shard in self.shards(self.shard_map):
            self.seq[shard] = self.seq.get(shard, 0) + 1
            self.tokens[shard] = {
                "ts": now,
                "shard": shard,
                "pos": f"0-1-{self.seq[shard]}",
                "flavor": "mariadb",
            }

    def write(self) -> None:
        report = {
            "stream": self.name,
            "keyRange": self.key_range.name,
            "updatedAt": time.time(),
            "batches": self.batches,
            "phase": self.phase,
            "shardMap": self.shard_map,
            "hops": self.hops,
            "duplicates": {"hop": self.dropped, "unknown": 0},
            "shards": {
                shard: {"token": token, "byOp": {"insert": self.seq[shard]}, "lagSeconds": 0.0}
                for shard, token in sorted(self.tokens.items())
            },
        }
        tmp = self.status_file.with_name(f".{self.status_file.name}.tmp")
        tmp.write_text(json.dumps(report))
        tmp.replace(self.status_file)

    def hop(self, to_map: str, serving_changed_at: float | None) -> None:
        hop: dict[str, Any] = {
            "fromMap": self.shard_map,
            "toMap": to_map,
            "from": self.shards(self.shard_map),
            "to": self.shards(to_map),
            "servingChangedAt": serving_changed_at,
            "detectedAt": time.time(),
            "completedAt": None,
            "durationSeconds": None,
            "duplicatesDropped": 0,
        }
        self.hops.append(hop)
        self.phase = "hopping"
        self.write()
        time.sleep(HOP_SECONDS)
        self.shard_map = to_map
        self.tick()
        hop["completedAt"] = time.time()
        began = serving_changed_at if serving_changed_at is not None else hop["detectedAt"]
        hop["durationSeconds"] = round(hop["completedAt"] - began, 3)
        hop["duplicatesDropped"] = DUPLICATES_PER_HOP
        self.dropped += DUPLICATES_PER_HOP
        self.phase = "running"
        self.write()

    def run(self) -> None:
        while True:
            self.tick()
            self.write()
            seen = self.keyspace()
            if (
                not self.silent
                and seen is not None
                and self.shards(seen[0]) != self.shards(self.shard_map)
            ):
                self.hop(*seen)
            time.sleep(TICK_SECONDS)


if __name__ == "__main__":
    StandIn(sys.argv[1:]).run()
