from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from spate import StoreUnavailable
from spate.store import Delete, Keyspace, Put, SnapshotDone, Won
from spate_stores.memory import MemoryStore
from spate_testing.faults import FaultRates, FaultyStore


async def test_a_write_sent_while_frozen_lands_after_the_thaw(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    store.freeze()
    results: list[object] = []

    async def write() -> None:
        results.append(await store.create(Keyspace.DURABLE, "k", b"v"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        await trio.sleep(100)
        assert results == []
        assert await inner.get(Keyspace.DURABLE, "k") is None
        store.thaw()
    assert isinstance(results[0], Won)
    assert await inner.get(Keyspace.DURABLE, "k") is not None


async def test_a_partition_fails_calls_and_breaks_open_watches() -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    await store.create(Keyspace.DURABLE, "a", b"1")
    async with store.watch(Keyspace.DURABLE, "") as events:
        assert isinstance(await events.__anext__(), Put)
        assert await events.__anext__() == SnapshotDone()
        store.partition()
        await inner.create(Keyspace.DURABLE, "b", b"2")
        with pytest.raises(StoreUnavailable):
            await events.__anext__()
    with pytest.raises(StoreUnavailable, match="partitioned"):
        await store.get(Keyspace.DURABLE, "a")
    store.heal()
    assert await store.get(Keyspace.DURABLE, "a") is not None


async def test_a_maybe_landed_write_raises_but_is_applied() -> None:
    inner = MemoryStore()
    store = FaultyStore(inner, rates=FaultRates(maybe_landed_rate=1.0))
    with pytest.raises(StoreUnavailable, match="it landed"):
        await store.create(Keyspace.DURABLE, "k", b"v")
    entry = await inner.get(Keyspace.DURABLE, "k")
    assert entry is not None
    assert entry.value == b"v"
    assert store.injected["maybe_landed"] == 1


async def test_silent_expiry_drops_expiries_but_not_own_deletes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = MemoryStore(ephemeral_ttl=10)
    store = FaultyStore(inner, rates=FaultRates(silent_expiry=True))
    assert store.capabilities.expiry_reaches_watchers is False
    await store.create(Keyspace.EPHEMERAL, "expires", b"")
    await store.create(Keyspace.EPHEMERAL, "deleted", b"")
    seen: list[object] = []
    async with store.watch(Keyspace.EPHEMERAL, "") as events:
        seen.extend([await events.__anext__() for _ in range(3)])
        await trio.sleep(1)
        await store.delete(Keyspace.EPHEMERAL, "deleted")
        seen.append(await events.__anext__())
        with trio.move_on_after(60):
            seen.append(await events.__anext__())
    assert isinstance(seen[3], Delete)
    assert seen[3].key == "deleted"
    assert len(seen) == 4
    assert store.injected["silent_expiry"] == 1
    assert await inner.get(Keyspace.EPHEMERAL, "expires") is None


async def test_duplicates_repeat_watch_events() -> None:
    store = FaultyStore(MemoryStore(), rates=FaultRates(duplicate_rate=1.0))
    await store.create(Keyspace.DURABLE, "a", b"")
    async with store.watch(Keyspace.DURABLE, "") as events:
        first, second = await events.__anext__(), await events.__anext__()
    assert first == second


async def test_faults_are_reproducible_from_the_seed() -> None:
    async def run(seed: int) -> dict[str, int]:
        store = FaultyStore(
            MemoryStore(),
            rng=random.Random(seed),
            rates=FaultRates(unavailable_rate=0.3, maybe_landed_rate=0.3),
        )
        for i in range(50):
            try:
                await store.create(Keyspace.DURABLE, f"k{i}", b"")
            except StoreUnavailable:
                pass
        return dict(store.injected)

    assert await run(7) == await run(7)
    assert await run(7) != await run(8)


def test_rates_are_validated() -> None:
    with pytest.raises(ValueError, match="within"):
        FaultRates(unavailable_rate=1.5)


async def test_a_stale_write_that_waited_out_a_freeze_is_counted_as_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = MemoryStore()
    won = await inner.create(Keyspace.DURABLE, "k", b"1")
    assert isinstance(won, Won)
    zombie = FaultyStore(inner)
    zombie.freeze()
    async with trio.open_nursery() as nursery:

        async def stale_write() -> None:
            # The caller gives up after 1 s, but a stopped process cannot time out: the
            # write still reaches the store after the thaw.
            with trio.move_on_after(1):
                await zombie.update(Keyspace.DURABLE, "k", b"zombie", won.revision)

        nursery.start_soon(stale_write)
        await trio.sleep(5)
        await inner.update(Keyspace.DURABLE, "k", b"successor", won.revision)
        zombie.thaw()
    entry = await inner.get(Keyspace.DURABLE, "k")
    assert entry is not None
    assert entry.value == b"successor"
    assert zombie.late_writes == {"refused": 1}
