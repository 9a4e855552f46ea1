"""The driver's read of a micro-batch side by side: one `collect` under a limit (the job's)
and `toLocalIterator` over the persisted batch (the job's read until this benchmark).

Before its sinks write, the driver reads the batch back from Spark: a Spark job even when the
stream reader's process holds the rows already (`prefetchHeld`). `toLocalIterator` runs one job
per partition, and persisting the batch first writes Spark's cache; a `collect` of the first
`single_pass_events` + 1 rows runs one job and nothing is cached unless the batch turns out too
large to hold. The rig is `bench-reader-options`' (`bench.peers_lag.LagRig`: one shard, the
generator's single-row transactions at ``--rate``, our job with its default source options into
a console file, a durable Version Stream and memcached with its fast lane). After one job that
is not recorded, each round runs the job once per read (`READS`, put in place of
`batch_delivery._head` before the job starts), the order rotating; per read, the median over the
rounds of each sink's lag and of Spark's per-batch phases. Writes `bench/results/read_back.json`.
Run with ``make bench-read-back``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from updatestream_jobs import batch_delivery

from bench.peers_lag import LagRig
from bench.reader_options_bench import setting_side_by_side


def persisted_iterator(frame: Any, most: int) -> list[Any]:
    """The job's read until this benchmark: the batch persisted, then `toLocalIterator`."""
    frame.persist()
    try:
        return list(itertools.islice(frame.toLocalIterator(prefetchPartitions=True), most + 1))
    finally:
        frame.unpersist()


READS: dict[str, Callable[[Any, int], list[Any]]] = {
    "collect (the job's)": batch_delivery._head,
    "persist + toLocalIterator": persisted_iterator,
}


def read_setter(rig: LagRig) -> Callable[[str], None]:
    """Puts the named read in place; the next job's batches read with it."""

    def use(name: str) -> None:
        batch_delivery._head = READS[name]

    return use


def main() -> None:
    setting_side_by_side(__doc__, "read_back", list(READS), read_setter)


if __name__ == "__main__":
    main()
