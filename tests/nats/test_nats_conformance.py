"""The store conformance suite on real nats-servers: 2.11+ over TCP and WebSocket, and 2.9."""

from __future__ import annotations

import secrets

import pytest

from spate_stores.nats import NatsStore
from spate_testing.conformance import StoreConformance, StoreFactory
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


class TestNatsConformance(StoreConformance):
    """The pip server (2.11+) over TCP: expiry reaches watchers."""

    @pytest.fixture
    def store_factory(self, spate_nats_server: NatsServer) -> StoreFactory:
        return factory(spate_nats_server, "tcp")

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
    def spate_clock(self) -> None:
        return None
