"""A read-only memory client reads, adopts the namespace's TTL, binds nothing, writes nothing."""

from __future__ import annotations

import pytest

from spate import StoreError
from spate.store import Create, Keyspace
from spate_stores import open_store
from spate_stores.memory import MemoryServer, MemoryStore

DURABLE = Keyspace.DURABLE
EPHEMERAL = Keyspace.EPHEMERAL


async def test_a_read_only_client_reads_a_namespace_made_with_any_ttl() -> None:
    server = MemoryServer()
    async with MemoryStore(server=server, namespace="ns", ephemeral_ttl=15) as writer:
        await writer.create(DURABLE, "j.plan", b"p")
        reader = MemoryStore(server=server, namespace="ns", ephemeral_ttl=3, read_only=True)
        async with reader:
            assert reader.read_only
            assert reader.ephemeral_ttl == 15  # adopted, not refused
            assert [e.key for e in await reader.list(DURABLE, "")] == ["j.plan"]
            assert await reader.get(DURABLE, "j.plan") is not None


async def test_a_read_only_client_refuses_every_write_and_changes_nothing() -> None:
    server = MemoryServer()
    async with MemoryStore(server=server, namespace="ns") as writer:
        await writer.create(DURABLE, "j.plan", b"p")
    reader = MemoryStore(server=server, namespace="ns", read_only=True)
    entry = await reader.get(DURABLE, "j.plan")
    assert entry is not None
    refusals = [
        reader.create(DURABLE, "k", b"v"),
        reader.update(DURABLE, "j.plan", b"v", entry.revision),
        reader.delete(DURABLE, "j.plan"),
        reader.write_many([Create("k", b"v")]),
    ]
    for call in refusals:
        with pytest.raises(StoreError, match="opened read-only"):
            await call
    with pytest.raises(StoreError, match="opened read-only"):
        async with reader.session():
            pass
    assert await reader.get(DURABLE, "j.plan") == entry


async def test_reading_a_namespace_nobody_wrote_finds_nothing_and_binds_no_ttl() -> None:
    server = MemoryServer()
    reader = MemoryStore(server=server, namespace="fresh", ephemeral_ttl=3, read_only=True)
    assert await reader.list(EPHEMERAL, "") == []
    assert await reader.get(DURABLE, "j.plan") is None
    async with reader.list_pages(DURABLE, "", page_size=10) as pages:
        assert [page async for page in pages] == []
    # Nothing was bound: a writer may still make the namespace with another TTL.
    MemoryStore(server=server, namespace="fresh", ephemeral_ttl=20)


async def test_open_store_read_only_adopts_the_ttl_of_the_shared_namespace() -> None:
    async with open_store("memory://shared-ns?ttl=15") as writer:
        await writer.create(DURABLE, "j.plan", b"p")
        async with open_store("memory://shared-ns?ttl=3", read_only=True) as reader:
            assert reader.ephemeral_ttl == 15
            assert [e.key for e in await reader.list(DURABLE, "")] == ["j.plan"]
        with pytest.raises(StoreError, match=r"ttl=15 \(or with no ttl"):
            async with open_store("memory://shared-ns?ttl=3"):
                pass


async def test_a_memory_url_without_ttl_adopts_the_namespaces_as_etcd_and_nats_do() -> None:
    async with open_store("memory://adopting?ttl=15"), open_store("memory://adopting") as other:
        assert other.ephemeral_ttl == 15
