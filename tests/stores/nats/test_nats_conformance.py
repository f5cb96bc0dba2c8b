"""The store conformance suite on real nats-servers: 2.11+ over TCP and WebSocket, and 2.9."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from spate.store import Store
from spate_stores.nats import NatsStore
from spate_testing.blackhole import BlackholeProxy, open_blackhole
from spate_testing.conformance import PartitionedStoreFactory, StoreConformance, StoreFactory
from spate_testing.servers.nats import NatsServer

pytestmark = pytest.mark.nats

TTL = 2.0
"""Short enough that the expiry tests take seconds; JetStream's floor for markers is 1 s."""
RUN = secrets.token_hex(3)
"""Namespaces are per run, so repeated runs against one server never share buckets."""


def factory(server: NatsServer, transport: str) -> StoreFactory:
    def make(namespace: str) -> NatsStore:
        url = server.store_url(f"conformance-{RUN}-{namespace}", transport=transport, ttl=TTL)
        return NatsStore.from_url(url)

    return make


def partitioned(server: NatsServer) -> PartitionedStoreFactory:
    @asynccontextmanager
    async def make(namespace: str) -> AsyncIterator[tuple[Store, BlackholeProxy]]:
        url = server.store_url(f"conformance-{RUN}-{namespace}", ttl=TTL)
        async with (
            open_blackhole("127.0.0.1", server.port) as proxy,
            NatsStore.from_url(proxy.url_for(url)) as store,
        ):
            yield store, proxy

    return make


class TestNatsConformance(StoreConformance):
    """The pip server (2.11+) over TCP: expiry reaches watchers."""

    @pytest.fixture
    def store_factory(self, spate_nats_server: NatsServer) -> StoreFactory:
        return factory(spate_nats_server, "tcp")

    @pytest.fixture
    def partitioned_store_factory(self, spate_nats_server: NatsServer) -> PartitionedStoreFactory:
        return partitioned(spate_nats_server)

    @pytest.fixture
    def spate_clock(self) -> None:
        return None


class TestNatsWebSocketConformance(StoreConformance):
    """The same server over its WebSocket listener."""

    @pytest.fixture
    def store_factory(self, spate_nats_server: NatsServer) -> StoreFactory:
        return factory(spate_nats_server, "ws")

    @pytest.fixture
    def spate_clock(self) -> None:
        return None


class TestNatsLegacyConformance(StoreConformance):
    """A nats-server before 2.11 (Debian's 2.9) when installed: silent expiry, declared so."""

    @pytest.fixture
    def store_factory(self, legacy_nats_server: NatsServer) -> StoreFactory:
        return factory(legacy_nats_server, "tcp")

    @pytest.fixture
    def partitioned_store_factory(self, legacy_nats_server: NatsServer) -> PartitionedStoreFactory:
        return partitioned(legacy_nats_server)

    @pytest.fixture
    def spate_clock(self) -> None:
        return None
