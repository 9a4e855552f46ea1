"""The verifier's own inputs: the ledger entries of a key range and the job's status file; typed
input errors. The ledger itself is read by its owner, `updatestream_cli.devcluster.ledger`."""

from __future__ import annotations

from pathlib import Path

from updatestream.contract.progress_report import ProgressError, ProgressReport
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import FULL_RANGE, KeyRange
from updatestream_cli.devcluster.ledger import LedgerEntry


class VerifyInputError(UpdateStreamError):
    """An input of the verifier is missing, unreadable or malformed; nothing was compared."""


def within_key_range(committed: list[LedgerEntry], key_range: str) -> list[LedgerEntry]:
    """The ledger entries of rows in `key_range` (what a stream over that range must deliver)."""
    try:
        wanted = KeyRange.parse(key_range)
    except UpdateStreamError as exc:
        raise VerifyInputError(f"--key-range {key_range!r}: {exc}") from None
    if wanted == FULL_RANGE:
        return committed
    return [e for e in committed if wanted.contains(bytes.fromhex(e.keyspace_id))]


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
