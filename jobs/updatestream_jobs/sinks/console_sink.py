"""The console sink: change events as JSON lines, to a file or to standard output.

Meant for looking at a stream and for tests. One line per event (heartbeats included), with the
batch id. Writing a batch id that was already written changes nothing: for a file the last
written batch id is kept next to it (`<path>.batch`), so a batch Spark replays after a crash
between the write and its checkpoint is not written twice. (A crash between the file write and
the marker update can still repeat that one batch: lines carry the batch id, so readers can tell.)
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from updatestream import spec
from updatestream.binlog.events import ChangeEvent
from updatestream_jobs.sinks.sink import BatchContext, SinkContext, SinkError, SinkResult


class ConsoleSink:
    @classmethod
    def from_spec(cls, config: spec.ConsoleSink, context: SinkContext) -> ConsoleSink:
        return cls(config)

    def __init__(self, config: spec.ConsoleSink) -> None:
        self.path = Path(config.path) if config.path else None
        self.name = f"console({self.path})" if self.path else "console(stdout)"
        self._last_batch: int | None = None
        self._out: TextIO | None = None

    @property
    def _marker(self) -> Path | None:
        return self.path.with_name(self.path.name + ".batch") if self.path else None

    def open(self) -> None:
        if self.path is None:
            self._out = sys.stdout
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._out = self.path.open("a", encoding="utf-8")
            marker = self._marker
            if marker is not None and marker.exists():
                self._last_batch = int(marker.read_text().strip())
        except (OSError, ValueError) as exc:
            raise SinkError(f"{self.name} cannot open its file: {exc}") from None

    def write_batch(self, events: Iterable[ChangeEvent], ctx: BatchContext) -> SinkResult:
        if self._out is None:
            self.open()
        assert self._out is not None
        if self._last_batch is not None and ctx.batch_id <= self._last_batch:
            skipped = sum(1 for _ in events)
            return SinkResult(written=0, skipped=skipped)
        written = 0
        try:
            for event in events:
                line = {"batch": ctx.batch_id, "stream": ctx.stream, **asdict(event)}
                self._out.write(json.dumps(line, separators=(",", ":")) + "\n")
                written += 1
            self._out.flush()
            if self.path is not None:
                os.fsync(self._out.fileno())
                marker = self._marker
                assert marker is not None
                tmp = marker.with_name(marker.name + ".tmp")
                tmp.write_text(str(ctx.batch_id))
                tmp.replace(marker)
        except OSError as exc:
            raise SinkError(f"{self.name} cannot write batch {ctx.batch_id}: {exc}") from None
        self._last_batch = ctx.batch_id
        return SinkResult(written=written, skipped=0)

    def close(self) -> None:
        if self._out is not None and self._out is not sys.stdout:
            self._out.close()
        self._out = None
