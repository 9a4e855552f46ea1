"""One thread at a time in `ast.parse`, for processes that format tracebacks from many threads.

CPython 3.11.7 keeps the recursion depth of its AST constructor in state shared by every thread
(the error is the one python/cpython#106905 reports). When two threads build ASTs at once, e.g.
pytest printing a failed test's source while a server thread logs a traceback (3.11's
tracebacks parse the line they underline), one of them raises `SystemError: AST constructor
recursion depth mismatch`; raised inside pytest's report, it ends the whole session with an
INTERNALERROR and no word of which test failed. `install()` makes `ast.parse`, which the
traceback module, inspect and pytest call, take a re-entrant lock first (re-entrant: a finalizer
may format a traceback while its thread is parsing).
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_lock = threading.RLock()
_unguarded = ast.parse


def _guarded_parse(*args: Any, **kwargs: Any) -> Any:
    with _lock:
        return _unguarded(*args, **kwargs)


def install() -> None:
    """Guard `ast.parse` in this process; calling it again changes nothing."""
    ast.parse = _guarded_parse


def installed() -> bool:
    return ast.parse is _guarded_parse
