"""Coordinator sessions: opened at startup, ended with the coordinator, the only keepalive of a
session store's leases, replaced when lost."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

import spate
from spate import FatalCoordinationError, Gained, Lost, Progress
from spate.store import Keyspace
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultyStore

from .harness import KEYS, TTL, client, config, planner_of, spawn
from .session_store import SessionMemoryStore

EPHEMERAL = Keyspace.EPHEMERAL


async def test_a_session_store_keeps_held_leases_with_no_per_split_renewal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = SessionMemoryStore(server, TTL)
    async with trio.open_nursery() as nursery:
        store.attach(nursery)
        w1 = await spawn(nursery, store, "w1", planner=planner_of(4))
        await w1.until(lambda: len(w1.of(Gained)) == 4)
        store.writes.clear()
        await trio.sleep(5 * TTL)
        assert store.writes[("update", "ephemeral:split")] == 0, store.writes
        assert store.writes[("update", "ephemeral:worker")] > 0  # presence: O(workers)
        assert not w1.of(Lost)
        assert len(w1.c.owned) == 4
        for split in ("s00", "s01", "s02", "s03"):
            assert await store.get(EPHEMERAL, KEYS.split(split)) is not None
        nursery.cancel_scope.cancel()


async def test_a_session_whose_keepalives_stop_self_fences_within_a_lease_then_is_replaced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = SessionMemoryStore(server, TTL)
    async with trio.open_nursery() as nursery:
        store.attach(nursery)
        w1 = await spawn(nursery, store, "w1", planner=planner_of(4))
        await w1.until(lambda: len(w1.of(Gained)) == 4)
        first = store.sessions[0]
        first.beating = False  # keepalives stop being confirmed (a starved keepalive)
        stopped = trio.current_time()
        await w1.until(lambda: len(w1.of(Lost)) == 4)
        losses = w1.of(Lost)
        assert {lost.reason for lost in losses} == {"starved"}
        # The self-fence reads the last confirmed keepalive: within a lease and a heartbeat.
        assert max(w1.time_of(lost) for lost in losses) - stopped <= TTL + TTL / 3 * 1.2 + 0.5
        # The session is lost; a new one is opened and the worker carries on under it.
        await w1.until(lambda: len(store.sessions) == 2 and len(w1.of(Gained)) == 8)
        assert first.lost
        assert w1.error is None
        nursery.cancel_scope.cancel()


async def test_a_coordinator_stopped_by_a_fatal_error_ends_its_session_while_the_client_lives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = SessionMemoryStore(server, TTL)  # one client, shared by both workers
    async with trio.open_nursery() as nursery:
        store.attach(nursery)
        w1 = await spawn(nursery, store, "w1", planner=planner_of(4), expect_error=True)
        await w1.until(lambda: len(w1.of(Gained)) == 4)
        w2 = await spawn(nursery, store, "w2", planner=planner_of(4))
        split = next(iter(w1.c.owned))
        await w1.c.commit(split, Progress(5))
        with pytest.raises(FatalCoordinationError):
            await w1.c.commit(split, Progress(3))
        await w1.done.wait()
        ended = trio.current_time()
        # Its session ended with it: presence and leadership are gone now, not after a lease.
        assert await store.get(EPHEMERAL, KEYS.worker("w1")) is None
        leader = await store.get(EPHEMERAL, KEYS.leader)
        assert leader is None or b'"w1"' not in leader.value
        assert store.sessions[0].ended
        assert not store.sessions[1].ended
        assert (
            await store.get(EPHEMERAL, KEYS.worker("w2")) is not None
        )  # the other session is intact
        await w2.until(lambda: len(w2.c.owned) == 4)
        assert trio.current_time() - ended < TTL
        nursery.cancel_scope.cancel()


async def test_leaving_while_the_store_is_unreachable_gives_up_within_an_operation_timeout(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    server = MemoryServer()
    store = FaultyStore(client(server))
    held: list[str] = []

    async def handle(split: spate.SplitHandle) -> None:
        held.append(split.id)
        await trio.sleep_forever()

    cfg = config()
    assert cfg.op_timeout == 1.0
    with caplog.at_level(logging.WARNING, logger="spate.worker"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: spate.run_worker(
                    store,
                    job="job",
                    instance="a",
                    planner=planner_of(3),
                    handler=handle,
                    config=cfg,
                )
            )
            with trio.fail_after(30):
                while len(held) < 3:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            store.partition()
            cancelled = trio.current_time()
            nursery.cancel_scope.cancel()
    # One operation timeout to learn the hand-back cannot land, at most one more to end the
    # session: not the 30 s hand-over bound.
    assert trio.current_time() - cancelled <= 2 * cfg.op_timeout + 0.5
    assert "left without handing back its splits" in caplog.text
