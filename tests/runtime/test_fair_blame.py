"""Fair blame: a dead owner's tenancy charges its split only when it moved nothing forward.

Each test drives one split through a chain of owners that die abruptly (their leases left to
expire, or the same instance id restarted at once, which reclaims its own live lease).
"""

from __future__ import annotations

import pytest
import trio

from spate import Gained, Progress
from spate._core.records import Status
from spate_stores.memory import MemoryServer

from .harness import TTL, client, config, planner_of, record_of, spawn

MAX_ATTEMPTS = 3


def _instance(restart: bool, i: int) -> str:
    # restart: the same id comes straight back (a reclaim of its own live lease, as a process
    # supervisor restarting a crashed worker does); otherwise a fresh worker takes over after
    # the lease expires.
    return "w" if restart else f"w{i}"


@pytest.mark.parametrize("restart", [False, True], ids=["expiry", "reclaim"])
async def test_a_split_that_kills_every_owner_before_committing_is_quarantined(
    autojump_clock: trio.abc.Clock, restart: bool
) -> None:
    server = MemoryServer()
    cfg = config(max_attempts=MAX_ATTEMPTS)
    async with trio.open_nursery() as nursery:
        for i in range(MAX_ATTEMPTS):
            w = await spawn(nursery, client(server), _instance(restart, i), planner=planner_of(1),
                            cfg=cfg)  # fmt: skip
            await w.wait_for(Gained, "s00", within=4 * TTL)
            w.kill()  # the handler "kills its process" before its first commit
            await w.done.wait()
            record, _ = await record_of(client(server), "s00")
            assert record.status is Status.RUNNABLE
            assert record.attempts == i  # the i-th owner was charged for its predecessor
        last = await spawn(nursery, client(server), _instance(restart, MAX_ATTEMPTS),
                           planner=planner_of(1), cfg=cfg)  # fmt: skip
        await last.until(lambda: last.metrics.counts["quarantined"] >= 1, within=4 * TTL)
        record, _ = await record_of(client(server), "s00")
        assert record.status is Status.QUARANTINED
        assert record.attempts == MAX_ATTEMPTS
        assert not last.of(Gained, "s00")  # parked, not handed to a fourth victim
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("restart", [False, True], ids=["expiry", "reclaim"])
async def test_a_split_that_keeps_committing_survives_the_deaths_of_its_workers(
    autojump_clock: trio.abc.Clock, restart: bool
) -> None:
    server = MemoryServer()
    cfg = config(max_attempts=MAX_ATTEMPTS)
    deaths = 3 * MAX_ATTEMPTS
    async with trio.open_nursery() as nursery:
        for i in range(deaths):
            w = await spawn(nursery, client(server), _instance(restart, i), planner=planner_of(1),
                            cfg=cfg)  # fmt: skip
            gained = await w.wait_for(Gained, "s00", within=4 * TTL)
            assert gained.progress.watermark == (i or None)  # resumes where the dead one got
            await w.c.commit("s00", Progress(i + 1))  # moves forward, then the worker dies
            w.kill()
            await w.done.wait()
            record, _ = await record_of(client(server), "s00")
            assert record.attempts == 0
            assert record.status is Status.RUNNABLE
        last = await spawn(nursery, client(server), "survivor", planner=planner_of(1), cfg=cfg)
        await last.wait_for(Gained, "s00", within=4 * TTL)
        await last.c.commit("s00", Progress(deaths + 1, completed=True))
        record, _ = await record_of(client(server), "s00")
        assert record.status is Status.COMPLETED
        assert record.attempts == 0
        nursery.cancel_scope.cancel()


async def test_a_commit_that_does_not_move_the_watermark_is_no_alibi(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Re-committing the resume point (state only) is not progress: the death still charges.
    server = MemoryServer()
    cfg = config(max_attempts=MAX_ATTEMPTS)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1), cfg=cfg)
        await a.wait_for(Gained, "s00")
        await a.c.commit("s00", Progress(5))
        a.kill()
        b = await spawn(nursery, client(server), "b", planner=planner_of(1), cfg=cfg)
        await b.wait_for(Gained, "s00", within=4 * TTL)
        await b.c.commit("s00", Progress(5, b"only-state"))
        b.kill()
        c = await spawn(nursery, client(server), "c", planner=planner_of(1), cfg=cfg)
        await c.wait_for(Gained, "s00", within=4 * TTL)
        record, _ = await record_of(client(server), "s00")
        assert record.attempts == 1  # a advanced (free), b did not (charged)
        nursery.cancel_scope.cancel()


async def test_fail_always_consumes_an_attempt_even_after_progress(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1), cfg=config())
        await a.wait_for(Gained, "s00")
        await a.c.commit("s00", Progress(9))
        await a.c.fail("s00", "bad input")
        record, _ = await record_of(client(server), "s00")
        assert record.attempts == 1
        assert record.owner is None
        nursery.cancel_scope.cancel()
