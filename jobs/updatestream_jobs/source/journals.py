"""A hop at the exact switch point, when the sources hold Vitess's resharding journal.

Vitess's `SwitchTraffic` stops writes on the source shards, waits until filtered replication has
copied everything into the targets, and writes a journal into each source
(`_vt.resharding_journal`) naming every target shard's GTID position at that moment. Everything
a target holds before its journal position is a copy of a source transaction; everything after
it is the target's own. vtgate's VStream continues a stream on the targets from exactly those
positions; so does the source when the journal is there:

* it first reads each source to the end (the sources take no writes after the switch; what the
  reverse workflow copies back into them is dropped as a reverse copy), so every source
  transaction is delivered from its own shard;
* then each destination starts at its journal position: no copy is read again, none has to be
  told apart from the destination's own writes, and no time window is guessed.

Without a journal (the sources are gone, or their filtered replication is not Vitess's) the hop
starts the destinations by time and drops copies by the sources' watermarks (`hopper`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from updatestream.binlog.errors import SourceError
from updatestream.binlog.session import ShardSession
from updatestream.binlog.vreplication import MarkerError, journal_positions
from updatestream.core.gtid import GTIDPosition, position_contains
from updatestream.core.hop_plan import HopPlan

log = logging.getLogger(__name__)

_TABLE = (
    "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '_vt' "
    "AND TABLE_NAME = 'resharding_journal'"
)
_JOURNALS = "SELECT val FROM _vt.resharding_journal"


class Draining:
    """The hop waits: a source with a journal has not been read to its end yet."""

    def __init__(self, source: str, upto: GTIDPosition) -> None:
        self.source, self.upto = source, upto


class Journals:
    """Reads the sources' journals for a hop (driver side); see the module docstring."""

    def __init__(self, session: Callable[[str], ShardSession]) -> None:
        self._session = session
        self._ends: dict[str, GTIDPosition] = {}  # source -> its position once switched away
        self._told: str | None = None

    def starts(
        self, plan: HopPlan, delivered: Mapping[str, GTIDPosition], declared: set[str]
    ) -> dict[str, GTIDPosition] | Draining | None:
        """Each destination's start from the sources' journals; `Draining` while a source is
        still to be read to its end; None when a source has no journal naming the hop's
        destinations (or is gone): the hop then starts by time."""
        starts: dict[str, GTIDPosition] = {}
        for source in sorted(plan.watermarks):
            if source not in declared:
                return None
            found = self._journal(source, set(plan.destinations))
            if found is None:
                return None
            starts.update({name: found[name] for name in plan.destinations if name in found})
            end = self._ends.setdefault(source, self._session(source).current_position()[0])
            if not position_contains(delivered[source], end):
                self._tell(f"hop waits: reading source {source} to its end {end} (switched away)")
                return Draining(source, end)
        if set(starts) != set(plan.destinations):
            return None
        self._tell(None)
        log.info("hop at the switch: destinations start at their journal positions %s", starts)
        return starts

    def _journal(self, source: str, destinations: set[str]) -> dict[str, GTIDPosition] | None:
        try:
            session = self._session(source)
            if not session.query(_TABLE)[0][0]:
                return None
            rows = session.query(_JOURNALS)
        except SourceError as exc:
            log.info("no journal read from source %s (%s); the hop starts by time", source, exc)
            return None
        for (value,) in rows:
            try:
                found = journal_positions(value, session.flavor)
            except MarkerError as exc:
                log.warning("source %s: unreadable resharding journal (%s)", source, exc)
                continue
            if destinations <= set(found):
                return found
        return None

    def _tell(self, text: str | None) -> None:
        if text is not None and text != self._told:
            log.info(text)
        self._told = text
