"""The operator's checks on real etcd (bodies in tests/stores/operator_checks)."""

from __future__ import annotations

import pytest

from spate import StoreError
from spate.store import Keyspace
from spate_stores import open_store
from spate_stores.etcd import EtcdStore
from spate_stores.etcd._wire import header_revision, range_request
from spate_testing.servers.etcd import EtcdServer, etcd_server
from tests.stores.operator_checks import (
    delete_and_requeue_all_work,
    demo_beside_a_job_of_another_ttl,
    demo_twice_computes_each_result,
    status_reads_whatever_ttl_and_refuses_a_missing_job,
    ttl_mismatch_says_how_to_resolve_it,
)

pytestmark = pytest.mark.etcd


async def cluster_revision(server: EtcdServer) -> int:
    """etcd's revision now: every write anywhere in the cluster moves it."""
    async with open_store(server.store_url("probe"), read_only=True) as probe:
        assert isinstance(probe, EtcdStore)
        reply = await probe._gateway.call("/v3/kv/range", range_request(b"x"), doing="probing")
        return header_revision(reply)


async def test_the_demo_run_twice_on_one_namespace_computes_each_result_on_etcd(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    await demo_twice_computes_each_result(etcd_session_server.store_url(namespace))


async def test_a_ttl_mismatch_on_etcd_says_how_to_resolve_it(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    await ttl_mismatch_says_how_to_resolve_it(
        lambda ttl: etcd_session_server.store_url(namespace, ttl=ttl), "etcd"
    )


def test_status_on_etcd_writes_nothing_and_reads_whatever_ttl(
    etcd_session_server: EtcdServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[int] = []

    async def untouched() -> bool:
        seen.append(await cluster_revision(etcd_session_server))
        return len(seen) < 2 or seen[-1] == seen[-2]

    status_reads_whatever_ttl_and_refuses_a_missing_job(
        lambda ttl: etcd_session_server.store_url(namespace, ttl=ttl), untouched, capsys
    )


async def test_a_read_only_etcd_store_records_no_ttl_and_refuses_writes(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    before = await cluster_revision(etcd_session_server)
    url = etcd_session_server.store_url(namespace, ttl=7)
    async with open_store(url, read_only=True) as store:
        assert await store.list(Keyspace.DURABLE, "") == []
        with pytest.raises(StoreError, match="read-only"):
            await store.create(Keyspace.DURABLE, "k", b"v")
        with pytest.raises(StoreError, match="read-only"):
            async with store.session():
                pass
    assert await cluster_revision(etcd_session_server) == before
    # No TTL was recorded: the namespace is still free to take any.
    async with open_store(etcd_session_server.store_url(namespace, ttl=9)) as writer:
        assert writer.ephemeral_ttl == 9


def test_delete_and_requeue_all_on_etcd(
    etcd_session_server: EtcdServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    delete_and_requeue_all_work(
        etcd_session_server.store_url(namespace), capsys, sessions_end_with_the_client=True
    )


async def test_the_demo_runs_beside_a_job_of_another_ttl_in_the_default_namespace_on_etcd() -> None:
    async with etcd_server() as server:  # its own: the test writes the default namespace
        await demo_beside_a_job_of_another_ttl(lambda ttl: server.store_url(ttl=ttl))
