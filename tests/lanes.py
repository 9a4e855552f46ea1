"""Which tests may run beside which: the suite runs in two pytest-xdist workers (`make test`).

Much of the suite waits on servers (a shard's binlog, a pod's start, a hop's drain); the heavy
tests also compete for the two cores, so two workers take about two thirds of one's time, not
half (docs/testing.md). A *lane* is the unit a worker
takes whole (`-n 2 --dist loadscope` with `LaneScheduling`): every test of one module by
default, so a module's fixtures start once. Tests that share something of the machine that
cannot be had twice share a lane:

- `node`: the one-node Kubernetes of tests/cluster (a fixed bridge address, iptables rules,
  containerd's and kubelet's state); its modules must never run at the same time.
- `vitess`: the session's Vitess cluster, which some modules reshard and restore.

The long lanes are put first so that the two workers start on them together and the short
modules fill in behind.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

# Lanes by the top folder of tests/ whose modules share one resource, longest first.
SHARED_LANES = {"cluster": "node", "vitess": "vitess"}


def lane_of(nodeid: str) -> str:
    """The lane of a test: the shared lane of its folder, or its module's path."""
    module = nodeid.split("::", 1)[0]
    parts = module.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in SHARED_LANES:
        return SHARED_LANES[parts[1]]
    return module


def order_lanes(items: list[pytest.Item]) -> None:
    """Move the shared lanes to the front, in their order, keeping the order within each."""
    order = list(SHARED_LANES.values())

    def rank(item: pytest.Item) -> int:
        lane = lane_of(item.nodeid)
        return order.index(lane) if lane in order else len(order)

    items.sort(key=rank)  # stable: modules and tests keep their order within a rank


class LaneScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with lanes for scopes: a worker takes a whole lane, the
    next one when it has two tests or fewer of its own left."""

    def _split_scope(self, nodeid: str) -> str:
        return lane_of(nodeid)
