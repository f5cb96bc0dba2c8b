"""The NATS store against real servers: auth, TLS, failures, restarts, consumers, limits."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from spate import StoreError, StoreUnavailable, ValueTooLarge
from spate.store import Delete, Entry, Keyspace, Put, SnapshotDone, WatchEvent, Won, WriteResult
from spate_stores import open_store
from spate_stores.nats import NatsStore
from spate_stores.nats._watch import KeyWatch
from spate_testing.servers._ports import free_port
from spate_testing.servers.nats import NatsServer, nats_server

pytestmark = pytest.mark.nats

DURABLE = Keyspace.DURABLE
EPHEMERAL = Keyspace.EPHEMERAL


def rev(result: WriteResult) -> int:
    assert isinstance(result, Won), f"expected a won write, got {result!r}"
    return result.revision


async def next_event(events: object, within: float = 10.0) -> WatchEvent:
    assert isinstance(events, KeyWatch)
    with trio.fail_after(within):
        return await events.__anext__()


async def test_unreachable_server_is_unavailable_and_named() -> None:
    port = free_port()
    with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{port}"):
        async with open_store(f"nats://127.0.0.1:{port}?timeout=2"):
            pass


async def test_wrong_password_is_a_clear_store_error() -> None:
    async with nats_server(user="spate", password="right", websocket=False) as server:
        good = server.store_url("auth")
        async with open_store(good) as store:
            assert await store.create(DURABLE, "k", b"v")
        bad = good.replace(":right@", ":wrong@")
        with pytest.raises(StoreError, match="refused the credentials") as info:
            async with open_store(bad):
                pass
        assert "wrong" not in str(info.value), "the error message leaked the password"
        assert not isinstance(info.value, StoreUnavailable)


async def test_token_auth() -> None:
    async with nats_server(token="s3cret", websocket=False) as server:
        async with open_store(server.store_url("token")) as store:
            assert await store.get(DURABLE, "missing") is None
        with pytest.raises(StoreError, match="refused the credentials"):
            async with open_store(f"nats://nope@127.0.0.1:{server.port}"):
                pass


async def test_tls_with_the_servers_ca() -> None:
    async with nats_server(tls=True, websocket=False) as server:
        url = server.store_url("tls")
        assert url.startswith("tls://")
        async with open_store(url) as store:
            won = rev(await store.create(DURABLE, "k", b"over tls"))
            assert await store.get(DURABLE, "k") == Entry("k", b"over tls", won)
        with pytest.raises(StoreError, match="did not verify"):
            async with open_store(f"tls://127.0.0.1:{server.port}?namespace=tls"):
                pass


async def test_nats_url_upgrades_to_tls_when_the_server_requires_it() -> None:
    async with nats_server(tls=True, websocket=False) as server:
        url = f"nats://127.0.0.1:{server.port}?namespace=x&ca={server.ca_file}"
        async with open_store(url) as store:
            assert await store.get(DURABLE, "k") is None


async def test_wrong_port_kind_is_a_clear_error(spate_nats_server: NatsServer) -> None:
    # The WebSocket listener does not speak the TCP protocol: the handshake fails clearly.
    url = f"nats://127.0.0.1:{spate_nats_server.ws_port}?timeout=2"
    with pytest.raises((StoreError, StoreUnavailable)):
        async with open_store(url):
            pass


async def test_value_over_max_payload_is_refused_before_sending(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace)) as store:
        assert isinstance(store, NatsStore)
        max_payload = store.connection.max_payload
        assert store.capabilities.max_value_size < max_payload
        with pytest.raises(ValueTooLarge, match="over this store's limit"):
            await store.create(DURABLE, "big", b"x" * (max_payload + 1))
        # The connection survived (the server would have closed it on a payload violation).
        assert await store.create(DURABLE, "small", b"x")


async def test_capabilities_follow_the_server_version(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace, ttl=5)) as store:
        assert store.capabilities.system == "nats"
        assert store.capabilities.expiry_reaches_watchers is (spate_nats_server.version >= (2, 11))
        assert store.ephemeral_ttl == 5.0


async def test_legacy_server_declares_silent_expiry(
    legacy_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(legacy_nats_server.store_url(namespace, ttl=5)) as store:
        assert store.capabilities.expiry_reaches_watchers is False


async def test_ttl_mismatch_names_the_existing_ttl(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace, ttl=3)):
        pass
    with pytest.raises(StoreError, match="ttl=3"):
        async with open_store(spate_nats_server.store_url(namespace, ttl=4)):
            pass


async def test_buckets_are_named_for_the_namespace(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace)) as store:
        assert isinstance(store, NatsStore)
        assert store.bucket(DURABLE).name == f"spate_durable_{namespace}"
        assert store.bucket(EPHEMERAL).stream == f"KV_spate_ephemeral_{namespace}"


async def test_keys_with_empty_tokens_work(spate_nats_server: NatsServer, namespace: str) -> None:
    async with open_store(spate_nats_server.store_url(namespace)) as store:
        keys = [".lead", "trail.", "two..dots", "."]
        for key in keys:
            assert await store.create(DURABLE, key, key.encode())
        assert [e.key for e in await store.list(DURABLE, "")] == sorted(keys)
        assert [e.key for e in await store.list(DURABLE, ".")] == sorted([".", ".lead"])


async def test_watch_survives_a_server_restart(namespace: str) -> None:
    async with (
        nats_server(websocket=False) as server,
        NatsStore.from_url(server.store_url(namespace), heartbeat=0.5) as store,
    ):
        won = rev(await store.create(DURABLE, "a", b"1"))
        async with store.watch(DURABLE, "") as events:
            assert await next_event(events) == Put(Entry("a", b"1", won))
            assert await next_event(events) == SnapshotDone()
            await server.arestart()
            # The first write after the restart waits for the reconnection, then lands.
            moved = rev(await store.update(DURABLE, "a", b"2", won))
            assert await next_event(events) == Put(Entry("a", b"2", moved))
            deleted = rev(await store.delete(DURABLE, "a"))
            assert await next_event(events) == Delete("a", deleted)
            assert isinstance(events, KeyWatch)
            assert events.resets >= 1
        assert store.connection.reconnects >= 1


async def test_request_in_flight_when_the_server_dies_is_unavailable(namespace: str) -> None:
    async with (
        nats_server(websocket=False) as server,
        open_store(server.store_url(namespace, ttl=5) + "&timeout=1") as store,
    ):
        await store.create(DURABLE, "k", b"v")
        server.pause()
        try:
            with pytest.raises(StoreUnavailable, match="may or may not"):
                await store.create(DURABLE, "k2", b"v")
        finally:
            server.resume()
        # The connection is still usable afterwards (the late reply is dropped).
        with trio.fail_after(10):
            assert await store.get(DURABLE, "k") is not None


async def test_ephemeral_watch_cut_off_for_too_long_raises(namespace: str) -> None:
    async with nats_server(websocket=False) as server:
        url = server.store_url(namespace, ttl=2) + "&timeout=1"
        async with (
            NatsStore.from_url(url, heartbeat=0.25) as store,
            store.watch(EPHEMERAL, "") as events,
        ):
            assert await next_event(events) == SnapshotDone()
            server.pause()
            try:
                # Expired entries' markers may age out while it is cut off, so the watch
                # must not resume silently: it raises and the caller re-watches.
                with pytest.raises(StoreUnavailable, match="watch again"):
                    await next_event(events, within=20)
            finally:
                server.resume()
            with pytest.raises(StoreUnavailable):
                await next_event(events)


async def test_consumer_deleted_server_side_is_noticed_by_missed_heartbeats(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    url = spate_nats_server.store_url(namespace)
    async with (
        NatsStore.from_url(url, heartbeat=0.3) as store,
        store.watch(DURABLE, "job.") as events,
    ):
        assert isinstance(events, KeyWatch)
        assert await next_event(events) == SnapshotDone()
        consumer = events.consumer_name
        bucket = store.bucket(DURABLE)
        await store._jetstream().api(f"CONSUMER.DELETE.{bucket.stream}.{consumer}")
        won = rev(await store.create(DURABLE, "job.1", b"after"))
        assert await next_event(events) == Put(Entry("job.1", b"after", won))
        assert events.resets == 1
        assert events.consumer_name != consumer


async def test_an_exact_watch_is_sent_only_its_key(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    # A prefix ending inside a token is filtered here, after the server sent every message
    # under its last whole token: a follower's watch of job.plan would receive every commit.
    async with (
        open_store(spate_nats_server.store_url(namespace)) as store,
        store.watch(DURABLE, "job.plan", exact=True) as exact,
        store.watch(DURABLE, "job.plan") as prefix,
    ):
        assert isinstance(store, NatsStore)
        for events in (exact, prefix):
            assert await next_event(events) == SnapshotDone()
        for n in range(20):
            await store.create(DURABLE, f"job.split.{n}", b"progress")
        won = rev(await store.create(DURABLE, "job.plan", b"plan"))
        delivered = []
        for events in (exact, prefix):
            assert await next_event(events) == Put(Entry("job.plan", b"plan", won))
            assert isinstance(events, KeyWatch)
            stream = store.bucket(DURABLE).stream
            info = await store._jetstream().api(f"CONSUMER.INFO.{stream}.{events.consumer_name}")
            delivered.append(info["delivered"]["consumer_seq"])
        assert delivered == [1, 21]


async def test_large_snapshot_goes_through_flow_control(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace)) as store:
        value = bytes(range(256)) * 1024  # 256 KiB
        async with trio.open_nursery() as nursery:
            for n in range(48):
                nursery.start_soon(store.create, DURABLE, f"big.{n:03d}", value)
        listed = await store.list(DURABLE, "big.")
        assert [e.key for e in listed] == [f"big.{n:03d}" for n in range(48)]
        assert all(e.value == value for e in listed)
        async with store.watch(DURABLE, "big.") as events:
            for _ in range(48):
                assert isinstance(await next_event(events), Put)
            assert await next_event(events) == SnapshotDone()
            assert isinstance(events, KeyWatch)
            assert events.flow_control_replies >= 1


async def test_closed_store_refuses_calls_and_ends_watches(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    store = NatsStore.from_url(spate_nats_server.store_url(namespace))
    with pytest.raises(StoreError, match="not open"):
        await store.get(DURABLE, "k")
    async with store, store.watch(DURABLE, "") as events:
        assert await next_event(events) == SnapshotDone()
        await store.aclose()
        with pytest.raises(StoreUnavailable, match="closed"):
            await next_event(events)
    with pytest.raises(StoreError, match="closed"):
        await store.get(DURABLE, "k")


async def test_websocket_transport(spate_nats_server: NatsServer, namespace: str) -> None:
    async with (
        open_store(spate_nats_server.store_url(namespace, transport="ws")) as ws,
        open_store(spate_nats_server.store_url(namespace)) as tcp,
    ):
        won = rev(await ws.create(DURABLE, "k", b"via websocket"))
        assert await tcp.get(DURABLE, "k") == Entry("k", b"via websocket", won)


async def test_bucket_made_by_2_9_gets_expiry_markers_on_a_newer_server(
    legacy_nats_server: NatsServer, namespace: str, tmp_path: Path
) -> None:
    old = NatsServer(binary=legacy_nats_server.binary, websocket=False, directory=tmp_path)
    await trio.to_thread.run_sync(old.start)
    try:
        async with open_store(old.store_url(namespace, ttl=3)) as store:
            assert store.capabilities.expiry_reaches_watchers is False
            won = rev(await store.create(DURABLE, "kept", b"across the upgrade"))
    finally:
        await trio.to_thread.run_sync(old.stop)
    new = NatsServer(websocket=False, directory=tmp_path)
    if new.version < (2, 11):
        pytest.skip("the default nats-server is older than 2.11 too")
    await trio.to_thread.run_sync(new.start)
    try:
        async with open_store(new.store_url(namespace, ttl=3)) as store:
            assert store.capabilities.expiry_reaches_watchers is True
            assert await store.get(DURABLE, "kept") == Entry("kept", b"across the upgrade", won)
    finally:
        await trio.to_thread.run_sync(new.stop)


# -- paged listings ---------------------------------------------------------------------------


async def consumer_names(store: NatsStore, keyspace: Keyspace) -> list[str]:
    stream = store.bucket(keyspace).stream
    reply = await store._jetstream().api(f"CONSUMER.NAMES.{stream}")
    return list(reply.get("consumers") or [])


async def wait_for_no_consumers(store: NatsStore, keyspace: Keyspace) -> None:
    # The delete is sent without waiting for its reply (so leaving never blocks on the
    # server): poll the server until it has applied it.
    for _ in range(100):
        left = await consumer_names(store, keyspace)
        if not left:
            return
        await trio.sleep(0.05)
    raise AssertionError(f"consumers left behind by a listing: {left}")


async def test_a_paged_listing_left_early_deletes_its_consumer(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace)) as store:
        assert isinstance(store, NatsStore)
        for n in range(6):
            await store.create(DURABLE, f"job.{n}", b"v")
        assert await consumer_names(store, DURABLE) == []
        async with store.list_pages(DURABLE, "job.", page_size=2) as pages:
            async for page in pages:
                assert len(page) == 2
                assert len(await consumer_names(store, DURABLE)) == 1
                break
        await wait_for_no_consumers(store, DURABLE)
        # Entered but never iterated: no consumer was ever made.
        async with store.list_pages(DURABLE, "job.", page_size=2):
            assert await consumer_names(store, DURABLE) == []
        # Read to the end: the consumer goes too.
        async with store.list_pages(DURABLE, "job.", page_size=4) as pages:
            assert [len(page) async for page in pages] == [4, 2]
        await wait_for_no_consumers(store, DURABLE)


async def test_a_paged_listing_goes_through_flow_control_a_page_at_a_time(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace)) as store:
        assert isinstance(store, NatsStore)
        value = bytes(range(256)) * 1024  # 256 KiB
        async with trio.open_nursery() as nursery:
            for n in range(48):
                nursery.start_soon(store.create, DURABLE, f"big.{n:03d}", value)
        watch = store._key_watch(store.bucket(DURABLE), DURABLE, "big.", page_size=5)
        try:
            await watch.start()
            keys = []
            while (page := await watch.next_page()) is not None:
                assert 1 <= len(page) <= 5
                assert all(entry.value == value for entry in page)
                keys += [entry.key for entry in page]
            assert sorted(keys) == [f"big.{n:03d}" for n in range(48)]
            assert len(keys) == 48
            assert watch.flow_control_replies >= 1
        finally:
            await watch.aclose()


async def test_a_paged_listing_recreated_mid_way_hands_out_no_stale_or_deleted_key(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    # The bucket keeps a few messages of each key; a consumer resumed from a stream sequence
    # would replay them (j's first revision, d before its delete), and a page handed out
    # cannot be taken back. A paged listing's new consumer starts over instead, skipping
    # what it has seen.
    async with open_store(spate_nats_server.store_url(namespace)) as store:
        assert isinstance(store, NatsStore)
        a = rev(await store.create(DURABLE, "a", b"a"))
        j = rev(await store.create(DURABLE, "j", b"j1"))
        d = rev(await store.create(DURABLE, "d", b"d"))
        j = rev(await store.update(DURABLE, "j", b"j2", j))
        rev(await store.delete(DURABLE, "d", d))
        watch = store._key_watch(store.bucket(DURABLE), DURABLE, "", page_size=1)
        try:
            await watch.start()
            assert await watch.next_page() == [Entry("a", b"a", a)]
            first = watch.consumer_name
            await watch._reset("a test forces a new consumer")
            assert watch.consumer_name != first
            rest = []
            while (page := await watch.next_page()) is not None:
                rest.append(page)
            assert rest == [[Entry("j", b"j2", j)]]
            assert watch.resets == 1
        finally:
            await watch.aclose()


async def test_a_paged_listing_held_while_the_server_is_stalled_loses_nothing(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    # While the caller holds a page the client reads nothing, so flow control stalls the
    # server, which keeps sending heartbeats (marked stalled). Those do not mean the
    # consumer is idle: the listing must not end at one.
    url = spate_nats_server.store_url(namespace)
    async with NatsStore.from_url(url, heartbeat=0.25) as store:
        value = bytes(range(256)) * 1024  # 256 KiB
        async with trio.open_nursery() as nursery:
            for n in range(64):
                nursery.start_soon(store.create, DURABLE, f"big.{n:03d}", value)
        keys = []
        async with store.list_pages(DURABLE, "big.", page_size=2) as pages:
            async for page in pages:
                keys += [entry.key for entry in page]
                if len(keys) == 2:
                    # Hold the first page for several heartbeat intervals.
                    await trio.sleep(2.0)
        assert sorted(keys) == [f"big.{n:03d}" for n in range(64)]
