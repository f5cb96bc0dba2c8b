"""Hand-over end to end: a departure cancelled half-way, and waiting for new owners (Trio).

The hand-over's round trips are specified machine by machine in
``tests/core/test_handover_round_trips.py``.
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from spate import ConfigError, FatalCoordinationError, Progress
from spate._core.records import PlanRecord, PresenceRecord, decode, encode
from spate.store import Keyspace, Won
from spate_stores.memory import MemoryServer, MemoryStore

from .harness import KEYS, TTL, client, config, planner_of, spawn
from .session_store import SessionMemoryStore

LATENCY = 0.2
"""Seconds every write of the leaving worker takes once it starts leaving."""


class _SlowHandBacks(SessionMemoryStore):
    """A session store whose progress-record writes take LATENCY once ``slow`` is set."""

    slow = False

    async def update(  # type: ignore[no-untyped-def]
        self, keyspace, key, value, expected, *, session=None
    ):
        if self.slow and keyspace is Keyspace.DURABLE and key.startswith(KEYS.split_prefix):
            await trio.sleep(LATENCY)
        return await super().update(keyspace, key, value, expected, session=session)


async def test_a_departure_abandoned_with_its_hand_backs_in_flight_strands_no_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A departure's writes are shielded, but its waits for a key are not: cancelled while one
    # hand-back waits behind a commit, it is abandoned once the others have landed and before
    # their lease drops run. On a session store this process's keepalive would keep those
    # leases, and the splits with them, for as long as it lives, unless the stray-lease rule
    # gives them back, which it does only for splits no flow is busy with.
    server = MemoryServer()
    store = _SlowHandBacks(server, TTL)
    async with trio.open_nursery() as nursery:
        store.attach(nursery)
        a = await spawn(nursery, store, "a", planner=planner_of(4), cfg=config(max_in_flight=4))
        await a.until(lambda: len(a.c.owned) == 4)
        store.slow = True
        nursery.start_soon(a.c.commit, "s00", Progress(1))  # holds s00's record a while
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(LATENCY / 2) as scope:
            await a.c.depart()
        assert scope.cancelled_caught
        await trio.sleep(LATENCY)  # every write in flight has landed
        others = ("s01", "s02", "s03")
        assert not set(others) & set(a.c.owned)  # handed back ...
        assert all(
            [await store.get(Keyspace.EPHEMERAL, KEYS.split(s)) for s in others]
        )  # ... leases kept
        with trio.fail_after(2 * TTL):
            # (Polling the store itself: what is asked is that the keys are gone from it.)
            while any([await store.get(Keyspace.EPHEMERAL, KEYS.split(s)) for s in others]):  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert not store.sessions[-1].ended  # the session lives: the rule gave them back
        nursery.cancel_scope.cancel()


async def _idle_peer(server: MemoryServer) -> MemoryStore:
    """A peer that is present but never claims: handed-back splits stay unowned."""
    ghost = client(server)
    presence = encode(PresenceRecord(nonce="ghost", max_in_flight=4))
    assert isinstance(await ghost.create(Keyspace.EPHEMERAL, KEYS.worker("ghost"), presence), Won)
    return ghost


async def test_waiting_for_new_owners_ends_when_the_coordinator_stops(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(2), expect_error=True)
        await a.until(lambda: len(a.c.owned) == 2)
        ghost = await _idle_peer(server)
        await a.c.depart()
        waited = trio.Event()

        async def wait() -> None:
            await a.c.wait_handed_over(["s00", "s01"])
            waited.set()

        nursery.start_soon(wait)
        await trio.sleep(5.0)
        assert not waited.is_set()  # nobody took them
        # A plan record of another fingerprint stops the coordinator: the wait is over with it.
        entry = await ghost.get(Keyspace.DURABLE, KEYS.plan)
        assert entry is not None
        plan = attrs.evolve(decode(PlanRecord, entry.key, entry.value), fingerprint="other")
        await ghost.update(Keyspace.DURABLE, KEYS.plan, encode(plan), entry.revision)
        with trio.fail_after(5.0):
            await waited.wait()
        await a.until(lambda: a.error is not None)
    assert isinstance(a.error, FatalCoordinationError)


async def test_waiting_for_new_owners_takes_a_bare_split_id_as_one_split(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1))
        await a.until(lambda: len(a.c.owned) == 1)
        await _idle_peer(server)
        await a.c.depart()
        # "s00", not the splits "s", "0" and "0" (unknown, so not waited for)
        with trio.move_on_after(5.0) as waited:
            await a.c.wait_handed_over("s00")
        assert waited.cancelled_caught  # still unowned: it is waited for
        with pytest.raises(ConfigError, match="a split id is a str"):
            await a.c.wait_handed_over([7])  # type: ignore[list-item]
        nursery.cancel_scope.cancel()
