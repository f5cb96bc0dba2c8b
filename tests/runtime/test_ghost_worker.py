"""A ghost worker does not strand splits: end to end on the memory store, virtual time.

A fake presence writer rewrites the presence record of a worker that does not exist, every
third of a lease, for as long as the test runs. The leader gives it a share of the job; it
never claims, so once the claim deadline passes the leader places its splits on the real
workers, which own every split again (the machine-level rules:
``tests/core/test_claim_deadline_sets_aside.py``).
"""

from __future__ import annotations

import trio
import trio.testing

from spate._core.records import AssignmentRecord, PresenceRecord, decode, encode
from spate.store import Keyspace, Store
from spate_stores.memory import MemoryServer
from tests.common import KEYS, config, planner_of
from tests.runtime.harness import TTL, client, cooperative, spawn

SPLITS = 8
DEADLINE = max(2 * TTL, TTL + config().drain_deadline)
"""The default claim deadline under the harness's TTL and the tests' drain deadline."""


async def _haunt(store: Store, instance: str) -> None:
    """Keep a presence record written for ``instance``, a worker that does not exist."""
    key = KEYS.worker(instance)
    value = encode(PresenceRecord(nonce=f"n-{instance}", max_in_flight=SPLITS))
    while True:
        entry = await store.get(Keyspace.EPHEMERAL, key)
        if entry is None:
            await store.create(Keyspace.EPHEMERAL, key, value)
        else:
            await store.update(Keyspace.EPHEMERAL, key, value, entry.revision)
        await trio.sleep(TTL / 3)


async def _assigned(store: Store, instance: str) -> tuple[str, ...]:
    entry = await store.get(Keyspace.DURABLE, KEYS.assign(instance))
    return () if entry is None else decode(AssignmentRecord, entry.key, entry.value).splits


async def _until_assigned(store: Store, instance: str, *, within: float) -> None:
    """Wait (virtual time, polling the store) until the leader gives ``instance`` a share."""
    with trio.fail_after(within):
        while not await _assigned(store, instance):  # noqa: ASYNC110
            await trio.sleep(0.25)


async def test_a_ghost_presence_strands_no_split_past_the_claim_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    cfg = config(max_in_flight=SPLITS)
    async with client(server) as store, trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(SPLITS), cfg=cfg,
                        on_event=cooperative)  # fmt: skip
        b = await spawn(nursery, client(server), "b", planner=planner_of(SPLITS), cfg=cfg,
                        on_event=cooperative)  # fmt: skip
        await a.until(lambda: len(a.c.owned) + len(b.c.owned) == SPLITS, within=30)
        nursery.start_soon(_haunt, store, "ghost")
        # Wait on the store, not on the owned count: the count also dips while a split moves
        # between the real workers, which says nothing about the ghost.
        await _until_assigned(store, "ghost", within=30)
        await a.until(lambda: len(a.c.owned) + len(b.c.owned) < SPLITS, within=30)
        # Owned again within the deadline (and a claim), while the ghost is still written.
        with trio.fail_after(DEADLINE + TTL):
            while await _assigned(store, "ghost") != ():  # noqa: ASYNC110
                await trio.sleep(0.25)
            await a.until(lambda: len(a.c.owned) + len(b.c.owned) == SPLITS)
        assert await store.get(Keyspace.EPHEMERAL, KEYS.worker("ghost")) is not None
        nursery.cancel_scope.cancel()
