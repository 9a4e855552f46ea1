"""The verifier's own inputs: the traffic ledger and the job's status file; typed input errors."""

from __future__ import annotations

import json
from pathlib import Path

from updatestream.contract.progress_report import ProgressError, ProgressReport
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import FULL_RANGE, KeyRange
from updatestream_cli.verify.compare import Committed

_LEDGER_FIELDS = ("order", "table", "pk", "op", "digest", "shard", "gtid")


class VerifyInputError(UpdateStreamError):
    """An input of the verifier is missing, unreadable or malformed; nothing was compared."""


def read_ledger(path: Path) -> list[Committed]:
    """Every committed change of a ledger file (`updatestream devcluster traffic --ledger`)."""
    if not path.is_file():
        raise VerifyInputError(
            f"ledger {path} does not exist or is not a file; pass the file written by "
            "'updatestream devcluster traffic --ledger'"
        )
    changes: list[Committed] = []
    try:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                changes.append(_entry(line, path, number))
    except OSError as exc:
        raise VerifyInputError(f"cannot read ledger {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise VerifyInputError(f"ledger {path} is not UTF-8 text") from None
    return changes


def _entry(line: str, path: Path, number: int) -> Committed:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise VerifyInputError(
            f"ledger {path} line {number} is not JSON ({exc.msg}); is it a traffic ledger?"
        ) from None
    missing = [f for f in _LEDGER_FIELDS if not isinstance(data, dict) or f not in data]
    if missing:
        raise VerifyInputError(
            f"ledger {path} line {number} lacks {', '.join(missing)}; is it a traffic ledger?"
        )
    if data["op"] not in ("insert", "update", "delete"):
        raise VerifyInputError(f"ledger {path} line {number} has unknown op {data['op']!r}")
    return Committed(
        order=int(data["order"]),
        table=str(data["table"]),
        pk=str(data["pk"]),
        op=str(data["op"]),
        digest=None if data["digest"] is None else str(data["digest"]),
        shard=str(data["shard"]),
        gtid=str(data["gtid"]),
        commit_time=float(data.get("commit_time") or 0.0),
        keyspace_id=str(data["keyspace_id"]) if data.get("keyspace_id") else None,
    )


def within_key_range(committed: list[Committed], key_range: str, path: Path) -> list[Committed]:
    """The ledger entries of rows in `key_range` (what a stream over that range must deliver)."""
    try:
        wanted = KeyRange.parse(key_range)
    except UpdateStreamError as exc:
        raise VerifyInputError(f"--key-range {key_range!r}: {exc}") from None
    if wanted == FULL_RANGE:
        return committed
    kept = []
    for entry in committed:
        if entry.keyspace_id is None:
            raise VerifyInputError(
                f"ledger {path} entry {entry.order} has no keyspace_id, so --key-range "
                f"{key_range} cannot select it; write the ledger with the traffic generator"
            )
        if wanted.contains(bytes.fromhex(entry.keyspace_id)):
            kept.append(entry)
    return kept


# Causes the job counts but delivers: `unknown` is an event in an overlap window without
# provenance, which the dedup rule cannot decide on. Whether it was a duplicate is for the
# comparison with the ledger to say.
DELIVERED_CAUSES = frozenset({"unknown"})


def read_duplicates(path: Path | None) -> tuple[int, dict[str, int]]:
    """The duplicates the job dropped, and what its dedup rule counted by cause, from its
    progress report (its status file); (0, {}) without a file. The total leaves out the causes
    the job delivered."""
    if path is None:
        return 0, {}
    if not path.exists():
        raise VerifyInputError(f"status file {path} does not exist; pass the job's --status-file")
    try:
        by_cause = dict(ProgressReport.read(path).duplicates)
    except ProgressError as exc:
        raise VerifyInputError(str(exc)) from None
    dropped = sum(n for cause, n in by_cause.items() if cause not in DELIVERED_CAUSES)
    return dropped, by_cause
