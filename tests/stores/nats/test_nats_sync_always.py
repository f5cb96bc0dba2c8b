"""The store on a nats-server that syncs every write before acknowledging it.

``jetstream { sync_interval: always }`` is what docs/operations.md advises for production:
without it JetStream acknowledges a write before it reaches the disk, and a machine that loses
power can forget an acknowledged commit. Here part of the conformance suite (conditional
writes, values and listings, concurrent writers) runs against such a server, and acknowledged
writes survive the server being killed.
"""

from __future__ import annotations

import json
import secrets
import urllib.request
from collections.abc import Iterator

import pytest
import trio

from spate.store import Keyspace, Won
from spate_stores import open_store
from spate_stores.nats import NatsStore
from spate_testing.conformance import StoreFactory
from spate_testing.conformance._cas import CasConformance
from spate_testing.conformance._concurrency import ConcurrencyConformance
from spate_testing.conformance._data import DataConformance
from spate_testing.servers.nats import NatsServer

pytestmark = pytest.mark.nats

RUN = secrets.token_hex(3)


@pytest.fixture(scope="module")
def sync_always_server() -> Iterator[NatsServer]:
    """A nats-server with ``sync_interval: always`` and its monitoring port, for this module."""
    server = NatsServer(sync_always=True, monitoring=True)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


def test_the_server_syncs_every_write_before_acknowledging_it(
    sync_always_server: NatsServer,
) -> None:
    url = f"http://127.0.0.1:{sync_always_server.monitor_port}/varz"
    with urllib.request.urlopen(url, timeout=10) as reply:
        varz = json.load(reply)
    assert varz["jetstream"]["config"]["sync_always"] is True


class TestNatsConformanceSyncAlways(CasConformance, DataConformance, ConcurrencyConformance):
    """Conditional writes, values and listings, concurrent writers: each write synced first."""

    pytestmark = pytest.mark.trio

    @pytest.fixture
    def store_factory(self, sync_always_server: NatsServer) -> StoreFactory:
        def make(namespace: str) -> NatsStore:
            url = sync_always_server.store_url(f"sync-{RUN}-{namespace}", ttl=2)
            return NatsStore.from_url(url)

        return make

    @pytest.fixture
    def spate_clock(self) -> None:
        return None


async def test_acknowledged_commits_survive_the_server_being_killed(
    sync_always_server: NatsServer,
) -> None:
    url = sync_always_server.store_url(f"sync-{RUN}-killed", ttl=5)
    acknowledged: dict[str, int] = {}
    async with open_store(url) as store:
        for i in range(50):
            key = f"job.split.s{i:02d}"
            result = await store.create(Keyspace.DURABLE, key, b"%d" % i)
            assert isinstance(result, Won)
            update = await store.update(Keyspace.DURABLE, key, b"done", result.revision)
            assert isinstance(update, Won)
            acknowledged[key] = update.revision
    await sync_always_server.arestart(kill=True)
    with trio.fail_after(30):
        async with open_store(url) as store:
            kept = {e.key: e.revision for e in await store.list(Keyspace.DURABLE, "job.")}
    assert kept == acknowledged
