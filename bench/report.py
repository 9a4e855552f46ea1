"""What every benchmark keeps besides its figures: the machine, its load, a result file, a table."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parent / "results"

console = Console(width=max(Console().width, 110))  # tables stay whole in a log file


def machine() -> str:
    """The machine in a few words: cores, memory, CPU model (no host name, no path)."""
    memory = psutil.virtual_memory().total / 2**30
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs, {memory:.0f} GiB RAM, {model}"


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded: the figures are only as quiet as this."""
    return [round(x, 2) for x in os.getloadavg()]


def say_load() -> list[float]:
    load = load_average()
    console.print(f"load average {' '.join(f'{x:.1f}' for x in load)} on {machine()}")
    return load


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def write_result(name: str, payload: Any, directory: Path = RESULTS) -> Path:
    """Write `bench/results/<name>.json` (atomic replace); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    text = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False)
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """One rich table; text columns left-aligned, figures right-aligned."""
    rows = list(rows)
    table = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        text = bool(rows) and isinstance(rows[0][i], str)
        table.add_column(column, justify="left" if text else "right")
    for row in rows:
        table.add_row(*(cell if isinstance(cell, str) else fmt(cell) for cell in row))
    console.print(table)


def fmt(value: Any) -> str:
    """Figures as the README shows them: thousands separated, at most three decimals."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)
