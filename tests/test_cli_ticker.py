"""The ticker behind the demo's operator thread and the benchmarks' RSS sampler."""

import threading
import time

from updatestream_cli.ticker import Ticker


def test_a_ticker_calls_at_once_then_every_interval_until_stopped() -> None:
    calls: list[float] = []
    twice = threading.Event()

    def tick() -> None:
        calls.append(time.monotonic())
        if len(calls) >= 2:
            twice.set()

    ticker = Ticker(tick, 0.05, "test-ticker")
    ticker.start()
    assert twice.wait(timeout=30), "the ticker did not call twice"
    ticker.stop(timeout=30)
    stopped = len(calls)
    time.sleep(0.2)
    assert len(calls) == stopped  # nothing after stop
    assert calls[1] - calls[0] >= 0.04  # the interval is waited between calls
    assert not any(t.name == "test-ticker" for t in threading.enumerate())
