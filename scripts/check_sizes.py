#!/usr/bin/env python3
"""The size gate `make lint` runs: modules of at most 450 lines, functions of at most 60.

Every Python file of the repository outside `tests/` is read (the product packages, `bench/`,
`harness/`, `scripts/`, ...): the files git tracks and the new ones it does not ignore. A
module's size is its number of lines; a function's or a method's runs from its `def` line to
its last line, docstring and nested functions included (a nested function is also measured on
its own). A function is named by its qualified name in the module, `Class.method` or
`outer.inner`.

A known violation may be listed in the allowlist (`scripts/size_allowlist.txt`), one a line:
`path` for a module, `path::qualified.name` for a function; `#` starts a comment. The gate
fails on every violation that is not listed, and on every listed one that is no longer a
violation, so the list only ever shrinks:

    scripts/check_sizes.py                   # exit 1 and one line per problem
    scripts/check_sizes.py --list            # print every violation, listed or not
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MODULE_LINES = 450
FUNCTION_LINES = 60
ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "scripts" / "size_allowlist.txt"
EXCLUDED = ("tests/",)


@dataclass(frozen=True)
class Violation:
    """A module or a function over its limit; `key` is how the allowlist names it."""

    path: str
    line: int
    name: str | None  # the function's qualified name; None for the module itself
    lines: int

    @property
    def key(self) -> str:
        return self.path if self.name is None else f"{self.path}::{self.name}"

    def __str__(self) -> str:
        if self.name is None:
            return f"{self.path}: module is {self.lines} lines (limit {MODULE_LINES})"
        return (
            f"{self.path}:{self.line}: function {self.name} is {self.lines} lines "
            f"(limit {FUNCTION_LINES})"
        )


def python_files(root: Path) -> list[str]:
    """The repository's Python files outside the excluded folders, relative to `root`."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.py"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return sorted(
        path for path in set(listed) if not path.startswith(EXCLUDED) and (root / path).is_file()
    )


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method below `node`, with its qualified name."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield name, child
            yield from _functions(child, f"{name}.")
        else:
            yield from _functions(child, prefix)


def violations_in(path: str, source: str) -> list[Violation]:
    """Every limit `source` (the text of the module at `path`) goes over."""
    found = []
    lines = len(source.splitlines())
    if lines > MODULE_LINES:
        found.append(Violation(path, 1, None, lines))
    for name, function in _functions(ast.parse(source, filename=path)):
        start, end = function.lineno, function.end_lineno or function.lineno
        if end - start + 1 > FUNCTION_LINES:
            found.append(Violation(path, start, name, end - start + 1))
    return found


def read_allowlist(path: Path) -> list[str]:
    if not path.exists():
        return []
    entries = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [entry for entry in entries if entry]


def problems(found: list[Violation], allowed: list[str], allowlist_name: str) -> list[str]:
    """What fails the gate: violations not allowed, and allowed ones that are gone."""
    keys = {violation.key for violation in found}
    out = [f"{violation}: split it" for violation in found if violation.key not in allowed]
    out += [
        f"{allowlist_name}: {entry} is within the limits now (or gone): remove it from the list"
        for entry in allowed
        if entry not in keys
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--list", action="store_true", help="print every violation and exit 0")
    parser.add_argument("--allowlist", type=Path, default=ALLOWLIST)
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    found = [
        violation
        for path in python_files(args.root)
        for violation in violations_in(path, (args.root / path).read_text(encoding="utf-8"))
    ]
    if args.list:
        print("\n".join(str(violation) for violation in found) or "no violations")
        return 0
    allowlist = args.allowlist.resolve()
    shown = str(
        allowlist.relative_to(args.root.resolve())
        if allowlist.is_relative_to(args.root.resolve())
        else allowlist
    )
    failures = problems(found, read_allowlist(args.allowlist), shown)
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
