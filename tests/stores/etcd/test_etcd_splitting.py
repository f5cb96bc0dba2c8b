"""Splitting a running split on real etcd."""

from __future__ import annotations

import pytest

from spate_testing.servers.etcd import EtcdServer
from tests.worker import split_checks

pytestmark = pytest.mark.etcd


async def test_a_straggler_is_split_and_every_item_done_once_on_etcd(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    await split_checks.a_straggler_is_split_and_every_item_done_once(
        etcd_session_server.store_url(namespace)
    )


async def test_a_stale_owner_s_split_is_fenced_on_etcd(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    await split_checks.a_stale_owner_s_split_is_fenced_and_writes_nothing(
        etcd_session_server.store_url(namespace)
    )


async def test_a_successor_resumes_the_primary_and_the_residual_runs_on_etcd(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    await split_checks.a_successor_resumes_the_primary_and_the_residual_runs(
        etcd_session_server.store_url(namespace)
    )
