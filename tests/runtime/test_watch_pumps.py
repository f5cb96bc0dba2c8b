"""Who reads what, end to end (Trio, the memory store): what each worker's watches are sent.

The rules are specified machine by machine in ``tests/core/test_watch_scopes.py``; here the
runtime's watch pumps open the machine's watches on a real store client, which counts what it
delivers, and re-open a watch that broke.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

from spate import AllComplete, Progress
from spate.store import Delete, Keyspace, Put, SnapshotDone
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultyStore

from .harness import KEYS, TTL, client, config, cooperative, planner_of, spawn


class _CountingWatches(MemoryStore):
    """A memory store client that notes every watch it opens and every live event it delivers."""

    def __init__(self, server: MemoryServer) -> None:
        super().__init__(server=server, ephemeral_ttl=TTL)
        self.watched: list[tuple[Keyspace, str, bool]] = []
        self.delivered: list[tuple[Keyspace, str, str]] = []
        self.listed: list[tuple[Keyspace, str]] = []

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        self.watched.append((keyspace, prefix, exact))
        return self._counted(keyspace, super().watch(keyspace, prefix, exact=exact))

    @asynccontextmanager
    async def _counted(self, keyspace: Keyspace, watch: Any) -> AsyncIterator[AsyncIterator[Any]]:
        async with watch as events:
            yield self._events(keyspace, events)

    async def _events(self, keyspace: Keyspace, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        live = False
        async for event in events:
            if live and isinstance(event, Put):
                self.delivered.append((keyspace, event.entry.key, "put"))
            elif live and isinstance(event, Delete):
                self.delivered.append((keyspace, event.key, "delete"))
            live = live or isinstance(event, SnapshotDone)
            yield event

    async def list(self, keyspace: Keyspace, prefix: str) -> Any:
        self.listed.append((keyspace, prefix))
        return await super().list(keyspace, prefix)

    def list_pages(self, keyspace: Keyspace, prefix: str, *, page_size: int) -> Any:
        self.listed.append((keyspace, prefix))
        return super().list_pages(keyspace, prefix, page_size=page_size)

    # builtins.list: inside this class, ``list`` is the method above.
    def split_events(self, since: int = 0) -> builtins.list[tuple[Keyspace, str, str]]:
        split_keys = (KEYS.split(""), KEYS.lease(""))
        return [d for d in self.delivered[since:] if d[1].startswith(split_keys)]


async def test_a_plain_commit_is_delivered_to_nobody_and_a_completion_to_the_leader_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    stores = {name: _CountingWatches(server) for name in "ab"}
    cfg = config(reconcile_interval=3600.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(
            nursery, stores["a"], "a", planner=planner_of(4), cfg=cfg, on_event=cooperative
        )
        await a.until(lambda: a.c.is_leader and len(a.c.owned) == 4)
        b = await spawn(
            nursery, stores["b"], "b", planner=planner_of(4), cfg=cfg, on_event=cooperative
        )
        await b.until(lambda: len(b.c.owned) >= 1 and len(a.c.owned) + len(b.c.owned) == 4)
        await trio.sleep(1.0)
        # The follower's watches are three exact keys; the leader's, the ephemeral keyspace
        # and two exact durable keys.
        assert set(stores["b"].watched) == {
            (Keyspace.EPHEMERAL, KEYS.leader, True),
            (Keyspace.DURABLE, KEYS.plan, True),
            (Keyspace.DURABLE, KEYS.assign("b"), True),
        }
        assert stores["b"].listed == []
        assert set(stores["a"].watched) >= {
            (Keyspace.EPHEMERAL, KEYS.prefix, False),
            (Keyspace.DURABLE, KEYS.plan, True),
            (Keyspace.DURABLE, KEYS.assign("a"), True),
        }
        theirs = sorted(b.c.owned)[0]
        ours = sorted(a.c.owned)[0]
        marks = {name: len(store.delivered) for name, store in stores.items()}
        # Commit often and wait less than a third of a lease: no renewal comes between.
        for watermark in range(10, 20):
            await b.c.commit(theirs, Progress(watermark, b"x"))
            await a.c.commit(ours, Progress(watermark, b"y"))
        await trio.sleep(0.5)
        assert {name: store.split_events(marks[name]) for name, store in stores.items()} == {
            "a": [],
            "b": [],
        }
        marks = {name: len(store.delivered) for name, store in stores.items()}
        await b.c.commit(theirs, Progress(100, completed=True))
        await trio.sleep(0.5)
        assert stores["a"].split_events(marks["a"]) == [
            # (the memory store keeps per-key TTLs: leases are durable keys, alive by session)
            (Keyspace.DURABLE, KEYS.lease(theirs), "delete")
        ]
        assert stores["b"].split_events(marks["b"]) == []
        nursery.cancel_scope.cancel()


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
