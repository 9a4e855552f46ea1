"""The snapshot's progress bar and report in a local run, from the tracker's view of it."""

from __future__ import annotations

import io

from rich.console import Console
from updatestream_jobs.progress_tracker import ProgressTracker
from updatestream_jobs.snapshotbar import SnapshotBar

from updatestream.core.snapshot_plan import SnapshotRange, SnapshotState


def test_the_bar_shows_chunks_rows_and_rate_until_the_snapshot_is_done() -> None:
    clock = iter([110.0] * 10 + [120.0] * 10)
    tracker = ProgressTracker("s", "-", clock=lambda: next(clock))
    out = io.StringIO()
    bar = SnapshotBar(Console(file=out, force_terminal=True, width=120))
    bar(tracker)  # nothing to show yet
    assert out.getvalue() == ""
    state = SnapshotState((SnapshotRange("-", "users", (100,), estimate=4),), started_at=100.0)
    tracker.observe_snapshot(state.advance([(state.ranges[0], (50,))]))
    tracker.snapshot_rows = 5000
    bar(tracker)
    report = tracker.snapshot_report()
    assert report is not None and (report.chunks_done, report.chunks_total) == (1, 4)
    assert report.rows_per_second == 500.0 and not report.finished
    done = state.advance([(state.ranges[0], (100,))])
    tracker.observe_snapshot(done)
    bar(tracker)
    text = out.getvalue()
    assert "snapshot" in text and "chunks" in text and "5,000 rows" in text
    final = tracker.snapshot_report()
    assert final is not None and final.finished and final.eta_seconds == 0.0
