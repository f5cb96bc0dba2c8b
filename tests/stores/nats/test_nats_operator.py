"""The operator's checks on real NATS JetStream KV (bodies in tests/stores/operator_checks)."""

from __future__ import annotations

import pytest

from spate.store import Keyspace
from spate_stores import open_store
from spate_stores.nats import NatsStore
from spate_stores.nats._bucket import find_bucket
from spate_stores.nats._keys import bucket_name
from spate_testing.servers.nats import NatsServer, nats_server
from tests.stores.operator_checks import (
    delete_and_requeue_all_work,
    demo_beside_a_job_of_another_ttl,
    demo_twice_computes_each_result,
    status_reads_whatever_ttl_and_refuses_a_missing_job,
    ttl_mismatch_says_how_to_resolve_it,
)

pytestmark = pytest.mark.nats


async def test_the_demo_run_twice_on_one_namespace_computes_each_result_on_nats(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    await demo_twice_computes_each_result(spate_nats_server.store_url(namespace))


async def test_a_ttl_mismatch_on_nats_says_how_to_resolve_it(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    await ttl_mismatch_says_how_to_resolve_it(
        lambda ttl: spate_nats_server.store_url(namespace, ttl=ttl), "NATS"
    )


def test_status_on_nats_writes_nothing_and_reads_whatever_ttl(
    spate_nats_server: NatsServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def untouched() -> bool:
        # Looked up from another namespace's store: no bucket of this one was created.
        async with open_store(spate_nats_server.store_url(f"{namespace}-probe")) as probe:
            assert isinstance(probe, NatsStore)
            js = probe._jetstream()
            for keyspace in Keyspace:
                if await find_bucket(js, bucket_name(namespace, keyspace), keyspace) is not None:
                    return False
        return True

    status_reads_whatever_ttl_and_refuses_a_missing_job(
        lambda ttl: spate_nats_server.store_url(namespace, ttl=ttl), untouched, capsys
    )


async def test_a_read_only_nats_store_creates_no_bucket_and_refuses_writes(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    async with open_store(spate_nats_server.store_url(namespace), read_only=True) as store:
        assert await store.list(Keyspace.DURABLE, "") == []
        assert await store.get(Keyspace.EPHEMERAL, "k") is None
        with pytest.raises(Exception, match="read-only"):
            await store.create(Keyspace.DURABLE, "k", b"v")
    async with open_store(spate_nats_server.store_url(f"{namespace}-probe")) as probe:
        assert isinstance(probe, NatsStore)
        for keyspace in Keyspace:
            name = bucket_name(namespace, keyspace)
            assert await find_bucket(probe._jetstream(), name, keyspace) is None


def test_delete_and_requeue_all_on_nats(
    spate_nats_server: NatsServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    delete_and_requeue_all_work(
        spate_nats_server.store_url(namespace), capsys, sessions_end_with_the_client=False
    )


async def test_the_demo_runs_beside_a_job_of_another_ttl_in_the_default_namespace_on_nats() -> None:
    async with nats_server() as server:  # its own: the test writes the default namespace
        await demo_beside_a_job_of_another_ttl(lambda ttl: server.store_url(ttl=ttl))
