"""A daemon thread that calls one function at a fixed interval until it is stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Ticker:
    """Calls `tick()` now and every `interval` seconds after, on a daemon thread named `name`."""

    def __init__(self, tick: Callable[[], object], interval: float, name: str) -> None:
        self._tick = tick
        self._interval = interval
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._tick()
            self._stop.wait(self._interval)

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the tick in progress; waits up to `timeout` seconds for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
