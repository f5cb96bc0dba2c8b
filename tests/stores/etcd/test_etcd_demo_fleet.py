"""The demo fleet and the operator commands on real etcd."""

from __future__ import annotations

import pytest

from spate_testing.servers.etcd import EtcdServer
from tests.worker.real_store_checks import (
    demo_fleet_checks_out,
    oversize_commit_fails_only_its_split,
    status_and_requeue_work,
)

pytestmark = pytest.mark.etcd


@pytest.mark.parametrize("chaos", [False, True], ids=["calm", "chaos"])
async def test_the_demo_fleet_checks_out_on_etcd(
    etcd_session_server: EtcdServer, namespace: str, chaos: bool
) -> None:
    await demo_fleet_checks_out(etcd_session_server.store_url(namespace), chaos=chaos)


def test_status_and_requeue_on_etcd(
    etcd_session_server: EtcdServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status_and_requeue_work(etcd_session_server.store_url(namespace), capsys)


async def test_an_oversize_commit_fails_only_its_split_on_etcd(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    await oversize_commit_fails_only_its_split(etcd_session_server.store_url(namespace))
