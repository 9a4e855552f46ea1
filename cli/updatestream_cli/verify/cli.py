"""`updatestream verify`: compare the traffic ledger with what a sink received, or (with
`--table-state`) the state a sink holds with the shards' rows (`verify.tablestate`).

Exit status: 0 when nothing was lost, no duplicate was delivered and no cache entry is stale;
1 when any of those was found; 2 when an input is missing or unreadable (a one-line message,
and with ``--json`` also ``{"error": ...}`` on stdout).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from updatestream import spec
from updatestream.clickopts import (
    FILE,
    json_option,
    key_range_option,
    seconds_option,
    secrets_dir_option,
    status_file_option,
)
from updatestream.core.errors import UpdateStreamError
from updatestream_cli.devcluster.ledger import LedgerEntry, read_ledger
from updatestream_cli.tool_options import ledger_option
from updatestream_cli.verify import sinks, tablestate
from updatestream_cli.verify.compare import (
    Report,
    check_progress,
    compare_cache,
    compare_changes,
    compare_final,
)
from updatestream_cli.verify.inputs import VerifyInputError, read_duplicates, within_key_range
from updatestream_cli.verify.mirror_check import MirrorReport, MirrorTarget, verify_mirror

EXIT_FINDINGS = 1
EXIT_INPUT = 2


def _endpoint(text: str) -> spec.MySQLEndpoint:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise VerifyInputError(f"--mysql {text!r} is not host:port")
    return spec.MySQLEndpoint(host=host, port=int(port))


def _keyspace(path: Path | None, needed_for: str) -> spec.Keyspace:
    if path is None:
        raise VerifyInputError(f"--keyspace-manifest is needed {needed_for}")
    try:
        return spec.load_keyspace(path)
    except spec.SpecError as exc:
        raise VerifyInputError(str(exc)) from None


def _require(value: Any, option: str, sink: str) -> Any:
    if value is None:
        raise VerifyInputError(f"--sink {sink} needs {option}")
    return value


def _versionstream(ledger: list[LedgerEntry], options: dict[str, Any]) -> Report:
    return compare_changes(ledger, _versionstream_records(options))


def _cdcv2(ledger: list[LedgerEntry], options: dict[str, Any]) -> Report:
    path = _require(options["path"], "--path", "cdcv2")
    rows, updates = sinks.read_cdcv2(path)
    report = compare_final(ledger, rows, updates)
    for files in sinks.read_cdcv2_batches(path):
        check_progress(ledger, files, report)
    return report


def _memcached(ledger: list[LedgerEntry], options: dict[str, Any]) -> Report:
    servers = [s.strip() for s in _require(options["servers"], "--servers", "memcached").split(",")]
    keyspace = _keyspace(options["keyspace_manifest"], "for --sink memcached")
    secrets_dir = _require(options["secrets_dir"], "--secrets-dir", "memcached")
    name = keyspace.metadata.name
    templates: dict[str, str] = {}
    for item in options["key_template"]:
        table, sep, template = item.partition("=")
        if not sep:
            raise VerifyInputError(f"--key-template {item!r} is not table=template")
        templates[table] = template
    touched = sorted({c.key for c in ledger})
    keys = sinks.cache_keys(name, touched, templates)
    entries = sinks.read_cache(servers, keys)
    database = sinks.read_database(
        keyspace,
        secrets_dir,
        options["secret"] or f"{name}-app",
        options["database"] or name,
        sorted({table for table, _ in touched}),
    )
    return compare_cache(
        ledger, entries, database, value_digest=sinks.value_digest, slack=options["slack"]
    )


def _mirror(options: dict[str, Any], key_range: str) -> MirrorReport:
    """The mirror against the shards' rows now: no ledger needed."""
    keyspace = _keyspace(options["keyspace_manifest"], "for --sink mirror")
    target = MirrorTarget(
        endpoint=_endpoint(_require(options["mysql"], "--mysql", "mirror")),
        secret=_require(options["secret"], "--secret", "mirror"),
        database=options["database"] or "mirror",
        prefix=options["table_prefix"],
    )
    secrets_dir = _require(options["secrets_dir"], "--secrets-dir", "mirror")
    return verify_mirror(keyspace, target, secrets_dir, key_range)


