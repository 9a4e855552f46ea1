"""`updatestream keyspace-id` and `updatestream shard-for`: map a value to its keyspace id / shard.

    $ updatestream keyspace-id --vindex hash 1
    166b40b44aba4bd6
    $ updatestream shard-for --shards=-40,40-80,80- --vindex hash 1
    -40

Bad input ends in one line on stderr (``error: ...``) and exit status 1.
"""

from __future__ import annotations

import click

from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import format_keyspace_id, parse_keyspace_id
from updatestream.core.shardmap import ShardMap, ShardMapError
from updatestream.core.vindexes import Vindex, VindexError, create_vindex, functional_types

__all__ = ["keyspace_id", "shard_for"]

# Kinds whose values are unsigned integers; every other kind hashes the value's text.
_INTEGER_TYPES = frozenset({"hash", "numeric"})

# Let a negative number through as VALUE so the vindex can say why it is refused.
_CONTEXT = {"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]}


class CommandInputError(UpdateStreamError):
    """A command-line value that the command cannot use."""


def _vindex(type_name: str) -> Vindex:
    if type_name not in functional_types():
        raise VindexError(
            f"--vindex {type_name!r} is not a vindex type this command can compute; "
            f"use one of {', '.join(functional_types())}"
        )
    return create_vindex(type_name, type_name, {})


def _one(values: tuple[str, ...]) -> str | None:
    """The single VALUE argument; unknown options arrive here too (so the error is one line)."""
    for value in values:
        if value.startswith("--"):
            raise CommandInputError(f"unknown option {value!r}; see --help")
    if len(values) > 1:
        raise CommandInputError(
            f"give one value, got {len(values)}: {' '.join(values)} (quote a value with spaces)"
        )
    return values[0] if values else None


def _value(vindex: Vindex, text: str | None) -> object:
    if text is None:
        raise CommandInputError("give the column value to map, like: keyspace-id --vindex hash 100")
    if vindex.type_name not in _INTEGER_TYPES:
        return text
    try:
        return int(text, 10)
    except ValueError:
        raise VindexError(
            f"vindex {vindex.name!r} (type {vindex.type_name}) cannot map {text!r}: it takes an "
            "unsigned 64-bit integer in decimal; use --vindex xxhash or binary_md5 for text"
        ) from None


def _map(vindex: Vindex, text: str | None) -> bytes:
    keyspace_id = vindex.map(_value(vindex, text))
    if keyspace_id is None:  # only a NULL maps to nothing, and the CLI never passes one
        raise CommandInputError(f"{text!r} has no keyspace id under vindex {vindex.name!r}")
    return keyspace_id


_VINDEX_HELP = "Vindex type: one of " + ", ".join(functional_types()) + "."


@click.command("keyspace-id", context_settings=_CONTEXT)
@click.option("--vindex", "vindex_type", default="hash", show_default=True, help=_VINDEX_HELP)
@click.argument("value", nargs=-1)
def keyspace_id(vindex_type: str, value: tuple[str, ...]) -> None:
    """Print the keyspace id (lower-case hex) of VALUE under a vindex.

    VALUE is read as a decimal integer for the hash and numeric vindexes, as text otherwise.
    """
    click.echo(format_keyspace_id(_map(_vindex(vindex_type), _one(value))))


@click.command("shard-for", context_settings=_CONTEXT)
@click.option(
    "--shards",
    "shards",
    default=None,
    metavar="LIST",
    help="The serving shard map, like --shards=-40,40-80,80-.",
)
@click.option("--vindex", "vindex_type", default="hash", show_default=True, help=_VINDEX_HELP)
@click.option(
    "--keyspace-id",
    "keyspace_id_hex",
    default=None,
    metavar="HEX",
    help="Look up this keyspace id instead of mapping a VALUE.",
)
@click.argument("values", nargs=-1)
def shard_for(
    shards: str | None, vindex_type: str, keyspace_id_hex: str | None, values: tuple[str, ...]
) -> None:
    """Print the shard (key range) that holds VALUE, or the keyspace id given with --keyspace-id."""
    value = _one(values)
    if shards is None:
        raise ShardMapError("give the serving shard map with --shards, like --shards=-80,80-")
    shard_map = ShardMap.parse(shards)
    if keyspace_id_hex is not None:
        if value is not None:
            raise CommandInputError(
                f"give either VALUE ({value!r}) or --keyspace-id ({keyspace_id_hex!r}), not both"
            )
        kid = parse_keyspace_id(keyspace_id_hex)
    else:
        kid = _map(_vindex(vindex_type), value)
    click.echo(shard_map.shard_for(kid).name)
