"""The shared benchmark summary: one flat JSON object that every benchmark updates in place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SUMMARY = Path(__file__).resolve().parent / "results" / "summary.json"


def merge_summary(figures: dict[str, Any], path: Path = SUMMARY) -> None:
    """Write `figures` into the summary, keeping the other benchmarks' keys (atomic replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    if path.exists():
        summary = json.loads(path.read_text(encoding="utf-8"))
    summary.update(figures)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
