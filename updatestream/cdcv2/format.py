"""The CDCv2 statements and how they are written down.

Two kinds of statement, both true about the final history once written:

* an **update** ``(data, time, diff)``: at ``time`` the multiplicity of ``data`` changes by
  ``diff``. For a change stream ``data`` is one row of one table
  (``{"table": ..., "pk": {...}, "row": {...}}``); an update of a row is ``-1`` of its before
  image and ``+1`` of its after image, an insert only the ``+1``, a delete only the ``-1``.
  Updates are consolidated: one ``(data, time)`` pair appears with one non-zero ``diff``.
* a **progress** statement ``(lower, upper, counts)``: every time ``t`` with
  ``lower <= t < upper`` has exactly the number of distinct updates given in ``counts``
  (times not listed have none). ``lower`` and ``upper`` are antichains of times; times here are
  integers (seconds since the epoch), so each holds one element, and an empty ``upper`` would
  close the stream.

Statements are JSON lines, one per line::

    {"update": [{"table": "users", "pk": {"id": 1}, "row": {...}}, 1700000000, 1]}
    {"progress": {"lower": [0], "upper": [1700000001], "counts": [[1700000000, 1]]}}

Layout of a stream directory (``<path>/<stream>/range=<key range>/``)::

    batch-000000000042.jsonl   the statements of Spark batch 42, written to a temporary file
                               and renamed into place, so a replayed batch replaces the file
                               with identical content (``.parquet`` in the Parquet format:
                               one row per statement, see ``encode_parquet``)
    batch-000000000042.part-003.jsonl
                               with parallel writers (`updatestream.cdcv2.parallel_writer`):
                               the update statements part 3 of the keys wrote in batch 42;
                               ``batch-000000000042.jsonl`` then holds the batch's progress
    _state/                    the writer's carry-over state (not part of the stream)

Files starting with ``.`` or ``_`` are not part of the stream. A reader may take the files in
any order, any number of times.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from updatestream.core.errors import UpdateStreamError

BATCH_PREFIX = "batch-"
BATCH_SUFFIX = ".jsonl"
PARQUET_SUFFIX = ".parquet"
SUFFIXES = (BATCH_SUFFIX, PARQUET_SUFFIX)


class CDCv2FormatError(UpdateStreamError):
    """A CDCv2 file or statement is malformed, or statements contradict each other."""


@dataclass(frozen=True, slots=True)
class Update:
    """One update statement; ``data`` is any JSON value (a row for a change stream)."""

    data: Any
    time: int
    diff: int


@dataclass(frozen=True, slots=True)
class Progress:
    """Every time in ``[lower, upper)`` has exactly ``counts[time]`` distinct updates."""

    lower: int
    upper: int | None  # None: the stream is closed (an empty upper antichain)
    counts: tuple[tuple[int, int], ...]


Statement: TypeAlias = Update | Progress


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical(data: Any) -> str:
    """The canonical JSON text of a datum: equal data give equal text."""
    return _CANONICAL.encode(data)


def encode_update(data_text: str, time: int, diff: int) -> str:
    """An update line from the canonical JSON text of its datum."""
    return f'{{"update":[{data_text},{time:d},{diff:d}]}}'


def encode(statement: Statement) -> str:
    """One statement as one JSON line (without the newline)."""
    if isinstance(statement, Update):
        return encode_update(canonical(statement.data), statement.time, statement.diff)
    upper = [] if statement.upper is None else [statement.upper]
    body = {"lower": [statement.lower], "upper": upper, "counts": list(statement.counts)}
    return json.dumps({"progress": body}, separators=(",", ":"))


def _int(value: Any, what: str, line: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CDCv2FormatError(f"{what} must be an integer in CDCv2 statement {line[:200]!r}")
    return value


def _single(values: Any, what: str, line: str, *, allow_empty: bool) -> int | None:
    if not isinstance(values, list) or len(values) > 1 or (not values and not allow_empty):
        raise CDCv2FormatError(
            f"{what} must be a list of one integer time in CDCv2 statement {line[:200]!r}"
        )
    return _int(values[0], what, line) if values else None


def decode(line: str) -> Statement:
    """Parse one JSON line written by :func:`encode`."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise CDCv2FormatError(f"CDCv2 line is not JSON ({exc}): {line[:200]!r}") from None
    if isinstance(obj, dict) and "update" in obj:
        body = obj["update"]
        if not isinstance(body, list) or len(body) != 3:
            raise CDCv2FormatError(f"update must be [data, time, diff]: {line[:200]!r}")
        return Update(body[0], _int(body[1], "time", line), _int(body[2], "diff", line))
    if isinstance(obj, dict) and "progress" in obj:
        body = obj["progress"]
        if not isinstance(body, dict):
            raise CDCv2FormatError(f"progress must be an object: {line[:200]!r}")
        lower = _single(body.get("lower"), "lower", line, allow_empty=False)
        assert lower is not None
        upper = _single(body.get("upper"), "upper", line, allow_empty=True)
        raw_counts = body.get("counts", [])
        if not isinstance(raw_counts, list):
            raise CDCv2FormatError(f"counts must be a list of [time, count]: {line[:200]!r}")
        counts = []
        for pair in raw_counts:
            if not isinstance(pair, list) or len(pair) != 2:
                raise CDCv2FormatError(f"counts must be a list of [time, count]: {line[:200]!r}")
            counts.append((_int(pair[0], "count time", line), _int(pair[1], "count", line)))
        return Progress(lower, upper, tuple(counts))
    raise CDCv2FormatError(f"CDCv2 line is neither an update nor a progress: {line[:200]!r}")


