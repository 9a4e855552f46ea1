"""A progress bar for a snapshot in a local run: chunks done of the estimated total, rows, the
rate and the time left, drawn on the terminal while `updatestream run` waits for its query."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from updatestream_jobs.progress_tracker import ProgressTracker


class SnapshotBar:
    """Called about once a second with the job's tracker (`Job.run(on_tick=...)`)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, tracker: ProgressTracker) -> None:
        report = tracker.snapshot_report()
        if report is None:
            return
        if self._progress is None:
            if report.finished:
                return
            self._progress = Progress(
                TextColumn("snapshot"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("chunks · {task.fields[rows]:,} rows · {task.fields[rate]:,.0f} rows/s"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("snapshot", total=None, rows=0, rate=0.0)
        assert self._task is not None
        self._progress.update(
            self._task,
            completed=report.chunks_done,
            total=max(report.chunks_total, report.chunks_done),
            rows=report.rows,
            rate=report.rows_per_second,
        )
        if report.finished:
            self.close()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
