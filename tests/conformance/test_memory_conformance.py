"""The store conformance suite on MemoryStore, in virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio
import trio.testing

from spate.store import Store
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.conformance import PartitionedStoreFactory, StoreConformance, StoreFactory
from spate_testing.faults import FaultyStore

TTL = 15.0
MAX_VALUE_SIZE = 64 * 1024


class TestMemoryStoreConformance(StoreConformance):
    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        server = MemoryServer()

        @asynccontextmanager
        async def client(namespace: str) -> AsyncIterator[Store]:
            async with MemoryStore(
                namespace=namespace,
                ephemeral_ttl=TTL,
                max_value_size=MAX_VALUE_SIZE,
                server=server,
            ) as store:
                yield store

        def factory(namespace: str) -> AbstractAsyncContextManager[Store]:
            return client(namespace)

        return factory

    @pytest.fixture
    def partitioned_store_factory(self, store_factory: StoreFactory) -> PartitionedStoreFactory:
        @asynccontextmanager
        async def client(namespace: str) -> AsyncIterator[tuple[Store, _Partition]]:
            async with store_factory(namespace) as inner:
                faulty = FaultyStore(inner)
                yield faulty, _Partition(faulty)

        return client

    @pytest.fixture
    def spate_clock(self) -> trio.abc.Clock:
        return trio.testing.MockClock(autojump_threshold=0)


class _Partition:
    """FaultyStore's partition switch as a conformance Link."""

    def __init__(self, store: FaultyStore) -> None:
        self.store = store

    def cut(self) -> None:
        self.store.partition()

    def heal(self) -> None:
        self.store.heal()
