"""A 3-member etcd cluster: failover of unary calls, watches and the session keepalive, and
commits across a killed raft leader (none lost, none twice)."""

from __future__ import annotations

import secrets

import pytest
import trio

from spate import StoreUnavailable
from spate._core.records import Keys, ProgressRecord, decode
from spate.store import Keyspace, Put, SnapshotDone
from spate_stores import open_store
from spate_stores.etcd import EtcdStore
from spate_stores.etcd._config import KeyLayout
from spate_stores.etcd._watch import open_watch_stream
from spate_stores.etcd._wire import EventKind, parse_watch_message, prefix_end
from spate_testing.servers.clusters import etcd_cluster
from spate_testing.sim._cluster_fleet import JOB, lost, run_fleet

pytestmark = [pytest.mark.etcd, pytest.mark.cluster]

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL


async def test_store_follows_the_cluster_when_its_member_dies() -> None:
    async with etcd_cluster() as cluster:
        ns = f"fo-{secrets.token_hex(3)}"
        async with open_store(cluster.store_url(ns, ttl=3, timeout="1")) as store:
            assert isinstance(store, EtcdStore)
            assert await store.create(EPHEMERAL, "presence", b"here")
            await store.create(DURABLE, "k", b"1")
            gateway = store._gateway
            async with store.watch(DURABLE, "") as events:
                assert isinstance(await events.__anext__(), Put)
                assert isinstance(await events.__anext__(), SnapshotDone)
                # Kill exactly the member this client (and its watch) talks to.
                used = next(m for m in cluster.members if m.endpoint == gateway.endpoint)
                await trio.to_thread.run_sync(lambda: cluster.stop_member_sync(used, kill=True))
                # Unary calls move on to a live member.
                with trio.fail_after(15):
                    while True:
                        try:
                            entry = await store.get(DURABLE, "k")
                            break
                        except StoreUnavailable:
                            await trio.sleep(0.1)
                assert entry is not None
                assert entry.value == b"1"
                assert gateway.endpoint != used.endpoint
                # The open watch resumed on a live member from its last revision: the next
                # write arrives on the same iterator, with no error and nothing replayed.
                await store.create(DURABLE, "k2", b"2")
                with trio.fail_after(15):
                    event = await events.__anext__()
                assert isinstance(event, Put)
                assert event.entry.key == "k2"
                assert events._source.resumes >= 1  # type: ignore[attr-defined]
            # The keepalive moved with the client: the ephemeral key outlives 2 TTLs.
            await trio.sleep(7)
            assert await store.get(EPHEMERAL, "presence") is not None
            assert store.lease_losses == 0
            await cluster.restart(used)


async def _split_history(url: str) -> dict[str, list[int]]:
    """Every stored watermark of every split record, in revision order (a replay from 1)."""
    history: dict[str, list[int]] = {}
    keys = Keys(JOB)
    async with open_store(url) as store:
        assert isinstance(store, EtcdStore)
        layout = KeyLayout(store.config.namespace)
        start = layout.key(DURABLE, keys.split_prefix)
        current = 0
        for entry in await store.list(DURABLE, keys.split_prefix):
            current = max(current, entry.revision)
        assert store._nursery is not None
        stream = open_watch_stream(store._gateway, store._nursery, start, prefix_end(start), 1)
        async with stream as source:
            seen = 0
            while seen < current:
                message = parse_watch_message(await source.receive())
                for event in message.events:
                    seen = max(seen, event.kv.mod_revision)
                    if event.kind is EventKind.DELETE:
                        continue
                    key = layout.store_key(DURABLE, event.kv.key)
                    split = key[len(keys.split_prefix) :]
                    progress = decode(ProgressRecord, key, event.kv.value, split=split)
                    history.setdefault(split, []).append(progress.watermark or 0)
    return history


async def test_commits_survive_a_killed_leader() -> None:
    async with etcd_cluster() as cluster:
        url = cluster.store_url(f"fleet-{secrets.token_hex(3)}", ttl=6, timeout="1")
        killed: list[object] = []

        async def chaos() -> None:
            killed.append(await cluster.kill("leader"))
            await trio.sleep(3)
            await cluster.restart(killed[0])  # type: ignore[arg-type]

        record, stored = await run_fleet(url, workers=2, splits=6, seconds=3, chaos=chaos)
        history = await _split_history(url)
    # etcd keeps every revision: no write of a split record, replayed in revision order, ever
    # took its watermark back (an old commit landing late, after a newer one, would).
    for split, watermarks in history.items():
        assert watermarks == sorted(watermarks), f"{split}: watermark went back in {watermarks}"
    assert sum(len(w) for w in history.values()) >= len(record.acked)
    print(f"etcd cluster: {len(record.acked)} acknowledged, {record.failed} outcome-unknown")
    assert len(record.acked) > 50  # commits flowed before and after the kill
    assert lost(record, stored) == []
    assert record.duplicates() == 0


async def test_a_paused_member_is_left_behind() -> None:
    async with etcd_cluster() as cluster:
        ns = f"pause-{secrets.token_hex(3)}"
        async with open_store(cluster.store_url(ns, ttl=4, timeout="1")) as store:
            assert isinstance(store, EtcdStore)
            await store.create(DURABLE, "k", b"1")
            # SIGSTOP the member the client uses: its sockets stay open but nothing answers,
            # so only the request timeout tells the client to move on.
            used = next(m for m in cluster.members if m.endpoint == store._gateway.endpoint)
            cluster.pause_sync(used)
            with trio.fail_after(15):
                while True:
                    try:
                        entry = await store.get(DURABLE, "k")
                        break
                    except StoreUnavailable:
                        await trio.sleep(0.1)
            assert entry is not None
            # It moved past the paused member (under load it may since have moved on again:
            # every member a slow call fails on is passed over in turn).
            assert store._gateway.endpoints.switches >= 1
            assert await store.create(EPHEMERAL, "alive", b"") is not None
            await trio.sleep(9)  # two TTLs: the keepalive left the paused member too
            assert await store.get(EPHEMERAL, "alive") is not None
            await cluster.restart(used)  # SIGCONT
            assert not used.paused
