"""Splitting a running split on real NATS JetStream KV."""

from __future__ import annotations

import pytest

from spate_testing.servers.nats import NatsServer
from tests.worker import split_checks

pytestmark = pytest.mark.nats


async def test_a_straggler_is_split_and_every_item_done_once_on_nats(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    await split_checks.a_straggler_is_split_and_every_item_done_once(
        spate_nats_server.store_url(namespace)
    )


async def test_a_stale_owner_s_split_is_fenced_on_nats(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    await split_checks.a_stale_owner_s_split_is_fenced_and_writes_nothing(
        spate_nats_server.store_url(namespace)
    )


async def test_a_successor_resumes_the_primary_and_the_residual_runs_on_nats(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    await split_checks.a_successor_resumes_the_primary_and_the_residual_runs(
        spate_nats_server.store_url(namespace)
    )
