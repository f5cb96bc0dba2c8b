"""Sessions on a real nats-server: a dead coordinator's keys go with it; a partition is survived."""

from __future__ import annotations

import pytest

from spate_testing.servers.nats import NatsServer
from tests.runner.session_scenarios import (
    fatal_error_while_the_application_lives_on,
    partition_of_one_worker,
)

pytestmark = pytest.mark.nats

TTL = 3.0


async def test_a_fatal_error_inside_a_living_application_does_not_strand_the_job(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    await fatal_error_while_the_application_lives_on(
        spate_nats_server.store_url(namespace, ttl=TTL)
    )


async def test_a_worker_cut_off_by_a_partition_stops_and_the_fleet_finishes(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    report = await partition_of_one_worker(
        spate_nats_server.store_url(namespace, ttl=TTL), "127.0.0.1", spate_nats_server.port
    )
    print(report)
