"""Reading a job's progress report into the operator's `JobProgress`.

The report's format is the job's `ProgressReport` (`updatestream.contract.progress_report`); this
module keeps what the operator acts on: per shard the last delivered token, the changes by op
(heartbeats are progress markers, not changes) and the lag; the duplicates by cause; the phase
and error; and, from a job that hops inside its running query, the serving shard map it reads
and its hops. A report that cannot be read raises `ProgressError` naming the field.
"""

from __future__ import annotations

from typing import Any

from updatestream.contract.progress_report import HopReport, ProgressError, ProgressReport
from updatestream.core.keyrange import KeyRange
from updatestream_operator.reconciler.models import JobProgress, ReportedHop, ShardProgress

__all__ = ["ProgressError", "job_progress", "loads_progress", "parse_progress"]


def _hop(hop: HopReport) -> ReportedHop:
    return ReportedHop(
        from_map=hop.from_map,
        to_map=hop.to_map,
        from_shards=tuple(hop.from_shards),
        to_shards=tuple(hop.to_shards),
        detected_at=hop.detected_at,
        serving_changed_at=hop.serving_changed_at,
        completed_at=hop.completed_at,
        duration_seconds=hop.duration_seconds,
        duplicates_dropped=hop.duplicates_dropped,
    )


def job_progress(report: ProgressReport, *, launch_id: int | None) -> JobProgress:
    """What the operator keeps of a report of launch `launch_id`."""
    return JobProgress(
        launch_id=launch_id,
        shards={
            KeyRange.parse(name): ShardProgress(
                token=shard.token, events=shard.changes, lag_seconds=shard.lag_seconds
            )
            for name, shard in report.shards.items()
        },
        duplicates=dict(report.duplicates),
        updated_at=report.updated_at,
        error=report.error or None,
        retryable=report.retryable,
        phase=report.phase or None,
        batches=report.batches,
        idle_triggers=report.idle_triggers,
        duplicates_delivered={
            name: sink.duplicates_delivered for name, sink in sorted(report.sinks.items())
        },
        shard_map=report.shard_map,
        hops=tuple(_hop(hop) for hop in report.hops),
        snapshot=report.snapshot,
        dedup=report.dedup,
    )


def parse_progress(data: Any, *, launch_id: int | None) -> JobProgress:
    """A decoded status report as a `JobProgress` of launch `launch_id`."""
    return job_progress(ProgressReport.parse(data), launch_id=launch_id)


def loads_progress(text: str, *, launch_id: int | None, source: str) -> JobProgress:
    """A status report's text; errors name `source` (a file or a ConfigMap)."""
    return job_progress(ProgressReport.loads(text, source=source), launch_id=launch_id)
