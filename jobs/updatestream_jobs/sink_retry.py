"""Riding out a sink server's outage: the same batch written again until the server is back.

A micro-batch's offsets are committed only once every sink took it, and every sink's write is
idempotent on replay, so when a sink's server does not answer (`SinkUnavailable`: refused, lost
connection, gone away) the job keeps the batch and writes it to that sink again, after a pause
that doubles from `first_delay` up to `max_delay`, for up to `give_up_after` seconds. Meanwhile
its status report says so (phase `waiting`, the error naming the sink by its index in
`spec.sinks`, its type and address, and what to do), which the operator shows as
`Degraded=True`, reason `SinkUnavailable`; the first batch delivered again clears it. Past
`give_up_after` the job fails with that error, and the operator relaunches it from its positions
as after any retryable failure. A stop request ends the wait at once.

Nothing here touches Spark or a server: the job hands in the write and the waiting callbacks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from updatestream_jobs.fatal_error import one_line
from updatestream_jobs.sinks.sink import SinkUnavailable

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SinkRetryPolicy:
    first_delay: float = 1.0  # seconds before the first new attempt
    max_delay: float = 15.0  # the pause doubles up to this
    give_up_after: float = 900.0  # seconds of outage after which the job fails

    def delay(self, failures: int) -> float:
        """The pause after the `failures`-th failed attempt in a row (1, 2, ...)."""
        return float(min(self.max_delay, self.first_delay * 2 ** max(0, failures - 1)))


def unavailable_message(
    index: int, exc: SinkUnavailable, batch_id: int, policy: SinkRetryPolicy
) -> str:
    """What the status report, the Degraded condition and the log say while the job waits."""
    return (
        f"spec.sinks[{index}]: {exc.kind} {exc.address} does not answer ({exc.cause}); the job "
        f"writes batch {batch_id} to it again every {policy.max_delay:.0f}s at most, for up to "
        f"{policy.give_up_after:.0f}s, and nothing is lost meanwhile: check that the server runs "
        "and that the job reaches it"
    )


def gave_up(index: int, exc: SinkUnavailable, waited: float) -> SinkUnavailable:
    """The job's fatal error once the outage lasted longer than the policy waits."""
    message = (
        f"spec.sinks[{index}]: {exc.kind} {exc.address} did not answer for {waited:.0f}s "
        f"({exc.cause}): check that the server runs and that the job reaches it; the job is "
        "relaunched from its positions"
    )
    return SinkUnavailable(message, kind=exc.kind, address=exc.address, cause=exc.cause)


@dataclass
class SinkRetry:
    """Writes one sink's share of a batch until it is taken (see the module)."""

    policy: SinkRetryPolicy
    stop: threading.Event
    secrets_dir: Path | None = None  # every Secret value mounted here is blanked from messages
    clock: Callable[[], float] = time.monotonic

    def write(
        self,
        attempt: Callable[[bool], T],
        *,
        index: int,
        batch_id: int,
        waiting: Callable[[str], None],
    ) -> T:
        """`attempt(again)` until it returns; `again` is True for every attempt after the
        first. `waiting(message)` is told after each failure the job waits out (one line, no
        Secret value)."""
        began: float | None = None
        failures = 0
        while True:
            try:
                return attempt(failures > 0)
            except SinkUnavailable as exc:
                now = self.clock()
                began = now if began is None else began
                failures += 1
                if now - began >= self.policy.give_up_after or self.stop.is_set():
                    raise gave_up(index, exc, now - began) from None
                message = unavailable_message(index, exc, batch_id, self.policy)
                waiting(one_line(SinkUnavailable(message), self.secrets_dir))
                if self.stop.wait(self.policy.delay(failures)):
                    raise gave_up(index, exc, self.clock() - began) from None