_SINKS = {"versionstream": _versionstream, "cdcv2": _cdcv2, "memcached": _memcached}


def _versionstream_records(options: dict[str, Any]) -> list[Any]:
    if options["mysql"]:
        endpoint = _endpoint(options["mysql"])
    else:
        keyspace = _keyspace(options["keyspace_manifest"], "when --mysql is not given")
        endpoint = keyspace.spec.shard(keyspace.spec.serving_shards[0]).mysql
    secrets_dir = _require(options["secrets_dir"], "--secrets-dir", "versionstream")
    secret = _require(options["secret"], "--secret", "versionstream")
    return sinks.read_versionstream(
        endpoint,
        sinks.read_secret(secrets_dir, secret),
        secrets_dir=secrets_dir,
        secret=secret,
        database=options["database"] or "updatestream",
        table=options["table"],
        stream=options["stream"],
    )


def _table_state(sink: str, key_range: str, options: dict[str, Any]) -> tablestate.StateReport:
    """The sink's state against the shards' rows in `key_range` (see `verify.tablestate`)."""
    report = tablestate.StateReport()
    if sink == "versionstream":
        actual = tablestate.versionstream_state(_versionstream_records(options))
    elif sink == "cdcv2":
        rows, _updates = sinks.read_cdcv2(_require(options["path"], "--path", "cdcv2"))
        actual = tablestate.cdcv2_state(rows, report)
    else:
        raise VerifyInputError(
            f"--table-state compares the state a sink holds; --sink {sink} holds no rows "
            "(use versionstream or cdcv2)"
        )
    keyspace = _keyspace(options["keyspace_manifest"], "for --table-state (the shards to read)")
    secrets_dir = _require(options["secrets_dir"], "--secrets-dir", sink)
    name = keyspace.metadata.name
    expected = tablestate.shard_state(
        keyspace,
        secrets_dir,
        options["shard_secret"] or f"{name}-app",
        options["shard_database"] or name,
        sorted(keyspace.spec.vschema.get("tables", {})),
        key_range,
    )
    return tablestate.compare_state(expected, actual, report)


def _state_summary(report: tablestate.StateReport, sink: str) -> None:
    console = Console()
    table = Table(title=f"shards vs {sink} (table state)")
    table.add_column("check")
    table.add_column("count", justify="right")
    for name, value in report.to_json().items():
        if name not in ("examples", "ok"):
            table.add_row(name, str(value))
    console.print(table)
    for finding, keys in report.examples.items():
        console.print(f"{finding}: {', '.join(keys)}", markup=False)
    if report.ok:
        console.print("[green]OK[/]: the sink holds exactly the shards' rows")
    else:
        console.print("[red]FAILED[/]: see missing / extra / differing / multiplicity")


def _fail(message: str, as_json: bool) -> NoReturn:
    if as_json:
        click.echo(json.dumps({"error": message}))
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_INPUT)


def _summary(report: Report | MirrorReport, sink: str) -> None:
    console = Console()
    table = Table(title="shards vs mirror" if sink == "mirror" else f"ledger vs {sink}")
    table.add_column("check")
    table.add_column("count", justify="right")
    for name, value in report.to_json().items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        table.add_row(name, str(value))
    if report.unexpected:
        table.add_row("delivered, not in the ledger", str(report.unexpected))
    console.print(table)
    for finding, keys in report.examples.items():
        console.print(f"{finding}: {', '.join(keys)}", markup=False)
    if report.ok and sink == "mirror":
        console.print("[green]OK[/]: the mirror holds the shards' rows, column by column")
    elif report.ok:
        console.print("[green]OK[/]: nothing lost, no duplicate delivered")
    else:
        console.print(
            "[red]FAILED[/]: see lost / duplicates_delivered / stale_keys / progress_violations"
        )


