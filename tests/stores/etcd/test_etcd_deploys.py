"""Deploys on real etcd: every leave is graceful, whatever scope the cancel came through."""

from __future__ import annotations

import pytest

from spate_testing.servers.etcd import EtcdServer
from tests.worker.leave_checks import TTL, cancelled_around_the_store_hands_back

pytestmark = pytest.mark.etcd


async def test_a_worker_cancelled_around_its_own_store_hands_back_on_etcd(
    etcd_session_server: EtcdServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = etcd_session_server.store_url(namespace, ttl=TTL)
    taken = await cancelled_around_the_store_hands_back(url, caplog)
    print(f"etcd: every split committed elsewhere {taken:.2f} s after the cancel")
