"""MemoryStore behaviour beyond the conformance suite: lifecycle, sharing, exact timing."""

from __future__ import annotations

import math
from contextlib import AsyncExitStack

import pytest
import trio
import trio.testing

from spate import ConfigError, StoreError, StoreUnavailable
from spate.store import (
    Create,
    Delete,
    Entry,
    Keyspace,
    Put,
    SnapshotDone,
    Swap,
    WatchEvent,
    Won,
)
from spate_stores.memory import MemoryServer, MemoryStore

DURABLE = Keyspace.DURABLE
EPHEMERAL = Keyspace.EPHEMERAL


def test_a_namespace_keeps_its_ttl_on_a_shared_server() -> None:
    server = MemoryServer()
    MemoryStore(namespace="job", ephemeral_ttl=10, server=server)
    with pytest.raises(StoreError, match=r"'job' already uses an ephemeral TTL of 10.* not 5"):
        MemoryStore(namespace="job", ephemeral_ttl=5, server=server)
    MemoryStore(namespace="job", ephemeral_ttl=10, server=server)
    MemoryStore(namespace="other-job", ephemeral_ttl=5, server=server)


@pytest.mark.parametrize("ttl", [0, -1, math.inf, math.nan])
def test_ttl_must_be_positive_and_finite(ttl: float) -> None:
    with pytest.raises(ConfigError, match="ephemeral_ttl must be a positive number"):
        MemoryStore(ephemeral_ttl=ttl)


def test_value_size_limit_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_value_size must be at least 1 byte"):
        MemoryStore(max_value_size=0)


async def test_closed_store_refuses_every_call() -> None:
    store = MemoryStore()
    async with store:
        assert isinstance(await store.create(DURABLE, "k", b"v"), Won)
    for call in (
        store.get(DURABLE, "k"),
        store.list(DURABLE, ""),
        store.create(DURABLE, "k2", b"v"),
        store.update(DURABLE, "k", b"v", 1),
        store.delete(DURABLE, "k"),
        store.write_many([Create("k3", b"v"), Swap("k", b"v", 1)]),
    ):
        with pytest.raises(StoreError, match="is closed; open a new store"):
            await call
    with pytest.raises(StoreError, match="is closed"):
        async with store.watch(DURABLE, ""):
            pass
    with pytest.raises(StoreError, match="is closed"):
        async with store:
            pass


async def test_a_cancelled_close_still_closes() -> None:
    store = MemoryStore.process_shared(namespace="cancelled-close", ephemeral_ttl=5)
    with trio.CancelScope() as scope:
        async with store:
            scope.cancel()
    with pytest.raises(StoreError, match="is closed"):
        await store.get(DURABLE, "k")
    # The process-wide server was released too: the namespace may take another TTL now.
    async with MemoryStore.process_shared(namespace="cancelled-close", ephemeral_ttl=6):
        pass


async def test_closing_one_client_leaves_the_server_to_the_others() -> None:
    server = MemoryServer()
    async with MemoryStore(server=server) as survivor:
        async with MemoryStore(server=server) as leaver:
            assert isinstance(await leaver.create(DURABLE, "k", b"v"), Won)
        assert await survivor.get(DURABLE, "k") is not None


async def test_clients_of_one_server_see_each_others_writes_and_watches() -> None:
    server = MemoryServer()
    async with MemoryStore(server=server) as one, MemoryStore(server=server) as two:
        async with two.watch(DURABLE, "") as events:
            assert await events.__anext__() == SnapshotDone()
            won = await one.create(DURABLE, "k", b"v")
            assert isinstance(won, Won)
            assert await events.__anext__() == Put(Entry("k", b"v", won.revision))
        assert await two.get(DURABLE, "k") == Entry("k", b"v", won.revision)


async def test_open_watch_ends_with_store_unavailable_when_the_client_closes() -> None:
    store = MemoryStore()
    async with store.watch(DURABLE, "") as events:
        assert await events.__anext__() == SnapshotDone()
        await store.create(DURABLE, "k", b"v")
        await store.aclose()
        # What was already delivered is still read; then the watch breaks, as a real one would.
        assert isinstance(await events.__anext__(), Put)
        with pytest.raises(StoreUnavailable, match="was closed while a watch was open"):
            await events.__anext__()


async def test_watch_blocked_on_an_idle_keyspace_breaks_when_the_client_closes() -> None:
    store = MemoryStore()
    async with store.watch(DURABLE, "") as events:
        assert await events.__anext__() == SnapshotDone()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.aclose)
            with pytest.raises(StoreUnavailable):
                await events.__anext__()


async def test_a_cancelled_write_never_lands() -> None:
    async with MemoryStore() as store:
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.create(DURABLE, "k", b"v")
        assert await store.get(DURABLE, "k") is None


