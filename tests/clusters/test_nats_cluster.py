"""A 3-server NATS cluster with R3 buckets: the client learns the cluster, reconnects to
another server, its watches carry on, and commits survive a killed stream leader."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator

import pytest
import trio

from spate import StoreUnavailable
from spate.store import Entry, Keyspace, Put, SnapshotDone, Store, WatchEvent
from spate_stores import open_store
from spate_stores.nats import NatsStore
from spate_stores.nats._keys import bucket_name
from spate_testing.servers.clusters import nats_cluster
from spate_testing.sim._cluster_fleet import lost, run_fleet

pytestmark = [pytest.mark.nats, pytest.mark.cluster]

DURABLE = Keyspace.DURABLE


async def test_client_learns_the_cluster_and_reconnects_elsewhere() -> None:
    async with nats_cluster() as cluster:
        ns = f"fo{secrets.token_hex(3)}"
        first = cluster.servers[0]
        # Name one server only: the rest come from the cluster's INFO connect_urls. A request
        # timeout past JetStream's 4-9 s elections: the watch's consumer is re-created on
        # another server once the killed one's groups have new leaders.
        url = f"nats://127.0.0.1:{first.port}/{ns}?replicas=3&ttl=5&timeout=12"
        async with contextlib.AsyncExitStack() as stack:
            store = await _opened(stack, url)
            assert isinstance(store, NatsStore)
            conn = store.connection
            # The handshake's INFO may predate a route; later INFO updates complete the list.
            for _ in range(200):  # up to 10 s
                if len(conn.pool.servers) >= len(cluster.servers):
                    break
                await trio.sleep(0.05)
            assert {p for _, p in conn.pool.servers} == {s.port for s in cluster.servers}
            await store.create(DURABLE, "k", b"1")
            async with store.watch(DURABLE, "") as events:
                assert isinstance(await events.__anext__(), Put)
                assert isinstance(await events.__anext__(), SnapshotDone)
                await trio.to_thread.run_sync(lambda: cluster.stop_member_sync(first, kill=True))
                with trio.fail_after(30):
                    while True:
                        try:
                            await store.create(DURABLE, "k2", b"2")
                            break
                        except StoreUnavailable:
                            await trio.sleep(0.2)
                assert conn.server[1] != first.port
                # The watch's consumer is re-created on the cluster and the write arrives; or,
                # while the killed server's JetStream groups are still electing, re-creating it
                # gets no answer and the watch breaks, as the contract allows (the caller
                # watches again, as spate's watch pumps do).
                try:
                    with trio.fail_after(30):
                        event = await events.__anext__()
                except StoreUnavailable:
                    event = None
            if event is None:
                with trio.fail_after(30):
                    while event is None:
                        try:
                            async with store.watch(DURABLE, "") as events:
                                keys = [e.entry.key async for e in _snapshot(events)]
                        except StoreUnavailable:
                            await trio.sleep(0.5)
                            continue
                        assert keys == ["k", "k2"]
                        event = Put(Entry("k2", b"2", 0))
            assert isinstance(event, Put)
            assert event.entry.key == "k2"
            await cluster.restart(first)


async def _opened(stack: contextlib.AsyncExitStack, url: str) -> Store:
    """The store, opened; tried again if creating its R3 buckets got no answer.

    A cluster just formed may move its JetStream meta leadership once more right after the
    first election, and a stream create made meanwhile can go unanswered for longer than the
    request timeout (seen once in about a dozen runs on a busy 2-core machine). That is not
    what this test is about, and the store says so plainly (StoreUnavailable).
    """
    for attempt in range(3):
        try:
            return await stack.enter_async_context(open_store(url))
        except StoreUnavailable:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _snapshot(events: AsyncIterator[WatchEvent]) -> AsyncIterator[Put]:
    """The Puts of a watch's snapshot, up to its SnapshotDone."""
    async for event in events:
        if isinstance(event, SnapshotDone):
            return
        assert isinstance(event, Put)
        yield event


async def test_commits_survive_a_killed_stream_leader() -> None:
    async with nats_cluster() as cluster:
        ns = f"fleet{secrets.token_hex(3)}"
        # JetStream elects a new stream leader 4-9 s after the old one dies, so with a lease
        # this short leases lapse during the election (splits are lost and re-claimed) and
        # writes fail fast or race on the leader key right after it: the workers must ride
        # all of that out (a clustered "wrong last sequence" once stopped one, at ttl=8).
        url = cluster.store_url(ns, ttl=8)
        stream = "KV_" + bucket_name(ns, DURABLE)

        async def chaos() -> None:
            killed = await cluster.kill("leader", stream=stream)
            await trio.sleep(3)
            await cluster.restart(killed)

        record, stored = await run_fleet(url, workers=2, splits=6, seconds=6, chaos=chaos)
        # ?replicas=3 made R3 buckets (what lets the bucket outlive its leader).
        assert await trio.to_thread.run_sync(cluster.stream_replicas, stream) == 3
    print(
        f"NATS cluster: {len(record.acked)} acknowledged, {record.failed} outcome-unknown, "
        f"{record.reopened} store opens retried"
    )
    assert len(record.acked) > 50
    assert lost(record, stored) == []
    assert record.duplicates() == 0
