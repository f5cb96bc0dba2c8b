"""Rebalancing end to end: the runtime's watch pump re-opens a broken watch and rebuilds.

Assignment, revocation and departure are specified machine by machine in
``tests/core/test_rebalance.py``.
"""

from __future__ import annotations

import trio

from spate import AllComplete, Progress
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultyStore

from .harness import (
    client,
    config,
    planner_of,
    spawn,
)


async def test_broken_watch_is_rewatched_and_rebuilt(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    cut = FaultyStore(client(server), name="b")
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        b = await spawn(
            nursery, cut, "b", planner=planner_of(1), cfg=config(reconcile_interval=1000.0)
        )
        cut.partition()
        await trio.sleep(0.5)
        await a.c.commit("s00", Progress(1, completed=True))
        await trio.sleep(0.5)
        cut.heal()
        await b.wait_for(AllComplete, within=10)  # learned from the new watch's snapshot
        nursery.cancel_scope.cancel()
