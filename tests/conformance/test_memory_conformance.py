"""The store conformance suite on MemoryStore, in virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio
import trio.testing

from spate.store import Store
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.conformance import StoreConformance, StoreFactory

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
    def spate_clock(self) -> trio.abc.Clock:
        return trio.testing.MockClock(autojump_threshold=0)
