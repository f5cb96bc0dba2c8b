"""Sessions on real nats-servers: a dead coordinator's keys go with it; a partition is survived.

Both run on the current server (expiry reaches watchers) and on one before 2.11 (silent expiry:
the reconcile listing is what finds the cut-off worker's expired leases), which the
``conformance-nats-legacy`` nox session installs from PyPI.
"""

from __future__ import annotations

import pytest

from spate_testing.servers.nats import NatsServer
from tests.worker.session_scenarios import (
    fatal_error_while_the_application_lives_on,
    partition_of_one_worker,
)

pytestmark = pytest.mark.nats

TTL = 3.0


@pytest.fixture(params=["current", "legacy"])
def server(request: pytest.FixtureRequest) -> NatsServer:
    """The pip server (2.11+), then a nats-server before 2.11 (skipped when none is found)."""
    name = "spate_nats_server" if request.param == "current" else "legacy_nats_server"
    found: NatsServer = request.getfixturevalue(name)
    return found


async def test_a_fatal_error_inside_a_living_application_does_not_strand_the_job(
    server: NatsServer, namespace: str
) -> None:
    await fatal_error_while_the_application_lives_on(server.store_url(namespace, ttl=TTL))


async def test_a_worker_cut_off_by_a_partition_stops_and_the_fleet_finishes(
    server: NatsServer, namespace: str
) -> None:
    report = await partition_of_one_worker(
        server.store_url(namespace, ttl=TTL), "127.0.0.1", server.port
    )
    print(report)
