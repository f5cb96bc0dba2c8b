"""Deploys on real NATS: every leave is graceful, whatever scope the cancel came through."""

from __future__ import annotations

import pytest

from spate_testing.servers.nats import NatsServer
from tests.worker import deploy_checks
from tests.worker.leave_checks import TTL, cancelled_around_the_store_hands_back

pytestmark = pytest.mark.nats


async def test_a_worker_cancelled_around_its_own_store_hands_back_on_nats(
    spate_nats_server: NatsServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = spate_nats_server.store_url(namespace, ttl=TTL)
    taken = await cancelled_around_the_store_hands_back(url, caplog)
    print(f"nats: every split committed elsewhere {taken:.2f} s after the cancel")


async def test_spate_worker_sent_sigterm_hands_back_and_a_rolling_restart_idles_no_split_on_nats(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    url = spate_nats_server.store_url(namespace, ttl=deploy_checks.TTL)
    handed, gaps = await deploy_checks.rolling_restart(url, replacements=3)
    print(f"nats: hand-back after SIGTERM {[round(t, 2) for t in handed]} s")
    print(f"nats: longest gap per split { ({s: round(g, 2) for s, g in sorted(gaps.items())}) }")
    assert max(handed) < deploy_checks.TTL / 2, handed
    assert max(gaps.values()) < deploy_checks.TTL / 2, gaps
