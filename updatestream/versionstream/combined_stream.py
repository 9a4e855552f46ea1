"""The partitions of a partitioned Version Stream read as one stream, through its stream-of-streams.

A version of the combined stream is a version V of the stream-of-streams
(:mod:`updatestream.versionstream.stream_of_streams`): its state is every partition p at the
version m_p(V) that V maps it to. An entity's state at V is therefore its last version in its
partition up to m_p(V), and the combined version of that state is the first V at which it was
visible. Versions of an entity that one recombination buffered together with a later version of
it are not visible in the combined stream (the seed's buffering: the combined stream samples its
partitions); the partitions keep them.

:class:`CombinedStream` answers the questions the Multi Snapshot Cache asks
(``fetch_last_version``, ``fetch_new_versions``, ``fetch_entry``) in combined versions, so
``MultiSnapshotCache(CombinedStream(...))`` reads a partitioned stream as it reads one stream.
"""

from __future__ import annotations

from updatestream.versionstream.connection_pool import Connect
from updatestream.versionstream.partitioned_stream import partition_of, partition_streams
from updatestream.versionstream.repository import (
    Entry,
    VersionNotFound,
    VersionStreamRepository,
)
from updatestream.versionstream.stream_of_streams import StreamOfStreams


class CombinedStream:
    """Reads the N partitions of stream ``stream`` as one stream; safe to share between
    threads."""

    def __init__(
        self,
        connect: Connect,
        *,
        table: str = "versionstream",
        database: str | None = None,
        stream: int = 0,
        partitions: int = 2,
    ) -> None:
        self.streams = partition_streams(stream, partitions)
        self.partitions = partitions
        self.where = f"{table} stream {stream} ({partitions} partitions, combined)"
        self.repositories = [
            VersionStreamRepository(connect, table=table, database=database, stream=s)
            for s in self.streams
        ]
        self.sos = StreamOfStreams(
            connect, table=table, database=database, stream=stream, partition_streams=self.streams
        )

    def close(self) -> None:
        for repository in self.repositories:
            repository.close()
        self.sos.close()

    def fetch_last_version(self) -> int | None:
        """The combined stream's last version (the stream-of-streams'), None while empty."""
        return self.sos.fetch_last_version()

    def fetch_new_versions(
        self, since: int, until: int | None = None, *, prefix: str = ""
    ) -> dict[str, int]:
        """Each entity whose visible state changed at combined versions ``since..until``, with
        the combined version of its last change there (``prefix``: a sub-stream's entities)."""
        if until is None:
            until = self.fetch_last_version()
        if until is None or until < since:
            return {}
        before, after = self.sos.mapping(since - 1), self.sos.mapping(until)
        changed: dict[str, int] = {}
        for k, partition in enumerate(self.streams):
            if after[partition] <= before[partition]:
                continue
            steps = self.sos.steps(partition, since, until)
            moved = self.repositories[k].fetch_new_versions(
                before[partition] + 1, after[partition], prefix=prefix
            )
            for entity, version in moved.items():
                combined = steps.cover(version)
                if combined is not None:
                    changed[entity] = combined
        return changed

    def fetch_entry(self, entity: str, version: int) -> Entry:
        """The entity's state at combined version ``version`` and the combined version of its
        state before that one (None: it had none)."""
        k = partition_of(entity, self.partitions)
        partition, repository = self.streams[k], self.repositories[k]
        own = repository.fetch_version_at(entity, self.sos.mapping_of(partition, version))
        if own is None:
            raise VersionNotFound(f"{self.where} has no version {version} of entity {entity!r}")
        data = repository.fetch_entry(entity, own).data
        shown = self.sos.cover(partition, own)  # when that state became visible
        previous = None
        if shown is not None and shown > 0:
            earlier = repository.fetch_version_at(entity, self.sos.mapping_of(partition, shown - 1))
            if earlier is not None:
                previous = self.sos.cover(partition, earlier)
        return Entry(data, previous)
