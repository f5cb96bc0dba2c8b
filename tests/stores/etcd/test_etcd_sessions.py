"""Sessions on a real etcd: a dead coordinator's keys go with it, and a partition is survived."""

from __future__ import annotations

import pytest

from spate_testing.servers.etcd import EtcdServer
from tests.worker.session_scenarios import (
    fatal_error_while_the_application_lives_on,
    partition_of_one_worker,
)

pytestmark = pytest.mark.etcd

TTL = 3


async def test_a_fatal_error_inside_a_living_application_does_not_strand_the_job(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    await fatal_error_while_the_application_lives_on(
        etcd_session_server.store_url(namespace, ttl=TTL)
    )


async def test_a_worker_cut_off_by_a_partition_stops_and_the_fleet_finishes(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    report = await partition_of_one_worker(
        etcd_session_server.store_url(namespace, ttl=TTL),
        "127.0.0.1",
        etcd_session_server.client_port,
        cut_url_params="&timeout=1",
    )
    print(report)
