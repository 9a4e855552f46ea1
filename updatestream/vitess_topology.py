"""A keyspace as a running Vitess cluster holds it: serving shards, primaries, VSchema.

A stream of a Vitess keyspace follows what Vitess says, not a list copied by hand: its serving
shards come from the cell's SrvKeyspace (the partition vtgate routes primary traffic by), each
shard's binlog endpoint from its primary tablet's record (`mysql_hostname`, `mysql_port`), and
the VSchema from the keyspace's VSchema. `VitessTopology` reads them from vtctld with
`vtctldclient` (JSON output); `resolved_keyspace` turns what it read into the `Keyspace` the
operator and the job work with, appending a shard map history entry when the serving shards
changed (a Reshard's SwitchTraffic): that is what makes a stream hop.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.core.errors import UpdateStreamError
from updatestream.core.keyrange import KeyRange

PRIMARY = 1  # topodata.TabletType.PRIMARY, as vtctldclient prints it


class TopologyError(UpdateStreamError):
    """Vitess could not be read (vtctld down, an unknown keyspace, no primary for a shard)."""


@dataclass(frozen=True)
class TopologyView:
    """What Vitess holds of one keyspace at one moment."""

    keyspace: str
    serving: tuple[str, ...]  # the primary partition's shards, in key order
    primaries: dict[str, tuple[str, int]]  # shard -> its primary's MySQL host and port
    vschema: dict[str, Any]


def vtctldclient_program() -> str:
    """`vtctldclient`: `$UPDATESTREAM_VTCTLDCLIENT`, on PATH, or from `make vitess-tools`."""
    given = os.environ.get("UPDATESTREAM_VTCTLDCLIENT")
    if given:
        return given
    found = shutil.which("vtctldclient")
    if found:
        return found
    cache = Path(os.environ.get("UPDATESTREAM_CACHE_DIR", Path.home() / ".cache/updatestream"))
    built = sorted(cache.glob("vitess/*/bin/vtctldclient"))
    if built:
        return str(built[-1])
    raise TopologyError(
        "vtctldclient is not installed: run `make vitess-tools`, put it on PATH, or set "
        "UPDATESTREAM_VTCTLDCLIENT"
    )


class VitessTopology:
    """Reads a keyspace's topology from vtctld (`host:grpc-port`) in one cell."""

    def __init__(
        self, vtctld: str, cell: str, *, program: str | None = None, timeout: float = 30.0
    ) -> None:
        self.vtctld, self.cell, self.timeout = vtctld, cell, timeout
        self.program = program or vtctldclient_program()

    def _json(self, *args: str) -> Any:
        # without --action-timeout, a vtctld that does not answer holds the call for an hour
        wait = f"{max(1, round(self.timeout))}s"
        argv = [self.program, "--server", self.vtctld, "--action-timeout", wait, *args]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=self.timeout + 10, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TopologyError(f"vtctld {self.vtctld}: `{' '.join(args)}` failed: {exc}") from None
        if done.returncode != 0:
            raise TopologyError(
                f"vtctld {self.vtctld}: `{' '.join(args)}` failed: "
                f"{_last_error(done.stderr or done.stdout)}; check that vtctld is up and "
                "the keyspace and cell exist"
            )
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError:
            raise TopologyError(
                f"vtctld {self.vtctld}: `{' '.join(args)}` printed no JSON"
            ) from None

    def view(self, keyspace: str) -> TopologyView:
        srv = self._json("GetSrvKeyspaces", keyspace, self.cell).get(self.cell) or {}
        serving = _primary_partition(srv, keyspace, self.cell)
        tablets = self._json(
            "GetTablets", "--keyspace", keyspace, "--tablet-type", "primary", "--format", "json"
        )
        primaries = {
            KeyRange.parse(t["shard"]).name: (str(t["mysql_hostname"]), int(t["mysql_port"]))
            for t in tablets or []
            if t.get("type") == PRIMARY and t.get("mysql_port")
        }
        missing = [s for s in serving if s not in primaries]
        if missing:
            raise TopologyError(
                f"Vitess keyspace {keyspace}: serving shards {', '.join(missing)} have no "
                "primary tablet with a MySQL port; elect one (PlannedReparentShard)"
            )
        vschema = self._json("GetVSchema", keyspace)
        return TopologyView(keyspace, serving, primaries, vschema)


def _last_error(output: str) -> str:
    """vtctldclient's last log line: its `msg` when it logs JSON, else the text's end."""
    lines = output.strip().splitlines() or [""]
    try:
        record = json.loads(lines[-1])
    except json.JSONDecodeError:
        return output.strip()[-500:]
    return str(record.get("msg", lines[-1]))[-500:] if isinstance(record, dict) else lines[-1]


def _primary_partition(srv: dict[str, Any], keyspace: str, cell: str) -> tuple[str, ...]:
    for partition in srv.get("partitions") or []:
        if partition.get("served_type") == PRIMARY:
            names = [KeyRange.parse(r["name"]).name for r in partition["shard_references"]]
            return tuple(r.name for r in sorted(KeyRange.parse(n) for n in names))
    raise TopologyError(
        f"Vitess keyspace {keyspace} has no serving primary partition in cell {cell}"
    )


def resolved_keyspace(
    current: spec.Keyspace,
    view: TopologyView,
    *,
    secret: str,
    at: float | None = None,
) -> spec.Keyspace:
    """`current` with the shards, serving shards and VSchema Vitess holds: every shard with a
    primary tablet (its MySQL endpoint, read with `secret`) and a history entry when serving
    changed. A shard without a primary is not serving (`view` checks), so it is gone: a
    completed Reshard removed it, and the stream reads what it still needs of it from its
    destinations."""
    declared = {s.name: s for s in current.spec.shards}
    shards: dict[str, dict[str, Any]] = {}
    for name, (host, port) in view.primaries.items():
        known = declared.get(name)
        entry: dict[str, Any] = (
            known.model_dump(by_alias=True, exclude_none=True) if known else {"name": name}
        )
        mysql: dict[str, Any] = {**entry.get("mysql", {}), "host": host, "port": port}
        shards[name] = {
            **entry, "flavor": "mysql", "mysql": mysql, "credentialsSecret": {"name": secret}
        }  # fmt: skip
    history = [e.model_dump(by_alias=True) for e in current.spec.shard_map_history]
    # a first read (nothing serving yet) records no change: the shards served before it too
    if current.spec.serving_shards and sorted(current.spec.serving_shards) != sorted(view.serving):
        history.append({"at": at if at is not None else time.time(), "shards": list(view.serving)})
    data = current.model_dump(by_alias=True, exclude_none=True)
    data["spec"] = {
        **data["spec"],
        "shards": [shards[n] for n in _ordered(shards)],
        "servingShards": list(view.serving),
        "shardMapHistory": history,
        "vschema": view.vschema,
    }
    return spec.parse_keyspace(data, source=f"Vitess keyspace {view.keyspace}")


def _ordered(names: Sequence[str] | dict[str, Any]) -> list[str]:
    return [r.name for r in sorted(KeyRange.parse(n) for n in names)]
