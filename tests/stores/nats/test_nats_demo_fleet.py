"""The demo fleet and the operator commands on real NATS JetStream KV."""

from __future__ import annotations

import pytest

from spate_testing.servers.nats import NatsServer
from tests.worker.real_store_checks import (
    demo_fleet_checks_out,
    oversize_commit_fails_only_its_split,
    status_and_requeue_work,
)

pytestmark = pytest.mark.nats


@pytest.mark.parametrize("chaos", [False, True], ids=["calm", "chaos"])
async def test_the_demo_fleet_checks_out_on_nats(
    spate_nats_server: NatsServer, namespace: str, chaos: bool
) -> None:
    await demo_fleet_checks_out(spate_nats_server.store_url(namespace), chaos=chaos)


def test_status_and_requeue_on_nats(
    spate_nats_server: NatsServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status_and_requeue_work(spate_nats_server.store_url(namespace), capsys)


async def test_an_oversize_commit_fails_only_its_split_on_nats(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    await oversize_commit_fails_only_its_split(spate_nats_server.store_url(namespace))
