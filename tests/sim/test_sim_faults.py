"""The faults the simulator adds to FaultyStore: latency spikes, late landings, replays."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from spate import StoreUnavailable
from spate.store import Keyspace, Put, SnapshotDone
from spate_stores.memory import MemoryStore
from spate_testing.faults import FaultRates, FaultyStore


async def test_a_latency_spike_stalls_the_call(autojump_clock: trio.testing.MockClock) -> None:
    store = FaultyStore(MemoryStore(), rates=FaultRates(spike_rate=1.0, spike_latency=7.0))
    start = trio.current_time()
    await store.get(Keyspace.DURABLE, "k")
    assert trio.current_time() - start == pytest.approx(7.0)
    assert store.injected["latency_spike"] == 1


async def test_a_late_write_fails_for_its_caller_then_lands(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = MemoryStore()
    store = FaultyStore(inner, rates=FaultRates(late_rate=1.0, late_delay=5.0))
    async with trio.open_nursery() as nursery:
        store.attach(nursery)
        with pytest.raises(StoreUnavailable, match="lands 5 s later"):
            await store.create(Keyspace.DURABLE, "k", b"late")
        assert await inner.get(Keyspace.DURABLE, "k") is None
        await trio.sleep(4.9)
        assert await inner.get(Keyspace.DURABLE, "k") is None
        await trio.sleep(0.2)
        entry = await inner.get(Keyspace.DURABLE, "k")
        assert entry is not None
        assert entry.value == b"late"
    assert store.injected["late_landing"] == 1


async def test_late_writes_need_a_nursery() -> None:
    store = FaultyStore(MemoryStore(), rates=FaultRates(late_rate=1.0, late_delay=5.0))
    await store.create(Keyspace.DURABLE, "k", b"v")
    assert store.injected["late_landing"] == 0


async def test_a_replay_redelivers_recent_live_events_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = MemoryStore()
    store = FaultyStore(inner, rates=FaultRates(replay_rate=1.0))
    await inner.create(Keyspace.DURABLE, "a", b"")
    async with store.watch(Keyspace.DURABLE, "") as events:
        assert isinstance(await events.__anext__(), Put)
        assert await events.__anext__() == SnapshotDone()
        await inner.create(Keyspace.DURABLE, "b", b"")
        await inner.create(Keyspace.DURABLE, "c", b"")
        seen = []
        with trio.move_on_after(1):
            async for event in events:
                assert isinstance(event, Put)
                seen.append(event.entry.key)
    # "b" and its replay, then "c" followed by a replayed suffix of ["b", "c"].
    assert seen[:2] == ["b", "b"]
    assert seen[2] == "c"
    assert seen[-1] == "c"
    assert store.injected["replay"] >= 2


def test_new_rates_are_validated() -> None:
    with pytest.raises(ValueError, match="replay_rate"):
        FaultRates(replay_rate=2.0)
    with pytest.raises(ValueError, match="late_delay"):
        FaultRates(late_delay=-1.0)
