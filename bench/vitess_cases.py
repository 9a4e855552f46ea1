"""`bench-vitess-peers`' three cases: our stream and both VStream peers through the same split
`-80 -> -40,40-80` and merge back, under traffic through vtgate.

(a) the readers run through SwitchTraffic; (b) they are stopped before SwitchTraffic and
started after it (the old shards still run); (c) stopped, SwitchTraffic, `Reshard complete`
(the old shards' tablets and mysqld gone), started. Every reader is stopped and started at the
same moments. Per case and reader: each start's outcome (resumed, or the error that ended it),
and against the case's part of the ledger, changes lost and duplicates delivered. Our stream is
counted by `updatestream verify` of each of its sinks (cumulative, so a case's figure is the
difference from the previous one); the peers by `bench.vitess_ledger`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from updatestream_cli.devcluster.ledger import LedgerEntry, read_ledger

from bench.report import console
from bench.vitess_ledger import Delivery, Matched, match, tally
from harness.vitess_stream import ReshardRun

CASES = {
    "a": "running through SwitchTraffic",
    "b": "stopped before SwitchTraffic, started after it",
    "c": "stopped, SwitchTraffic, Reshard complete, started",
}
SPLIT_AND_MERGE = (("-80", "-40,40-80"), ("-40,40-80", "-80"))
SETTLE_SECONDS = 45.0  # a peer that delivered nothing new for this long has caught up or stalled
OURS = "updatestream"


class Peer(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def running(self) -> bool: ...

    def streaming(self) -> bool: ...

    @property
    def failed(self) -> str | None: ...

    def deliveries(self) -> list[Delivery]: ...


@dataclass
class Case:
    name: str
    began: float = 0.0
    ended: float = 0.0
    entries: list[LedgerEntry] = field(default_factory=list)
    # reader -> one outcome per start in the case: "resumed", or the error that ended it
    starts: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Cases:
    run: ReshardRun
    peers: Sequence[Peer]
    done: list[Case] = field(default_factory=list)
    verified: list[dict[str, dict[str, Any]]] = field(default_factory=list)  # ours, cumulative
    mirrors: list[dict[str, Any]] = field(default_factory=list)

    def baseline(self) -> None:
        """Our sinks verified before the first case (the warm-up's changes)."""
        self._verify_ours()

    def _verify_ours(self) -> None:
        try:
            self.run.job.wait_caught_up(self.run.cluster.serving_shards_recorded(), timeout=600)
        except AssertionError as exc:
            console.print(f"our job did not catch up: {str(exc)[-300:]}")
        self.verified.append(self.run.job.verify(self.run.ledger))
        self.mirrors.append(self.run.job.verify_mirror())

    def play(self, name: str, seed: int) -> Case:
        case = Case(name, starts={OURS: [], **{p.name: [] for p in self.peers}})
        before = len(read_ledger(self.run.ledger)) if self.run.ledger.exists() else 0
        case.began = time.time()
        self.run.start_traffic(seed)
        time.sleep(3)
        for sources, targets in SPLIT_AND_MERGE:
            self._reshard(case, sources, targets)
        time.sleep(3)
        self.run.stop_traffic()
        case.ended = time.time()
        case.entries = read_ledger(self.run.ledger)[before:]
        self._settle(case)
        self._verify_ours()  # also lets a peer that is still retrying come to its end
        for peer in self.peers:
            case.starts[peer.name] = self._peer_outcomes(peer, case)
        self.done.append(case)
        return case

    def _reshard(self, case: Case, sources: str, targets: str) -> None:
        runner = self.run.reshard(sources, targets)
        console.print(f"case {case.name}: {sources} -> {targets}, caught up")
        if case.name != "a":
            self.run.job.stop()
            for peer in self.peers:
                peer.stop()
        runner.switch_traffic()
        if case.name == "c":
            runner.complete()
        else:
            time.sleep(2)
        restarted = time.time()
        if case.name != "a":
            self.run.job.start()
            for peer in self.peers:
                peer.start()
        case.starts[OURS].append(self._our_hop("ran through" if case.name == "a" else "resumed"))
        if case.name == "b":  # the old shards stay until every reader is past them
            self._wait_resumed(restarted)
        if case.name != "c":
            runner.complete()
        self.run.pending = None

    def _our_hop(self, outcome: str) -> str:
        try:
            self.run.wait_hop()
        except AssertionError as exc:
            return f"failed: {str(exc)[-500:]}"
        return outcome

    def _wait_resumed(self, since: float, timeout: float = 120) -> None:
        """Until each peer delivered a change after `since`, or ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(not p.running() or any(d.at >= since for d in p.deliveries())
                   for p in self.peers):  # fmt: skip
                return
            time.sleep(1)

    def _settle(self, case: Case) -> None:
        """Until each peer delivered every change of the case, ended, or stalled."""
        deadline = time.monotonic() + 300
        seen = {p.name: (-1, time.monotonic()) for p in self.peers}
        while time.monotonic() < deadline:
            waiting = False
            for peer in self.peers:
                count = len(peer.deliveries())
                if count != seen[peer.name][0]:
                    seen[peer.name] = (count, time.monotonic())
                stalled = time.monotonic() - seen[peer.name][1] > SETTLE_SECONDS
                complete = tally(case.entries, self._matched(peer)).lost == 0
                waiting |= peer.running() and not complete and not stalled
            if not waiting:
                break
            time.sleep(2)

    def _matched(self, peer: Peer) -> Matched:
        return match(read_ledger(self.run.ledger), peer.deliveries())

    @staticmethod
    def _peer_outcomes(peer: Peer, case: Case) -> list[str]:
        if case.name == "a":  # no restart: the reader ran on, or an error ended it
            return [f"failed: {peer.failed}"] if peer.failed else ["ran through"]
        starts = getattr(peer, "starts", [])
        mine = [s for s in starts if case.began <= s.at <= case.ended]
        ends = [s.at for s in mine[1:]] + [float("inf")]
        times = [d.at for d in peer.deliveries()]
        outcomes = []
        for start, end in zip(mine, ends, strict=True):
            if start.error is not None:
                outcomes.append(f"failed: {start.error}")
            elif any(start.at <= at < end for at in times):
                outcomes.append("resumed")
            else:
                outcomes.append("no error, and nothing delivered after it")
        return outcomes

    def results(self) -> dict[str, Any]:
        """Per case: the starts' outcomes and, per reader, lost and duplicates."""
        ledger = read_ledger(self.run.ledger)
        matched = {p.name: match(ledger, p.deliveries()) for p in self.peers}
        out: dict[str, Any] = {}
        ends = [case.began for case in self.done[1:]] + [float("inf")]
        for number, (case, end) in enumerate(zip(self.done, ends, strict=True), start=1):
            readers: dict[str, Any] = {OURS: self._ours(number, case)}
            for peer in self.peers:
                counts = tally(case.entries, matched[peer.name], (case.began, end))
                readers[peer.name] = {"starts": case.starts[peer.name], **counts.as_dict()}
            out[case.name] = {"what": CASES[case.name], "readers": readers}
        return out

    def _ours(self, number: int, case: Case) -> dict[str, Any]:
        """Our sinks' verify reports of the case: the difference from the previous ones."""
        now, before = self.verified[number], self.verified[number - 1]
        keys = ("committed", "delivered", "lost", "duplicates_delivered", "duplicates_dropped")

        def delta(sink: str) -> dict[str, int]:
            counts = {k: int(now[sink].get(k) or 0) - int(before[sink].get(k) or 0) for k in keys}
            # states, not counts: as they are after the case
            states = {k: now[sink][k] for k in ("stale_keys", "progress_violations")
                      if k in now[sink]}  # fmt: skip
            return {**counts, **states}

        sinks = {sink: delta(sink) for sink in now}
        mirror = self.mirrors[number]
        return {
            "starts": case.starts[OURS],
            "committed": len(case.entries),
            "lost": max(s["lost"] for s in sinks.values()),
            "duplicates": max(s["duplicates_delivered"] for s in sinks.values()),
            "sinks": sinks,
            "mirror": {k: mirror.get(k) for k in ("source_rows", "missing", "extra", "different")},
        }


def wait_until(what: str, ready: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {what} within {timeout:.0f}s")
        time.sleep(0.5)
