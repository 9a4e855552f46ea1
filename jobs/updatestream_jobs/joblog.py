"""Where a job's diagnostic output goes: a trace file, not the user's terminal.

A failing Spark query prints about a hundred lines of Java stack and Python traceback (log4j in
the JVM, the Python workers' tracebacks, py4j's wrappers), and at exit the JVM complains about
listeners whose Python side is gone. None of it helps a user more than the job's own one-line
`error: ...`. `TraceFile` points the process's standard error (file descriptor 2, which the JVM
and the Python workers it starts inherit) at a file for the duration of the job and keeps the
original for the user: the job's own warnings (the `updatestream*` loggers), its line every so
many batches (rows, lag, batch time: `batch_log`) and, on failure, one line saying where the
full trace is (a note on the exception, printed under its
`error: ...` line). Standard output is left alone.

Under spark-submit the JVM is the parent of the Python driver and keeps its own standard error:
its logging follows the log4j2 configuration of `SPARK_CONF_DIR`.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from types import TracebackType
from typing import IO

from updatestream.core.errors import UpdateStreamError

_OUR_LOGGERS = ("updatestream", "updatestream_jobs")
_BATCH_LINES = "updatestream_jobs.batches"


class JobFailed(UpdateStreamError):
    """The Spark query failed with an error that is not one of the job's own typed errors."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an error's message (Spark's carry whole stacks)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def default_trace_path(checkpoint: Path) -> Path:
    """Next to the checkpoint: `<checkpoint>.log`."""
    return checkpoint.with_name(f"{checkpoint.name}.log")


def _for_the_console(record: logging.LogRecord) -> bool:
    """Warnings and errors, and the job's line every so many batches (`batch_log`)."""
    return record.levelno >= logging.WARNING or record.name == _BATCH_LINES


class TraceFile:
    """A context in which file descriptor 2 writes to `path` (appended); the user's standard
    error stays reachable as `console`. On an exception the full traceback goes to the file and
    the exception, otherwise unchanged, gets a note naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.console: IO[str] = sys.stderr
        self._saved_fd: int | None = None
        self._file: IO[str] | None = None
        self._handlers: list[tuple[logging.Logger, logging.Handler]] = []
        self._levels: dict[str, int] = {}

    def __enter__(self) -> TraceFile:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8", errors="replace")
        sys.stderr.flush()
        self._saved_fd = os.dup(2)
        self.console = os.fdopen(os.dup(self._saved_fd), "w", buffering=1, encoding="utf-8")
        os.dup2(self._file.fileno(), 2)
        self._attach_logging()
        return self

    def _attach_logging(self) -> None:
        assert self._file is not None
        to_file = logging.StreamHandler(self._file)
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        to_console = logging.StreamHandler(self.console)
        to_console.addFilter(_for_the_console)
        to_console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        for name in _OUR_LOGGERS:
            logger = logging.getLogger(name)
            self._levels[name] = logger.level
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.INFO)
            for handler in (to_file, to_console):
                logger.addHandler(handler)
                self._handlers.append((logger, handler))

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._file is not None and self._saved_fd is not None
        if exc is not None:
            self._file.write("\n")
            traceback.print_exception(exc, file=self._file)
        self._file.flush()
        sys.stderr.flush()
        os.dup2(self._saved_fd, 2)
        os.close(self._saved_fd)
        for logger, handler in self._handlers:
            logger.removeHandler(handler)
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)
        self._file.close()
        self.console.close()
        if isinstance(exc, Exception):
            exc.add_note(f"the job's full trace (Spark, Python) is in {self.path}")
