"""One line in the driver's log every so many micro-batches: rows, lag and batch time.

The job's log otherwise says nothing while it streams well; these lines show that it does, and
at what pace, without a line per batch (a stream runs several batches a second).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

# A logger of its own: the job's console shows its INFO lines (and only warnings of the rest).
log = logging.getLogger("updatestream_jobs.batches")

EVERY_BATCHES = 100


@dataclass
class BatchLog:
    """Sums of the batches since the last line; a line for the first batch, then one every
    `every` batches."""

    every: int = EVERY_BATCHES
    first_id: int | None = None
    batches: int = 0
    rows: int = 0
    max_lag: float = 0.0
    seconds: float = 0.0
    max_seconds: float = 0.0
    logged: int = 0  # lines written

    def add(self, batch_id: int, rows: int, lag: float, seconds: float) -> str | None:
        """Count one finished batch; returns the line written, if one is due."""
        if self.first_id is None:
            self.first_id = batch_id
        self.batches += 1
        self.rows += rows
        self.max_lag = max(self.max_lag, lag)
        self.seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)
        if self.logged and self.batches < self.every:
            return None
        if self.batches == 1:
            line = (
                f"batch {batch_id}: {rows:,} rows, lag {lag:.1f}s, {seconds:.2f}s; a line every "
                f"{self.every} batches from here"
            )
        else:
            line = (
                f"batches {self.first_id}-{batch_id}: {self.rows:,} rows, max lag "
                f"{self.max_lag:.1f}s, batch time mean {self.seconds / self.batches:.2f}s max "
                f"{self.max_seconds:.2f}s"
            )
        log.info("%s", line)
        self.logged += 1
        self.first_id, self.batches, self.rows = None, 0, 0
        self.max_lag = self.seconds = self.max_seconds = 0.0
        return line
