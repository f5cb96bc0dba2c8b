"""A graceful hand-over costs a few round trips, however many splits the leaving worker holds."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from spate.events import Progress
from spate.store import Keyspace
from spate_stores.memory import MemoryServer

from .harness import KEYS, HookStore, client, config, planner_of, spawn

LATENCY = 0.2
"""Seconds every write of the leaving worker takes once it starts leaving."""


@pytest.mark.parametrize("held", [2, 12])
async def test_a_departing_worker_hands_back_every_split_at_once_and_the_other_claims_at_once(
    autojump_clock: trio.testing.MockClock, held: int
) -> None:
    server = MemoryServer()
    store = HookStore(client(server))
    # A long membership debounce on both: it must not hold back a hand-over (released splits
    # are unowned, and unowned splits are handed out during the quiet period). It also keeps
    # the newcomer from being given a share before the leave.
    cfg = config(max_in_flight=held, membership_debounce=1000.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(held), cfg=cfg)
        await a.until(lambda: len(a.c.owned) == held and a.c.is_leader)
        b = await spawn(nursery, client(server), "b", planner=planner_of(held), cfg=cfg)
        await trio.sleep(1.0)
        assert len(a.c.owned) == held
        assert not b.c.owned

        in_flight = peak = 0

        async def slow(kind: str, keyspace: Keyspace, key: str) -> None:
            nonlocal in_flight, peak
            counted = kind == "update" and keyspace is Keyspace.DURABLE
            counted = counted and key.startswith(KEYS.split_prefix)
            in_flight += counted
            peak = max(peak, in_flight)
            try:
                await trio.sleep(LATENCY)
            finally:
                in_flight -= counted

        store.before = slow
        began = trio.current_time()
        await a.c.depart()
        left = trio.current_time() - began
        # Every hand-back write was in flight at once ...
        assert peak == held
        # ... so leaving took a hand-back, a lease delete and the presence delete, whatever
        # the count (one after another it was two writes per split).
        assert left <= 3 * LATENCY + 0.1, left
        await b.until(lambda: len(b.c.owned) == held, within=5.0)
        took = trio.current_time() - began
        # The survivor (elected once the leader resigned) claimed them all together.
        assert took <= left + 0.5, took
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("held", [2, 12])
async def test_a_departing_follower_hands_back_at_once_and_the_leader_reassigns_at_once(
    autojump_clock: trio.testing.MockClock, held: int
) -> None:
    server = MemoryServer()
    store = HookStore(client(server))
    cfg = config(max_in_flight=held, membership_debounce=1000.0)
    async with trio.open_nursery() as nursery:
        # The leader fills its lanes; the follower is handed the rest (unowned splits are
        # handed out during the debounce), then the leader finishes its own so it has room.
        b = await spawn(nursery, client(server), "b", planner=planner_of(2 * held), cfg=cfg)
        await b.until(lambda: len(b.c.owned) == held and b.c.is_leader)
        a = await spawn(nursery, store, "a", planner=planner_of(2 * held), cfg=cfg)
        await a.until(lambda: len(a.c.owned) == held)
        for split in sorted(b.c.owned):
            await b.c.commit(split, Progress(1, completed=True))
        assert not b.c.owned

        in_flight = peak = 0

        async def slow(kind: str, keyspace: Keyspace, key: str) -> None:
            nonlocal in_flight, peak
            counted = kind == "update" and keyspace is Keyspace.DURABLE
            counted = counted and key.startswith(KEYS.split_prefix)
            in_flight += counted
            peak = max(peak, in_flight)
            try:
                await trio.sleep(LATENCY)
            finally:
                in_flight -= counted

        store.before = slow
        began = trio.current_time()
        await a.c.depart()
        left = trio.current_time() - began
        assert peak == held
        assert left <= 3 * LATENCY + 0.1, left
        await b.until(lambda: len(b.c.owned) == held, within=5.0)
        # The leader, debouncing the membership change, still handed them out at once.
        assert trio.current_time() - began <= left + 0.5
        nursery.cancel_scope.cancel()
