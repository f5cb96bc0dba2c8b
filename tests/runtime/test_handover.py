"""A graceful hand-over costs a few round trips, however many splits the leaving worker holds."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from spate import ConfigError, FatalCoordinationError, Progress
from spate._core.records import PresenceRecord, encode
from spate.store import Keyspace, Won
from spate_stores.memory import MemoryServer, MemoryStore

from .harness import KEYS, TTL, HookStore, client, config, planner_of, spawn
from .session_store import SessionMemoryStore

E = Keyspace.EPHEMERAL

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
        # ... so leaving took two writes' time, whatever the count: the hand-backs, then the
        # lease deletes with the presence delete beside them (one after another it was two
        # writes per split; with the presence delete after the lease deletes, three writes).
        assert left <= 2 * LATENCY + 0.1, left
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
        assert left <= 2 * LATENCY + 0.1, left
        await b.until(lambda: len(b.c.owned) == held, within=5.0)
        # The leader, debouncing the membership change, still handed them out at once.
        assert trio.current_time() - began <= left + 0.5
        nursery.cancel_scope.cancel()


async def test_a_departure_deletes_its_presence_once_its_hand_backs_landed_beside_its_leases(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The working set is emptied first (every owner cleared), so the leader never meets a
    # departed worker's split still owned; the presence then goes with the lease drops, not a
    # write after them.
    server = MemoryServer()
    store = HookStore(client(server))
    cfg = config(max_in_flight=4)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(4), cfg=cfg)
        await a.until(lambda: len(a.c.owned) == 4)
        started: dict[tuple[str, str], float] = {}
        landed: dict[tuple[str, str], float] = {}

        async def before(kind: str, keyspace: Keyspace, key: str) -> None:
            started[(kind, key)] = trio.current_time()
            await trio.sleep(LATENCY)

        async def after(kind: str, keyspace: Keyspace, key: str, result: object) -> None:
            landed[(kind, key)] = trio.current_time()

        store.before, store.after = before, after
        await a.c.depart()
        splits = [KEYS.split(f"s0{n}") for n in range(4)]
        hand_backs = [landed[("update", key)] for key in splits]
        lease_drops = [started[("delete", key)] for key in splits]
        presence = started[("delete", KEYS.worker("a"))]
        assert presence >= max(hand_backs), "the presence went before the working set was empty"
        assert presence == min(lease_drops), "the presence waited for the lease drops"
        nursery.cancel_scope.cancel()


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
        assert all([await store.get(E, KEYS.split(s)) for s in others])  # ... leases kept
        with trio.fail_after(2 * TTL):
            # (Polling the store itself: what is asked is that the keys are gone from it.)
            while any([await store.get(E, KEYS.split(s)) for s in others]):  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert not store.sessions[-1].ended  # the session lives: the rule gave them back
        nursery.cancel_scope.cancel()


async def _idle_peer(server: MemoryServer) -> MemoryStore:
    """A peer that is present but never claims: handed-back splits stay unowned."""
    ghost = client(server)
    presence = encode(PresenceRecord(nonce="ghost", max_in_flight=4))
    assert isinstance(await ghost.create(E, KEYS.worker("ghost"), presence), Won)
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
        # An unreadable progress record stops the coordinator: the wait is over with it.
        entry = await ghost.get(Keyspace.DURABLE, KEYS.split("s00"))
        assert entry is not None
        await ghost.update(Keyspace.DURABLE, KEYS.split("s00"), b"not a record", entry.revision)
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
