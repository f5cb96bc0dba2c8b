"""One owner of state, many writes in flight: different keys overlap, one key serializes."""

from __future__ import annotations

import itertools

import trio

from spate import Lost, Progress
from spate.store import Keyspace
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultRates, FaultyStore

from .harness import TTL, HookStore, client, config, planner_of, record_of, spawn

RTT = 0.1


async def test_commits_on_different_splits_overlap(autojump_clock: trio.abc.Clock) -> None:
    slow = FaultyStore(client(MemoryServer()), rates=FaultRates(latency=RTT))
    async with trio.open_nursery() as nursery:
        w = await spawn(nursery, slow, "w", planner=planner_of(8))
        await w.until(lambda: len(w.c.owned) == 8)
        started = trio.current_time()
        async with trio.open_nursery() as commits:
            for split in sorted(w.c.owned):
                commits.start_soon(w.c.commit, split, Progress(1))
        # Eight commits, one round trip: none waited for another's.
        assert trio.current_time() - started < 2 * RTT
        nursery.cancel_scope.cancel()


async def test_commits_on_one_split_are_serialized(autojump_clock: trio.abc.Clock) -> None:
    slow = FaultyStore(client(MemoryServer()), rates=FaultRates(latency=RTT))
    async with trio.open_nursery() as nursery:
        w = await spawn(nursery, slow, "w", planner=planner_of(1))
        await w.until(lambda: w.c.owned == {"s00"})
        started = trio.current_time()
        async with trio.open_nursery() as commits:
            commits.start_soon(w.c.commit, "s00", Progress(1))
            await trio.lowlevel.checkpoint()
            commits.start_soon(w.c.commit, "s00", Progress(2))
        # The second was built on the first's revision, so it waited for it — and landed.
        assert trio.current_time() - started >= 2 * RTT
        record, _ = await record_of(slow.inner, "s00")
        assert record.watermark == 2
        nursery.cancel_scope.cancel()


async def test_session_renewals_never_wait_behind_commits(autojump_clock: trio.abc.Clock) -> None:
    store = HookStore(client(MemoryServer()))

    async def slow_durable_writes(kind: str, keyspace: Keyspace, key: str) -> None:
        if keyspace is Keyspace.DURABLE:
            await trio.sleep(TTL / 3)  # every commit takes a third of a lease

    async with trio.open_nursery() as nursery:
        cfg = config(op_timeout=TTL / 2, drain_deadline=TTL / 2)
        w = await spawn(nursery, store, "w", planner=planner_of(2), cfg=cfg)
        await w.until(lambda: len(w.c.owned) == 2)
        store.before = slow_durable_writes

        async def commit_forever(split: str) -> None:
            watermark = 0
            while True:
                watermark += 1
                await w.c.commit(split, Progress(watermark))

        for split in sorted(w.c.owned):
            nursery.start_soon(commit_forever, split)
        await trio.sleep(5 * TTL)
        assert not w.of(Lost)
        assert len(w.c.owned) == 2
        renewed = sorted(
            {
                t
                for t, op, outcome in w.metrics.writes
                if op == "presence-renew" and outcome == "won"
            }
        )
        # The session (on the memory store: the presence record, which every lease names) is
        # renewed on the heartbeat's cadence throughout: the jittered tick comes at most 1.2
        # of a third of a lease after the last.
        gaps = [b - a for a, b in itertools.pairwise(renewed)]
        assert len(renewed) >= 5 * 3 / 2
        assert max(gaps) <= 2 * 1.2 * TTL / 3
        nursery.cancel_scope.cancel()