PART_INFIX = ".part-"


def batch_file_name(batch_id: int, suffix: str = BATCH_SUFFIX, part: int | None = None) -> str:
    """A batch's file name; with `part`, the file of one of the batch's parallel writers."""
    infix = "" if part is None else f"{PART_INFIX}{part:03d}"
    return f"{BATCH_PREFIX}{batch_id:012d}{infix}{suffix}"


def batch_id_of(path: Path) -> int | None:
    """The batch id in a stream file name, or None for files that are not batch files."""
    name = path.name
    suffix = next((x for x in SUFFIXES if name.endswith(x)), None)
    if suffix is None or not name.startswith(BATCH_PREFIX):
        return None
    digits, _, part = name[len(BATCH_PREFIX) : -len(suffix)].partition(PART_INFIX)
    if part and not part.isdigit():
        return None
    return int(digits) if digits.isdigit() else None


def stream_files(directory: Path) -> list[Path]:
    """The batch files of one stream directory, in batch order."""
    found = [(batch_id_of(p), p) for p in directory.iterdir() if p.is_file()]
    return [p for batch_id, p in sorted((b, p) for b, p in found if b is not None)]


def read_file(path: Path) -> Iterator[Statement]:
    """The statements of one file, with errors naming the file and line."""
    if path.name.endswith(PARQUET_SUFFIX):
        yield from read_parquet(path)
        return
    with path.open("r", encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield decode(line)
            except CDCv2FormatError as exc:
                raise CDCv2FormatError(f"{path}:{number}: {exc}") from None


def write_atomically(path: Path, lines: Iterable[str]) -> None:
    """Write lines to a temporary file beside ``path``, fsync, rename over ``path``."""
    write_bytes_atomically(path, "".join(f"{line}\n" for line in lines).encode("utf-8"))


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync, rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# -- Parquet ------------------------------------------------------------------------------------
# One row per statement: kind ("update" or "progress"); for updates data (canonical JSON text),
# time and diff; for progress lower, upper (null: closed) and counts (list of {time, count}).


def _parquet_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("kind", pa.string()),
            ("data", pa.string()),
            ("time", pa.int64()),
            ("diff", pa.int64()),
            ("lower", pa.int64()),
            ("upper", pa.int64()),
            ("counts", pa.list_(pa.struct([("time", pa.int64()), ("count", pa.int64())]))),
        ]
    )


def encode_parquet(updates: Iterable[tuple[str, int, int]], progress: Progress | None) -> bytes:
    """A Parquet file of update statements ``(data text, time, diff)`` and one progress."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = [
        {"kind": "update", "data": d, "time": t, "diff": r} for d, t, r in updates
    ]
    if progress is not None:
        counts = [{"time": t, "count": n} for t, n in progress.counts]
        rows.append(
            {"kind": "progress", "lower": progress.lower, "upper": progress.upper, "counts": counts}
        )
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=_parquet_schema()), sink)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def read_parquet(path: Path) -> Iterator[Statement]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several kinds for a damaged file
        raise CDCv2FormatError(f"{path}: not a readable CDCv2 Parquet file: {exc}") from None
    for number, row in enumerate(rows, start=1):
        if row.get("kind") == "update" and row.get("time") is not None:
            yield Update(json.loads(row["data"]), int(row["time"]), int(row["diff"]))
        elif row.get("kind") == "progress" and row.get("lower") is not None:
            counts = tuple((int(c["time"]), int(c["count"])) for c in row.get("counts") or ())
            upper = row.get("upper")
            yield Progress(int(row["lower"]), None if upper is None else int(upper), counts)
        else:
            raise CDCv2FormatError(f"{path}: row {number} is not a CDCv2 statement: {row}")
