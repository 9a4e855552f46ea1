"""UpdateStream manifests as a user writes them, for the demo, the tests and the benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from updatestream.spec import API_VERSION


def update_stream(
    name: str,
    keyspace: str,
    start: dict[str, Any],
    sinks: Sequence[dict[str, Any]],
    key_ranges: Sequence[str] = ("-",),
    **more: Any,
) -> dict[str, Any]:
    """An `UpdateStream` of `keyspace`'s `key_ranges` from `start` into `sinks`; `more` adds
    spec fields (`tables`, ...)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "UpdateStream",
        "metadata": {"name": name},
        "spec": {
            "keyspace": keyspace,
            "keyRanges": list(key_ranges),
            "start": start,
            "sinks": list(sinks),
            **more,
        },
    }
