from __future__ import annotations

import trio

from spate._runtime.probe import probe_store
from spate.store import Conflict, Delete, Keyspace, Put, SnapshotDone, Won
from spate_stores.memory import MemoryStore


async def test_memory_store_passes_the_startup_probe() -> None:
    async with MemoryStore() as store:
        await probe_store(store)


async def test_expiry_reaches_a_watcher_exactly_at_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryStore(ephemeral_ttl=10) as store:
        won = await store.create(Keyspace.EPHEMERAL, "a", b"1")
        assert isinstance(won, Won)
        start = trio.current_time()
        async with store.watch(Keyspace.EPHEMERAL, "") as events:
            assert await events.__anext__() == Put(await store.get(Keyspace.EPHEMERAL, "a"))  # type: ignore[arg-type]
            assert await events.__anext__() == SnapshotDone()
            event = await events.__anext__()
            assert isinstance(event, Delete)
            assert trio.current_time() - start == 10
        assert await store.get(Keyspace.EPHEMERAL, "a") is None
        assert await store.update(Keyspace.EPHEMERAL, "a", b"2", won.revision) == Conflict()
