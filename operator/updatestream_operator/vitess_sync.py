"""A Keyspace kept in step with the Vitess cluster it names (`spec.vitess`).

Every `spec.vitess.syncSeconds` the operator reads the keyspace's serving shards, its primary
tablets' MySQL endpoints and its VSchema from vtctld (`updatestream.vitess_topology`). When
they differ from the Keyspace's spec, the spec is replaced with what Vitess holds, with a
shard map history entry when the serving shards changed. That write is a spec change like a
user's: the Keyspace handler folds every stream of the Keyspace, so a Reshard's SwitchTraffic
is what makes a stream hop, and nothing is copied from Vitess by hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from updatestream.core.errors import UpdateStreamError
from updatestream.spec import Keyspace, VitessSource
from updatestream.vitess_topology import TopologyView, VitessTopology, resolved_keyspace
from updatestream_operator.reconciler.models import Note, StreamRef
from updatestream_operator.storage import KubeStore

log = logging.getLogger(__name__)
WARNING_SECONDS = 60.0  # an unchanged read failure is reported again after this long

# reads one keyspace's topology from a Vitess cluster (vtctldclient against vtctld)
TopologyReader = Callable[[VitessSource, str], TopologyView]


def read_topology(vitess: VitessSource, keyspace: str) -> TopologyView:
    return VitessTopology(vitess.vtctld, vitess.cell, timeout=10.0).view(keyspace)


@dataclass(frozen=True)
class SyncOutcome:
    """What one read of Vitess changed in a Keyspace."""

    written: bool  # the spec was replaced
    serving_before: tuple[str, ...]
    serving_now: tuple[str, ...]
    conflict: bool = False  # the Keyspace changed meanwhile: nothing written, read again

    @property
    def serving_changed(self) -> bool:
        return self.written and self.serving_before != self.serving_now

    def describe(self, keyspace: str, vtctld: str) -> str:
        before = ",".join(self.serving_before) or "(none)"
        return (
            f"Keyspace {keyspace} read from Vitess at {vtctld}: serving shards "
            f"{before} -> {','.join(self.serving_now)}"
            if self.serving_changed
            else f"Keyspace {keyspace} read from Vitess at {vtctld}: "
            f"shards {','.join(self.serving_now)} (endpoints or VSchema updated)"
        )


def _spec_data(keyspace: Keyspace) -> dict[str, Any]:
    data: dict[str, Any] = keyspace.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


class VitessSync:
    """Replaces a Keyspace's spec with what its Vitess cluster holds, when they differ."""

    def __init__(self, store: KubeStore, read: TopologyReader = read_topology) -> None:
        self.store = store
        self.read = read
        # the handler's bookkeeping per Keyspace (namespace, name): when it was last read, and
        # the last read failure reported with when
        self.last_read: dict[tuple[str, str], float] = {}
        self.warned: dict[tuple[str, str], tuple[str, float]] = {}

    def sync(
        self, namespace: str, keyspace: Keyspace, resource_version: str, *, now: float | None = None
    ) -> SyncOutcome:
        vitess = keyspace.spec.vitess
        if vitess is None:
            raise ValueError(f"Keyspace {keyspace.metadata.name} names no Vitess cluster")
        view = self.read(vitess, vitess.keyspace or keyspace.metadata.name)
        resolved = resolved_keyspace(
            keyspace,
            view,
            secret=vitess.credentials_secret.name,
            at=now if now is not None else time.time(),
        )
        before, after = tuple(keyspace.spec.serving_shards), tuple(resolved.spec.serving_shards)
        wanted = _spec_data(resolved)
        if wanted == _spec_data(keyspace):
            return SyncOutcome(False, before, after)
        name = keyspace.metadata.name
        if not self.store.replace_keyspace_spec(namespace, name, wanted, resource_version):
            return SyncOutcome(False, before, after, conflict=True)
        return SyncOutcome(True, before, after)

    def follow(self, ref: StreamRef, keyspace: Keyspace, resource_version: str) -> None:
        """Read Vitess when `spec.vitess.syncSeconds` passed since the last read, write what
        changed and say so in an Event on the Keyspace; a read that fails is a Warning Event
        (again when its text changes or a minute passed), the spec left as it was."""
        vitess = keyspace.spec.vitess
        key = (ref.namespace, ref.name)
        if vitess is None or time.monotonic() - self.last_read.get(key, -1e9) < vitess.sync_seconds:
            return
        self.last_read[key] = time.monotonic()
        where = f"{ref.namespace}/{ref.name}"
        try:
            outcome = self.sync(ref.namespace, keyspace, resource_version)
        except UpdateStreamError as exc:
            message = f"cannot read Keyspace {where} from Vitess: {exc}"
            said, at = self.warned.get(key, ("", -1e9))
            if message != said or time.monotonic() - at > WARNING_SECONDS:
                log.warning("%s", message)
                self.store.post_event(
                    ref, Note("Warning", "VitessUnreadable", message), kind="Keyspace"
                )
                self.warned[key] = (message, time.monotonic())
            raise
        self.warned.pop(key, None)
        if outcome.conflict:
            self.last_read.pop(key, None)  # read again at the next tick
        elif outcome.written:
            reason = "ServingShardsChanged" if outcome.serving_changed else "VitessShardsRead"
            note = Note("Normal", reason, outcome.describe(where, vitess.vtctld))
            log.info("%s", note.message)
            self.store.post_event(ref, note, kind="Keyspace")
