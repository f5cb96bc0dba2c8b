"""Deploys on real etcd: every leave is graceful, whatever scope the cancel came through."""

from __future__ import annotations

import pytest

from spate_testing.servers.etcd import EtcdServer
from tests.worker import deploy_checks
from tests.worker.leave_checks import TTL, cancelled_around_the_store_hands_back

pytestmark = pytest.mark.etcd


async def test_a_worker_cancelled_around_its_own_store_hands_back_on_etcd(
    etcd_session_server: EtcdServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = etcd_session_server.store_url(namespace, ttl=TTL)
    taken = await cancelled_around_the_store_hands_back(url, caplog)
    print(f"etcd: every split committed elsewhere {taken:.2f} s after the cancel")


async def test_spate_worker_sent_sigterm_hands_back_and_a_rolling_restart_idles_no_split_on_etcd(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    url = etcd_session_server.store_url(namespace, ttl=deploy_checks.TTL)
    handed, gaps = await deploy_checks.rolling_restart(url, replacements=3)
    print(f"etcd: hand-back after SIGTERM {[round(t, 2) for t in handed]} s")
    print(f"etcd: longest gap per split { ({s: round(g, 2) for s, g in sorted(gaps.items())}) }")
    assert max(handed) < deploy_checks.TTL / 2, handed
    assert max(gaps.values()) < deploy_checks.TTL / 2, gaps
