"""Leadership end to end: the planner runs off the loop, and a PlanError leaves open_coordinator.

Election, the generation fence and planning are specified machine by machine in
``tests/core/test_election_and_fence.py``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import pytest
import trio
import trio.lowlevel
import trio.testing

from spate import Lost, Plan, PlanContext, PlanError, SplitSpec, open_coordinator
from spate_stores.memory import MemoryStore

from .harness import JOB, TTL, config, spawn


async def test_slow_async_planner_does_not_stop_renewals(autojump_clock: trio.abc.Clock) -> None:
    release = trio.Event()
    calls = 0

    async def planner(ctx: PlanContext) -> Plan:
        nonlocal calls
        calls += 1
        if calls > 1:
            await release.wait()
        return Plan([SplitSpec(f"s{i}") for i in range(calls * 2)], final=False)

    store = MemoryStore(ephemeral_ttl=TTL)
    async with trio.open_nursery() as nursery:
        w = await spawn(nursery, store, "w", planner=planner, cfg=config(replan_interval=TTL))
        await w.until(lambda: calls == 2 and len(w.c.owned) == 2, within=3 * TTL)
        await trio.sleep(5 * TTL)  # the replan takes five leases
        assert not w.of(Lost)
        assert w.c.owned == {"s0", "s1"}
        release.set()
        await w.until(lambda: len(w.c.owned) == 4, within=TTL)
        nursery.cancel_scope.cancel()


async def busy_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait in real time (the mock clock stands still) for thread work to come back."""
    give_up = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < give_up, "thread work did not come back"
        await trio.lowlevel.checkpoint()


async def test_slow_sync_planner_in_a_thread_does_not_stop_renewals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The autojump clock would run ahead of the planner thread; stop it while real thread
    # work has to finish, and let it run while the planner is blocked.
    autojump_clock.autojump_threshold = math.inf
    release = threading.Event()
    calls = 0

    def planner(ctx: PlanContext) -> Plan:
        nonlocal calls
        calls += 1
        if calls > 1:
            release.wait(timeout=30)  # real seconds: the test sets it long before
        return Plan([SplitSpec(f"s{i}") for i in range(calls * 2)], final=False)

    store = MemoryStore(ephemeral_ttl=TTL)
    try:
        async with trio.open_nursery() as nursery:
            w = await spawn(
                nursery,
                store,
                "w",
                planner=planner,
                cfg=config(replan_interval=2.0, planner_thread=True),
            )
            await busy_until(lambda: len(w.c.owned) == 2)
            autojump_clock.jump(2.0)  # the replan tick: the planner thread now blocks
            await busy_until(lambda: calls == 2)
            autojump_clock.autojump_threshold = 0
            await trio.sleep(5 * TTL)  # five leases pass while the planner is stuck
            assert not w.of(Lost)
            assert w.c.owned == {"s0", "s1"}
            autojump_clock.autojump_threshold = math.inf
            release.set()
            await busy_until(lambda: len(w.c.owned) == 4)
            nursery.cancel_scope.cancel()
    finally:
        release.set()


async def test_planner_building_an_invalid_split_is_a_plan_error(
    autojump_clock: trio.abc.Clock,
) -> None:
    def planner(ctx: PlanContext) -> Plan:
        return Plan([SplitSpec("bad id")])

    with pytest.raises(PlanError, match="invalid split id"):
        async with open_coordinator(
            MemoryStore(ephemeral_ttl=TTL), job=JOB, instance="w", planner=planner, config=config()
        ):
            await trio.sleep(TTL)
