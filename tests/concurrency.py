"""Running test work in several threads at once."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def run_at_once(work: Callable[[int], None], workers: int) -> None:
    """Run `work(0)` to `work(workers - 1)`, each in a thread of its own, all at once; once every
    one has ended, re-raise the first error any of them raised."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(work, number) for number in range(workers)]
    for future in futures:
        future.result()
