"""Routing a row to its shard: the VSchema and the serving shard map of the manifest on disk.

The traffic generator asks for every row it writes; the manifest is re-read when it changes on
disk, so a reshard's cut-over (which rewrites the serving shards) reroutes the next write.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from updatestream import spec
from updatestream.core.vschema import VSchema
from updatestream_cli.devcluster.errors import TrafficError
from updatestream_cli.devcluster.ledger import pk_json


class Router:
    """Routes rows with the VSchema and the serving shard map of the manifest on disk."""

    def __init__(self, manifest_path: Path) -> None:
        self.manifest_path = manifest_path
        self._signature: tuple[int, int, int] | None = None
        self.refresh()

    def _stat(self) -> tuple[int, int, int]:
        st = os.stat(self.manifest_path)
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def refresh(self) -> bool:
        """Re-read the manifest if it changed on disk; True when it did."""
        signature = self._stat()
        if signature == self._signature:
            return False
        keyspace = spec.load_keyspace(self.manifest_path)
        self.keyspace = keyspace
        self.vschema = VSchema.from_dict(keyspace.spec.vschema, keyspace=keyspace.metadata.name)
        self.shard_map = keyspace.spec.serving_map
        self.endpoints = {s.name: (s.mysql.host, s.mysql.port) for s in keyspace.spec.shards}
        self.flavors = {s.name: s.flavor for s in keyspace.spec.shards}
        self._signature = signature
        return True

    def keyspace_id(self, table: str, row: dict[str, Any]) -> bytes:
        ksid = self.vschema.keyspace_id_for(table, row)
        if ksid is None:
            raise TrafficError(f"row of {table} has a NULL vindex column: {pk_json(table, row)}")
        return ksid

    def shard_for(self, table: str, row: dict[str, Any]) -> str:
        return self.shard_map.shard_for(self.keyspace_id(table, row)).name
