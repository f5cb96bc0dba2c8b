"""Claim races end to end: the runtime's reconcile cadence on a store with silent expiry.

The races of a late claim are specified machine by machine in ``tests/core/test_late_claims.py``.
"""

from __future__ import annotations

import trio

from spate import Gained
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultRates, FaultyStore

from .harness import TTL, client, config, planner_of, spawn


async def test_failover_on_a_store_with_silent_expiry_takes_about_a_lease_not_a_reconcile(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Found by the benchmarks: where expiry never reaches watchers, only the reconcile listing
    # notices a dead worker's leases, so with the default 30 s interval failover took 30 s.
    server = MemoryServer()
    quiet = FaultRates(silent_expiry=True)
    a_store = FaultyStore(client(server), rates=quiet)
    cfg = config(reconcile_interval=30.0, rebalance_delay=0.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, a_store, "a", planner=planner_of(4), cfg=cfg)
        await a.until(lambda: len(a.of(Gained)) == 4)
        b = await spawn(
            nursery, FaultyStore(client(server), rates=quiet), "b", planner=planner_of(4), cfg=cfg
        )
        await b.until(lambda: len(b.of(Gained)) >= 1)
        a_store.partition()
        a.kill()
        died = trio.current_time()
        await b.until(lambda: len({g.split for g in b.of(Gained)}) == 4, within=60)
        assert trio.current_time() - died <= 2 * TTL
        nursery.cancel_scope.cancel()
