#!/usr/bin/env python3
"""Generate a Helm chart's values table from the `# --` comments of its values.yaml.

The comments follow helm-docs: `# -- text` directly above a key documents it (further `#`
lines continue the text). A documented key whose value is a map or a list is one row, with
its whole default; an undocumented map is descended into. Any other undocumented key is an
error, so every value the chart takes is described.

    scripts/chart-values-table.py charts/updatestream-operator           # print the table
    scripts/chart-values-table.py --write charts/updatestream-operator   # update README.md
    scripts/chart-values-table.py --check charts/updatestream-operator   # exit 1 if stale

README.md holds the table between `<!-- values-table:start -->` and `<!-- values-table:end -->`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

START = "<!-- values-table:start -->"
END = "<!-- values-table:end -->"
_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_.\-]+|\"[^\"]+\"):(?:\s|$)")
_MISSING = object()


class ValuesDocError(Exception):
    """values.yaml has keys without a `# --` description, or the README has no markers."""


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    description: str


# Python type -> the type name the table shows; bool before int, since a bool is an int.
_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "bool"),
    (int, "int"),
    (float, "float"),
    (str, "string"),
    (list, "list"),
    (dict, "object"),
)


def _type_name(value: Any) -> str:
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _default(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), sort_keys=False)
    return "`" + text.replace("|", "\\|") + "`"


def _lookup(data: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return _MISSING
        data = data[key]
    return data


def rows(values_file: Path) -> list[Row]:
    """One row per documented key, in file order; ValuesDocError lists undocumented ones."""
    text = values_file.read_text()
    data = yaml.safe_load(text) or {}
    found: list[Row] = []
    undocumented: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the maps being descended into
    pending: list[str] | None = None
    skip_below: int | None = None  # indent of a documented map/list whose body is skipped
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_below is not None:
            inside = indent > skip_below or (indent == skip_below and stripped.startswith("-"))
            if not stripped or inside:
                continue
            skip_below = None
        if not stripped:
            pending = None
            continue
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if pending is not None:
                pending.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if match is None:
            continue
        key = match.group("key").strip('"')
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key]
        value = _lookup(data, path)
        if value is _MISSING:
            raise ValuesDocError(f"{values_file}:{number}: cannot find {'.'.join(path)}")
        if pending:
            description = " ".join(part for part in pending if part)
            found.append(Row(".".join(path), _type_name(value), _default(value), description))
            if isinstance(value, dict | list) and value:
                skip_below = indent
        elif isinstance(value, dict) and value:
            stack.append((indent, key))
        else:
            undocumented.append(f"{'.'.join(path)} (line {number})")
        pending = None
    if undocumented:
        raise ValuesDocError(
            f"{values_file}: these values have no `# --` description above them: "
            + ", ".join(undocumented)
        )
    return found


def table(values_file: Path) -> str:
    lines = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for row in rows(values_file):
        description = row.description.replace("|", "\\|")
        lines.append(f"| `{row.key}` | {row.type} | {row.default} | {description} |")
    return "\n".join(lines) + "\n"


def render_readme(readme: str, values_table: str) -> str:
    if START not in readme or END not in readme:
        raise ValuesDocError(f"the README has no {START} ... {END} markers for the values table")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{values_table}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chart", type=Path, help="the chart directory")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="update the table in README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 if README.md is stale")
    args = parser.parse_args(argv)
    try:
        values_table = table(args.chart / "values.yaml")
        if not (args.write or args.check):
            sys.stdout.write(values_table)
            return 0
        readme_path = args.chart / "README.md"
        readme = readme_path.read_text()
        wanted = render_readme(readme, values_table)
    except (OSError, ValuesDocError, yaml.YAMLError) as exc:
        print(f"chart-values-table: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if wanted != readme:
            print(
                f"chart-values-table: the values table in {readme_path} is out of date; "
                f"run scripts/chart-values-table.py --write {args.chart}",
                file=sys.stderr,
            )
            return 1
        return 0
    if wanted != readme:
        readme_path.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
