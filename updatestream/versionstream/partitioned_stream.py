"""A partitioned Version Stream: each entity in one of N streams, the N appended in parallel.

Seed 002's way out of the single gap-locked writer: one stream for some entities, another for
the others. Partition ``k`` of stream ``S`` is stream ``S + k`` of the same table, and an
entity always goes to partition ``partition_of(entity, N)`` (BLAKE2b of its name), so its
versions stay in one gapless, gap-locked stream, in order, each origin at most once: exactly
the single stream's guarantees, per partition. An append splits the records by partition
(keeping their order), appends each partition's share in a thread of its own with its own
connection (the partitions' gap locks are independent, so the appends and their commits run at
the same time; only a writer's first append to a partition runs alone, since empty partitions
share one gap of the index), then recombines the stream-of-streams
(:mod:`updatestream.versionstream.stream_of_streams`), which orders the partitions into one
combined stream (:class:`updatestream.versionstream.combined_stream.CombinedStream`).

The partitions commit on their own: when one fails, the others may have committed their share.
Appending the same records again (a retried batch) appends only what is missing, since every
origin is appended at most once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from updatestream.versionstream.connection_pool import Connect
from updatestream.versionstream.repository import (
    AppendResult,
    Record,
    VersionStreamError,
    VersionStreamRepository,
)
from updatestream.versionstream.stream_of_streams import StreamOfStreams

MAX_PARTITIONS = 64


def partition_of(entity: str, partitions: int) -> int:
    """The partition of an entity: the first 8 bytes of BLAKE2b of its name, modulo N (the same
    in every process and every release)."""
    digest = hashlib.blake2b(entity.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


def partition_streams(stream: int, partitions: int) -> list[int]:
    """The stream ids of the partitions of stream ``stream``: ``stream .. stream + N - 1``."""
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise VersionStreamError(
            f"a Version Stream has 1 to {MAX_PARTITIONS} partitions, not {partitions}"
        )
    return [stream + k for k in range(partitions)]


@dataclass(frozen=True, slots=True)
class PartitionedAppend:
    appended: int
    skipped: int  # records whose origin the partition already held (or repeated in the batch)
    partitions: dict[int, AppendResult]  # partition index -> its append (partitions written)
    combined_version: int | None  # the stream-of-streams' last version after recombining
    # (None without a recombination)


class PartitionedStream:
    """Appends to the N partitions of stream ``stream`` in parallel, then recombines them."""

    def __init__(
        self,
        connect: Connect,
        *,
        table: str = "versionstream",
        database: str | None = None,
        stream: int = 0,
        partitions: int = 2,
        retries: int = 5,
        where: str = "",
    ) -> None:
        self.streams = partition_streams(stream, partitions)
        self.partitions = partitions
        self.where = where or f"{table} stream {stream} ({partitions} partitions)"
        self.repositories = [
            VersionStreamRepository(
                connect, table=table, database=database, stream=s, retries=retries,
                where=f"{self.where} partition {k}",
            )
            for k, s in enumerate(self.streams)
        ]  # fmt: skip
        self.sos = StreamOfStreams(
            connect, table=table, database=database, stream=stream, partition_streams=self.streams
        )
        self._executor = ThreadPoolExecutor(partitions, thread_name_prefix="versionstream-part")
        self._written: set[int] = set()  # partitions this writer has appended to

    def create_table(self) -> None:
        """Create the Version Stream table and its stream-of-streams table if missing."""
        self.repositories[0].create_table()
        self.sos.create_table()

    def split(self, records: Sequence[Record]) -> dict[int, list[Record]]:
        """The records by partition, each partition's in their order."""
        groups: dict[int, list[Record]] = {}
        for record in records:
            groups.setdefault(partition_of(record.entity, self.partitions), []).append(record)
        return groups

    def append(self, records: Sequence[Record], *, recombine: bool = True) -> PartitionedAppend:
        """Append each partition's records in parallel, then recombine (see the module).

        Writers that append often and at once recombine on a period instead (``recombine=False``
        and a :class:`~updatestream.versionstream.stream_of_streams.Recombiner`): every
        recombination takes the stream-of-streams' lock."""
        groups = self.split(records)
        results: dict[int, AppendResult] = {}
        for k in [k for k in groups if k not in self._written]:
            # Empty partitions have no index record of their own between them: their first
            # appenders would share one gap and deadlock, so they append one after the other.
            results[k] = self.repositories[k].append(groups.pop(k))
            self._written.add(k)
        if len(groups) == 1:  # one partition: no thread needed
            ((k, group),) = groups.items()
            results[k] = self.repositories[k].append(group)
        elif groups:
            futures: dict[int, Future[AppendResult]] = {
                k: self._executor.submit(self.repositories[k].append, group)
                for k, group in groups.items()
            }
            errors = []
            for k, future in futures.items():
                try:
                    results[k] = future.result()
                except Exception as exc:  # wait for every partition before raising
                    errors.append(exc)
            if errors:
                raise errors[0]
        combined = self.sos.recombine() if results and recombine else None
        return PartitionedAppend(
            appended=sum(r.appended for r in results.values()),
            skipped=sum(r.skipped for r in results.values()),
            partitions=results,
            combined_version=combined,
        )

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        for repository in self.repositories:
            repository.close()
        self.sos.close()
