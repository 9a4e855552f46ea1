"""Real change events for the verifier's integration tests, and feeding them to the real sinks.

The events are read from the shards' binlogs with the binlog source's reading layer
(`BinlogRangeReader`, no Spark), between the positions before and after a traffic run. Batches
interleave the shards as a job's micro-batches do: per shard in binlog order, each shard's part
ending with its heartbeat.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from updatestream_jobs.sinks.sink import BatchContext, Sink
from updatestream_jobs.source.options import SourceConfig

from tests.binlogs import read
from updatestream.binlog.events import ChangeEvent
from updatestream.binlog.row_converter import heartbeat
from updatestream.core.gtid import GTIDPosition
from updatestream.core.token import EventToken

SCRIPT = Path(sys.executable).parent / "updatestream"


def read_events(
    config: SourceConfig, start: dict[str, GTIDPosition], end: dict[str, GTIDPosition]
) -> dict[str, list[ChangeEvent]]:
    return {shard: read(config, shard, start[shard], end[shard]) for shard in start}


def batches(
    events: dict[str, list[ChangeEvent]], size: int = 150, final_after: int = 5
) -> list[list[ChangeEvent]]:
    """Micro-batches of up to `size` events per shard, each shard's part ending with its
    heartbeat; a last batch of heartbeats `final_after` seconds later completes every time."""
    out: list[list[ChangeEvent]] = []
    count = max((len(e) for e in events.values()), default=0)
    for start in range(0, count, size):
        batch: list[ChangeEvent] = []
        for shard_events in events.values():
            part = shard_events[start : start + size]
            if part:
                batch += part
                batch.append(heartbeat(part[-1].keyspace, EventToken.loads(part[-1].token)))
        out.append(batch)
    final = []
    for shard_events in events.values():
        if shard_events:
            last = EventToken.loads(shard_events[-1].token)
            late = EventToken(last.timestamp + final_after, last.shard, last.position)
            final.append(heartbeat(shard_events[-1].keyspace, late))
    out.append(final)
    return out


def feed(sink: Sink, all_batches: Sequence[Iterable[ChangeEvent]], replay: int = 1) -> None:
    """Write every batch to the sink, writing batch `replay` twice (a replay after a crash)."""
    sink.open()
    try:
        for batch_id, batch in enumerate(all_batches):
            context = BatchContext("verify", "-", batch_id)
            sink.write_batch(list(batch), context)
            if batch_id == replay:
                sink.write_batch(list(batch), context)
    finally:
        sink.close()


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        import json

        return json.loads(self.stdout)


def verify(*args: str | Path) -> Run:
    """`updatestream verify ...` through the installed console script."""
    done = subprocess.run(
        [str(SCRIPT), "verify", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)