async def test_expiry_is_exact_on_the_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    async with MemoryStore(ephemeral_ttl=10) as store:
        won = await store.create(EPHEMERAL, "lease", b"v")
        assert isinstance(won, Won)
        await trio.sleep(9.999)
        assert await store.get(EPHEMERAL, "lease") is not None
        await trio.sleep(0.001)
        assert await store.get(EPHEMERAL, "lease") is None


async def test_an_update_restarts_the_ttl(autojump_clock: trio.testing.MockClock) -> None:
    async with MemoryStore(ephemeral_ttl=10) as store:
        won = await store.create(EPHEMERAL, "lease", b"v")
        assert isinstance(won, Won)
        await trio.sleep(6)
        renewed = await store.update(EPHEMERAL, "lease", b"v", won.revision)
        assert isinstance(renewed, Won)
        await trio.sleep(9.5)
        assert await store.get(EPHEMERAL, "lease") is not None
        await trio.sleep(0.5)
        assert await store.get(EPHEMERAL, "lease") is None


async def test_expiry_reaches_every_watcher_with_one_revision(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    async with (
        MemoryStore(server=server, ephemeral_ttl=5) as one,
        MemoryStore(server=server, ephemeral_ttl=5) as two,
    ):
        await one.create(EPHEMERAL, "lease", b"v")
        async with one.watch(EPHEMERAL, "") as a, two.watch(EPHEMERAL, "lease") as b:
            for events in (a, b):
                assert isinstance(await events.__anext__(), Put)
                assert await events.__anext__() == SnapshotDone()
            gone_a = await a.__anext__()
            gone_b = await b.__anext__()
            assert isinstance(gone_a, Delete)
            assert gone_a == gone_b
            assert trio.current_time() == 5


async def test_a_slow_watcher_never_holds_up_writers() -> None:
    async with MemoryStore() as store, store.watch(DURABLE, "") as events:
        with trio.fail_after(1):
            for n in range(1000):
                await store.create(DURABLE, f"k{n}", b"v")
        assert await events.__anext__() == SnapshotDone()
        assert isinstance(await events.__anext__(), Put)


async def test_exact_and_prefix_watchers_of_one_key_each_get_their_events_in_order() -> None:
    specs = [("a.b", True), ("a.b", True), ("a.b", False), ("a", False), ("", False)]
    specs += [("a.b2", True), ("z", False)]
    async with MemoryStore() as store, AsyncExitStack() as stack:
        watches = [
            await stack.enter_async_context(store.watch(DURABLE, prefix, exact=exact))
            for prefix, exact in specs
        ]
        for events in watches:
            assert await events.__anext__() == SnapshotDone()
        written: list[WatchEvent] = []
        for key in ("a.b2", "a.b", "a.b.c"):
            won = await store.create(DURABLE, key, b"v")
            assert isinstance(won, Won)
            written.append(Put(Entry(key, b"v", won.revision)))
        gone = await store.delete(DURABLE, "a.b")
        assert isinstance(gone, Won)
        everything = [*written, Delete("a.b", gone.revision)]
        expected: list[list[WatchEvent]] = [
            [written[1], everything[-1]],
            [written[1], everything[-1]],
            everything,
            everything,
            everything,
            [written[0]],
            [],
        ]
        for spec, events, wanted in zip(specs, watches, expected, strict=True):
            got = []
            while True:
                with trio.move_on_after(0.01):
                    got.append(await events.__anext__())
                    continue
                break
            assert got == wanted, spec


async def test_closed_watches_leave_nothing_for_writes_to_visit() -> None:
    async with MemoryStore() as store:
        async with AsyncExitStack() as stack:
            for n in range(50):
                for prefix, exact in [(f"k{n}", True), ("k", False), (f"k{n}", False), ("", False)]:
                    await stack.enter_async_context(store.watch(DURABLE, prefix, exact=exact))
        watchers = store.server._table("", DURABLE).watchers
        assert (watchers.exact, watchers.prefixes, watchers.lengths) == ({}, {}, ())


async def test_process_shared_store_must_be_entered_before_use() -> None:
    store = MemoryStore.process_shared(namespace="not-entered")
    with pytest.raises(StoreError, match="not open"):
        await store.get(DURABLE, "k")


async def test_process_shared_stores_share_data_until_the_last_one_closes() -> None:
    async with MemoryStore.process_shared(namespace="job", ephemeral_ttl=5) as one:
        async with MemoryStore.process_shared(namespace="job", ephemeral_ttl=5) as two:
            assert isinstance(await one.create(DURABLE, "k", b"v"), Won)
            assert await two.get(DURABLE, "k") is not None
            with pytest.raises(StoreError, match="already uses an ephemeral TTL of 5"):
                async with MemoryStore.process_shared(namespace="job", ephemeral_ttl=6):
                    pass
        assert await one.get(DURABLE, "k") is not None
    async with MemoryStore.process_shared(namespace="job", ephemeral_ttl=6) as fresh:
        assert await fresh.get(DURABLE, "k") is None
