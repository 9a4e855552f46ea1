"""The Multi Snapshot Cache: what was entity E at version V of a Version Stream?

Versions are immutable, so the cache can answer for any snapshot without storing one copy of
the state per snapshot. It keeps

* the *current versions*: for each entity, its latest version up to ``current_version``;
* a bounded cache of ``(entity, version) -> (state, previous version of the entity)``.

To read E at snapshot V it starts from E's current version and walks E's history backwards
until the first version ``<= V``: that version's state is the answer (None for a deletion);
running out of history means E did not exist at V. Only the most recent snapshots are cheap
(few steps back), which is what applications read.

It reads any stream that answers three questions (:class:`VersionReader`): one stream
(:class:`~updatestream.versionstream.repository.VersionStreamRepository`), the partitions of a
partitioned stream recombined by their stream-of-streams
(:class:`~updatestream.versionstream.combined_stream.CombinedStream`), or a sub-stream of
either (:class:`~updatestream.versionstream.sub_stream.SubStream`).

Thread safety: entries are immutable, so concurrent readers at worst fetch the same entry
twice. Refreshes of the current versions are serialised, and ``current_version`` is raised
only after the entity map holds every version up to it, so a reader that checked
``current_version >= V`` always finds what it needs (a newer version only adds a step back).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol

from updatestream.versionstream.repository import Entry, VersionStreamError

__all__ = ["MultiSnapshotCache", "VersionReader"]


class VersionReader(Protocol):
    """What the cache reads: a stream's last version, the entities changed in a range of
    versions (each with its last version there), and an entity's state at a version."""

    @property
    def where(self) -> str: ...

    def fetch_last_version(self) -> int | None: ...

    def fetch_new_versions(self, since: int, until: int | None = None) -> dict[str, int]: ...

    def fetch_entry(self, entity: str, version: int) -> Entry: ...


class MultiSnapshotCache:
    def __init__(self, repository: VersionReader, *, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.repository = repository
        self.max_entries = max_entries
        self._current_version = -1  # every version <= this is in _current
        self._current: dict[str, int] = {}  # entity -> latest version <= _current_version
        self._refresh_lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, int], Entry] = OrderedDict()
        self._entries_lock = threading.Lock()
        self.fetches = 0  # entries read from the repository (cache misses)

    @property
    def current_version(self) -> int | None:
        """The newest version the cache knows, None while it knows none."""
        version = self._current_version
        return None if version < 0 else version

    def refresh(self, snapshot: int | None = None) -> int | None:
        """Learn the current versions up to ``snapshot`` (default: the stream's last version).

        Raises VersionStreamError if ``snapshot`` is beyond the stream's last version: that
        snapshot does not exist yet.
        """
        if snapshot is not None and snapshot <= self._current_version:
            return self._current_version
        with self._refresh_lock:
            if snapshot is not None and snapshot <= self._current_version:
                return self._current_version
            last = self.repository.fetch_last_version()
            if last is None:
                last = -1
            if snapshot is not None and snapshot > last:
                raise VersionStreamError(
                    f"snapshot {snapshot} of {self.repository.where} does not exist yet: its "
                    f"last version is {last}"
                )
            target = last if snapshot is None else snapshot
            if target > self._current_version:
                changed = self.repository.fetch_new_versions(self._current_version + 1, target)
                for entity, version in changed.items():
                    if version > self._current.get(entity, -1):
                        self._current[entity] = version
                self._current_version = target  # only after the map holds every version
            return self.current_version

    def get(self, entity: str, snapshot: int) -> Any:
        """The state of ``entity`` at version ``snapshot``; None if absent or deleted then."""
        if snapshot < 0:
            raise VersionStreamError(f"snapshot must be a version (>= 0), got {snapshot}")
        self.refresh(snapshot)
        cursor = self._current.get(entity)
        while cursor is not None:
            entry = self._entry(entity, cursor)
            if cursor <= snapshot:
                return entry.data
            cursor = entry.previous_version
        return None

    def entities(self, snapshot: int) -> dict[str, Any]:
        """Every entity that exists at ``snapshot`` (not deleted), with its state."""
        self.refresh(snapshot)
        result = {}
        for entity in list(self._current):
            data = self.get(entity, snapshot)
            if data is not None:
                result[entity] = data
        return result

    def _entry(self, entity: str, version: int) -> Entry:
        key = (entity, version)
        with self._entries_lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry
        entry = self.repository.fetch_entry(entity, version)
        with self._entries_lock:
            self.fetches += 1
            self._entries[key] = entry
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return entry
