"""The checkpoint file manager side by side: Spark's FileSystem-based one (the job's) and its
FileContext-based default.

Every micro-batch writes an entry of the offset log (`walCommit`) and one of the commit log
(`commitOffsets`) into the job's checkpoint; the manager decides how. The rig is
`bench-reader-options`' (`bench.peers_lag.LagRig`: one shard, the generator's single-row
transactions at ``--rate``, our job with its default source options into a console file, a
durable Version Stream and memcached with its fast lane). After one job that is not recorded,
each round runs the job once per manager (`MANAGERS`, set in the session before the job
starts), the order rotating; per manager, the median over the rounds of each sink's lag and of
Spark's per-batch phases. Writes `bench/results/checkpoint_manager.json`. Run with
``make bench-checkpoint``.
"""

from __future__ import annotations

from collections.abc import Callable

from updatestream_jobs.job import CHECKPOINT_FILE_MANAGER

from bench.peers_lag import LagRig
from bench.reader_options_bench import setting_side_by_side

KEY = "spark.sql.streaming.checkpointFileManagerClass"
MANAGERS = {
    "FileSystem (the job's)": CHECKPOINT_FILE_MANAGER,
    "FileContext (Spark's default)": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
    ),
}


def manager_setter(rig: LagRig) -> Callable[[str], None]:
    """Sets the named manager in the rig's session; the next job's query starts with it."""
    return lambda name: rig.spark.conf.set(KEY, MANAGERS[name])


def main() -> None:
    setting_side_by_side(__doc__, "checkpoint_manager", list(MANAGERS), manager_setter)


if __name__ == "__main__":
    main()
