"""The job's checkpoint logs are written through Spark's FileSystem-based checkpoint manager
(`updatestream_jobs.job.spark_session`); a checkpoint an earlier release wrote through the
FileContext-based default resumes at the next batch, none replayed or skipped."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from updatestream_jobs.job import CHECKPOINT_FILE_MANAGER

KEY = "spark.sql.streaming.checkpointFileManagerClass"
FILE_CONTEXT = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
)


def _run(spark: Any, checkpoint: Path, batches: int) -> list[int]:
    """Run a rate-source query into foreachBatch until `batches` more batches were written."""
    seen: list[int] = []
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .writeStream.foreachBatch(lambda frame, batch_id: seen.append(batch_id))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while len(seen) < batches:
            assert time.monotonic() < deadline, f"{len(seen)} batches in 120 s"
            time.sleep(0.1)
    finally:
        query.stop()
    return seen


def test_the_session_writes_checkpoints_through_the_file_system_manager(spark: Any) -> None:
    assert spark.conf.get(KEY) == CHECKPOINT_FILE_MANAGER


def test_a_checkpoint_written_through_file_context_resumes_at_the_next_batch(
    spark: Any, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    spark.conf.set(KEY, FILE_CONTEXT)
    try:
        before = _run(spark, checkpoint, 3)
    finally:
        spark.conf.set(KEY, CHECKPOINT_FILE_MANAGER)
    committed = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    after = _run(spark, checkpoint, 3)
    assert before == list(range(len(before)))
    assert after[0] == committed + 1, (before, committed, after)
    assert after == list(range(after[0], after[0] + len(after)))
    written = {p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()}
    assert {str(i) for i in after} <= written