@click.command("verify")
@ledger_option(help="Traffic ledger (JSON lines) written by 'devcluster traffic' (not for mirror).")
@click.option(
    "--table-state",
    is_flag=True,
    help="Compare the state the sink holds with the shards' rows in the key range instead of "
    "the ledger (after a snapshot; needs --keyspace-manifest and --secrets-dir).",
)
@click.option(
    "--shard-secret",
    default=None,
    help="--table-state: Secret of an account that can read the shards (default <keyspace>-app).",
)
@click.option(
    "--shard-database",
    default=None,
    help="--table-state: the keyspace's database on the shards (default: the keyspace name).",
)
@click.option("--sink", "sink", type=click.Choice(sorted([*_SINKS, "mirror"])), required=True)
@click.option(
    "--keyspace-manifest",
    type=FILE,
    default=None,
    help="Keyspace manifest (memcached: the shards to read rows from).",
)
@click.option(
    "--mysql", default=None, help="versionstream, mirror: host:port of the change-log DB or mirror."
)
@click.option("--table-prefix", default="", help="mirror: the sink's tablePrefix.")
@secrets_dir_option(help="Directory of Secrets as files (<name>/username, <name>/password).")
@click.option(
    "--secret",
    default=None,
    help="Secret with the credentials (memcached default: <keyspace>-app).",
)
@click.option(
    "--database",
    default=None,
    help="versionstream: default 'updatestream'; memcached: the keyspace's database "
    "(default: the keyspace name); mirror: the mirror's database (default 'mirror').",
)
@click.option("--table", default="versionstream", show_default=True)
@click.option("--stream", type=int, default=0, show_default=True)
@click.option(
    "--path",
    type=click.Path(path_type=Path),
    default=None,
    help="cdcv2: a stream directory, or a directory above range=<key range> ones.",
)
@click.option("--servers", default=None, help="memcached: host:port,host:port,...")
@click.option(
    "--key-template",
    multiple=True,
    metavar="TABLE=TEMPLATE",
    help="memcached: the sink's keyTemplate of a table (repeat per table).",
)
@seconds_option(
    "--slack",
    default=1.0,
    help="memcached: seconds of clock resolution when only timestamps compare.",
)
@status_file_option(help="The job's status file: duplicates it dropped, by cause.")
@key_range_option(
    default="-",
    help="The stream's key range: only ledger rows whose keyspace id lies in it are expected.",
)
@json_option("Print the report as JSON.")
def verify(
    sink: str,
    ledger: Path | None,
    table_state: bool,
    status_file: Path | None,
    key_range: str,
    as_json: bool,
    **options: Any,
) -> None:
    """Compare the traffic ledger with what a sink received: lost, duplicates, order, stale.

    Exit 0: clean; 1: something was lost, a duplicate was delivered or a cache entry is
    stale; 2: an input is missing or unreadable.
    """
    report: Report | MirrorReport
    if table_state and sink != "mirror":  # a mirror is always compared with the shards
        try:
            state = _table_state(sink, key_range, options)
        except UpdateStreamError as exc:
            _fail(str(exc), as_json)
        if as_json:
            click.echo(json.dumps(state.to_json()))
        else:
            _state_summary(state, sink)
        sys.exit(0 if state.ok else EXIT_FINDINGS)
    if ledger is None and sink != "mirror":
        _fail("--ledger is needed (or --table-state to compare with the shards' rows)", as_json)
    try:
        dropped, by_cause = read_duplicates(status_file)
        if sink == "mirror":
            report = _mirror(options, key_range)
        else:
            assert ledger is not None
            committed = within_key_range(read_ledger(ledger), key_range)
            report = _SINKS[sink](committed, options)
    except UpdateStreamError as exc:
        _fail(str(exc), as_json)
    report.duplicates_dropped = dropped
    report.duplicates_dropped_by_cause = by_cause
    if as_json:
        click.echo(json.dumps(report.to_json(), sort_keys=False))
    else:
        _summary(report, sink)
    if not report.ok:
        sys.exit(EXIT_FINDINGS)
