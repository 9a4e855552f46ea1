"""The size gate of `make lint` (`scripts/check_sizes.py`): what it measures, what fails it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_sizes.py"


def load_gate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_sizes", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_sizes"] = module
    spec.loader.exec_module(module)
    return module


gate = load_gate()


def function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly `lines` lines, `def` line included."""
    body = [f"{indent}    x = {i}" for i in range(lines - 2)]
    return "\n".join([f"{indent}def {name}():", *body, f"{indent}    return x"]) + "\n"


def test_a_function_of_sixty_lines_passes_and_one_of_sixty_one_does_not() -> None:
    assert gate.violations_in("a.py", function("short", 60)) == []
    [found] = gate.violations_in("a.py", function("long", 61))
    assert (found.key, found.line, found.lines) == ("a.py::long", 1, 61)
    assert str(found) == "a.py:1: function long is 61 lines (limit 60)"


def test_methods_and_nested_functions_are_named_by_their_qualified_name() -> None:
    source = "class Planner:\n" + function("partitions", 61, "    ")
    source += function("outer", 3) + function("inner", 61, "    ")
    keys = [found.key for found in gate.violations_in("b.py", source)]
    assert keys == ["b.py::Planner.partitions", "b.py::outer", "b.py::outer.inner"]


def test_a_module_over_450_lines_is_named_by_its_path() -> None:
    assert gate.violations_in("m.py", "x = 1\n" * 450) == []
    [found] = gate.violations_in("m.py", "x = 1\n" * 451)
    assert (found.key, found.lines) == ("m.py", 451)


def test_an_unlisted_violation_and_a_stale_listed_one_both_fail() -> None:
    found = gate.violations_in("a.py", function("long", 61)) + gate.violations_in(
        "m.py", "x = 1\n" * 451
    )
    assert gate.problems(found, ["a.py::long", "m.py"], "list.txt") == []
    assert gate.problems(found, ["a.py::long"], "list.txt") == [
        "m.py: module is 451 lines (limit 450): split it"
    ]
    assert gate.problems(found, ["a.py::long", "m.py", "gone.py::f"], "list.txt") == [
        "list.txt: gone.py::f is within the limits now (or gone): remove it from the list"
    ]


def run_gate(root: Path, allowlist: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), "--allowlist", str(allowlist)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_gate_reads_every_python_file_outside_tests_and_honours_its_list(
    tmp_path: Path,
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "big.py").write_text(function("main", 88))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_big.py").write_text(function("test_long", 200))
    allowlist = tmp_path / "allow.txt"
    allowlist.write_text("# nothing yet\n")
    failed = run_gate(tmp_path, allowlist)
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == [
        "bench/big.py:1: function main is 88 lines (limit 60): split it"
    ]
    allowlist.write_text("bench/big.py::main  # split by the bench work\n")
    assert run_gate(tmp_path, allowlist).returncode == 0
    (tmp_path / "bench" / "big.py").write_text(function("main", 20))
    stale = run_gate(tmp_path, allowlist)
    assert stale.returncode == 1
    assert "allow.txt: bench/big.py::main is within the limits now" in stale.stderr


def test_the_repository_passes_its_own_gate() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
