"""Deploys on real NATS: every leave is graceful, whatever scope the cancel came through."""

from __future__ import annotations

import pytest

from spate_testing.servers.nats import NatsServer
from tests.worker.leave_checks import TTL, cancelled_around_the_store_hands_back

pytestmark = pytest.mark.nats


async def test_a_worker_cancelled_around_its_own_store_hands_back_on_nats(
    spate_nats_server: NatsServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = spate_nats_server.store_url(namespace, ttl=TTL)
    taken = await cancelled_around_the_store_hands_back(url, caplog)
    print(f"nats: every split committed elsewhere {taken:.2f} s after the cancel")
