"""`updatestream keyspace-id` and `shard-for`, run through the installed console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "updatestream"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_console_script_is_installed() -> None:
    assert SCRIPT.is_file()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("keyspace-id", "1"), "166b40b44aba4bd6"),
        (("keyspace-id", "--vindex", "hash", "2"), "06e7ea22ce92708f"),
        (("keyspace-id", "--vindex=hash", "6"), "f098480ac4c4be71"),
        (("keyspace-id", "--vindex", "numeric", "258"), "0000000000000102"),
        (("keyspace-id", "--vindex", "binary_md5", "test1"), "5a105e8b9d40e1329780d62ea2265d8a"),
        (("keyspace-id", "--vindex", "xxhash", "1"), "d46405367612b4b7"),
        (("shard-for", "--shards=-40,40-80,80-", "--vindex", "hash", "1"), "-40"),
        (("shard-for", "--shards=-40,40-80,80-", "3"), "40-80"),
        (("shard-for", "--shards", "-40,40-80,80-", "4"), "80-"),
        (("shard-for", "--shards=80-,-80", "--vindex", "numeric", "1"), "-80"),
        (("shard-for", "--shards=-", "1"), "-"),
        (("shard-for", "--shards=-80,80-", "--keyspace-id", "80"), "80-"),
        (("shard-for", "--shards=-80,80-", "--keyspace-id", "7fffffffffffffff"), "-80"),
    ],
)
def test_prints_the_answer(args: tuple[str, ...], expected: str) -> None:
    result = run(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected + "\n"
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("keyspace-id", "abc"),
            "error: vindex 'hash' (type hash) cannot map 'abc': it takes an unsigned 64-bit "
            "integer in decimal; use --vindex xxhash or binary_md5 for text",
        ),
        (
            ("keyspace-id", "-5"),
            "error: vindex 'hash' (type hash) cannot map -5: negative numbers have no keyspace "
            "id; use an unsigned column or another vindex type (xxhash)",
        ),
        (
            ("keyspace-id", "--vindex", "numeric", "18446744073709551616"),
            "error: vindex 'numeric' (type numeric) cannot map 18446744073709551616: it is above "
            "2**64-1, the largest unsigned 64-bit integer",
        ),
        (
            ("keyspace-id", "--vindex", "md5", "1"),
            "error: --vindex 'md5' is not a vindex type this command can compute; use one of "
            "binary_md5, hash, numeric, xxhash",
        ),
        (
            ("keyspace-id", "--vindex", "lookup_unique", "1"),
            "error: --vindex 'lookup_unique' is not a vindex type this command can compute; "
            "use one of binary_md5, hash, numeric, xxhash",
        ),
        (
            ("keyspace-id",),
            "error: give the column value to map, like: keyspace-id --vindex hash 100",
        ),
        (
            ("keyspace-id", "1", "2"),
            "error: give one value, got 2: 1 2 (quote a value with spaces)",
        ),
        (("keyspace-id", "--bogus", "1"), "error: unknown option '--bogus'; see --help"),
        (
            ("shard-for", "1"),
            "error: give the serving shard map with --shards, like --shards=-80,80-",
        ),
        (
            ("shard-for", "--shards=-40,80-", "1"),
            "error: shard map -40,80-: no shard covers 40-80; list shards that cover the whole "
            "keyspace exactly once, like -80,80- or -40,40-80,80-",
        ),
        (
            ("shard-for", "--shards=-80,40-c0,c0-", "1"),
            "error: shard map -80,40-c0,c0-: -80 and 40-c0 overlap on 40-80; list shards that "
            "cover the whole keyspace exactly once, like -80,80- or -40,40-80,80-",
        ),
        (
            ("shard-for", "--shards=-8,8-", "1"),
            "error: shard map '-8,8-': key range '-8': bound '8' has an odd number of hex "
            "digits; write whole bytes, like 40-80 or 4000-8000",
        ),
        (
            ("shard-for", "--shards=-80,80-", "--keyspace-id", "zz"),
            "error: keyspace id 'zz' is not hex; write it like 166b40b44aba4bd6",
        ),
        (
            ("shard-for", "--shards=-80,80-", "--keyspace-id", "80", "1"),
            "error: give either VALUE ('1') or --keyspace-id ('80'), not both",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_1(args: tuple[str, ...], message: str) -> None:
    result = run(*args)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == message + "\n"
    assert "Traceback" not in result.stderr


def test_help_lists_the_commands_and_vindex_types() -> None:
    top = run("--help")
    assert top.returncode == 0
    assert "keyspace-id" in top.stdout
    assert "shard-for" in top.stdout
    sub = run("shard-for", "--help")
    assert sub.returncode == 0
    assert "binary_md5, hash, numeric, xxhash" in sub.stdout
