"""Sub-streams: a Version Stream seen through one table's entities (seed 002's projections).

A sub-stream is a view, not a stream of its own: its versions are the parent stream's, and it
holds the entities ``<table>:<primary key>`` of one table. ``MultiSnapshotCache(SubStream(
stream, "users"))`` answers "what was this user at version V" and ``entities(V)`` gives every
user at V, without reading the other tables' entities. The parent is a single stream
(:class:`~updatestream.versionstream.repository.VersionStreamRepository`) or a combined one
(:class:`~updatestream.versionstream.combined_stream.CombinedStream`); new versions are always
appended to the parent.
"""

from __future__ import annotations

from typing import Protocol

from updatestream.versionstream.repository import Entry, VersionNotFound


class FilterableStream(Protocol):
    where: str

    def fetch_last_version(self) -> int | None: ...

    def fetch_new_versions(
        self, since: int, until: int | None = None, *, prefix: str = ""
    ) -> dict[str, int]: ...

    def fetch_entry(self, entity: str, version: int) -> Entry: ...


class SubStream:
    """The entities of one table of a stream, at the stream's versions."""

    def __init__(self, stream: FilterableStream, table: str) -> None:
        self.stream = stream
        self.table = table
        self.prefix = f"{table}:"
        self.where = f"{stream.where}, sub-stream {table}"

    def fetch_last_version(self) -> int | None:
        """The parent's last version: a sub-stream has every version of its parent."""
        return self.stream.fetch_last_version()

    def fetch_new_versions(self, since: int, until: int | None = None) -> dict[str, int]:
        return self.stream.fetch_new_versions(since, until, prefix=self.prefix)

    def fetch_entry(self, entity: str, version: int) -> Entry:
        if not entity.startswith(self.prefix):
            raise VersionNotFound(
                f"{self.where} has no entity {entity!r}: its entities are {self.prefix}<key>"
            )
        return self.stream.fetch_entry(entity, version)
