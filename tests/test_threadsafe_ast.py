"""The test session's guard on `ast.parse` (harness.threadsafe_ast).

Without it, two threads parsing while finalizers run Python code raise `SystemError: AST
constructor recursion depth mismatch` on CPython 3.11.7 within half a second here; that error
inside pytest's failure report once ended a whole run with an INTERNALERROR.
"""

from __future__ import annotations

import ast
import sys
import threading
import time
from pathlib import Path

from harness import threadsafe_ast


class _Cycle:
    """Garbage only the cycle collector frees, with a finalizer that runs Python code: the
    collector can run it in the middle of a parse, and the interpreter can switch threads there."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(20))


def _parse_from_threads(seconds: float) -> list[str]:
    source = Path(ast.__file__).read_text()
    errors: list[str] = []
    stop = threading.Event()

    def parse() -> None:
        while not stop.is_set():
            try:
                ast.parse(source)
            except SystemError as exc:
                errors.append(str(exc))
                stop.set()

    def make_garbage() -> None:
        while not stop.is_set():
            for _ in range(100):
                _Cycle()
            time.sleep(0.001)

    threads = [threading.Thread(target=parse) for _ in range(2)]
    threads.append(threading.Thread(target=make_garbage))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for thread in threads:
            thread.start()
        stop.wait(seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(interval)
    return errors


def test_the_session_parses_one_thread_at_a_time() -> None:
    assert threadsafe_ast.installed(), "tests/conftest.py installs the guard"
    assert _parse_from_threads(2.0) == []
