"""A TTL a store cannot grant is refused before anything is written, and a recorded one cleared.

etcd grants leases of 2 s to 9,000,000,000 s (``MaxLeaseTTL``), and rounds a TTL below its
server's own minimum (1.5 election timeouts) up; NATS keeps a stream's ``max_age`` as int64
nanoseconds. A TTL outside those is a ConfigError naming the limits, with no TTL record, lease or
bucket left behind; ``spate reset-ttl`` (:func:`spate.ops.reset_ttl`) clears the TTL a namespace
with no job still records.
"""

from __future__ import annotations

import base64

import pytest
import trio

from spate import ConfigError, StoreError
from spate._cli.main import main
from spate.ops import ResetRefused, reset_ttl
from spate.store import Keyspace
from spate_stores import open_store, store_from_url
from spate_stores.nats import NatsStore
from spate_stores.nats._errors import ApiError
from spate_stores.nats._jetstream import JetStream
from spate_stores.nats._keys import bucket_name
from spate_testing.servers.etcd import EtcdServer, etcd_server
from spate_testing.servers.etcd import etcd_session_server as etcd_session_server
from spate_testing.servers.nats import NatsServer
from spate_testing.servers.nats import spate_nats_server as spate_nats_server
from tests.stores.etcd.conftest import namespace as namespace


@pytest.mark.parametrize(
    ("url", "limits"),
    [
        ("etcd://127.0.0.1/ns?ttl=1000000000000", "from 2 s to 9000000000 s"),
        ("etcd://127.0.0.1/ns?ttl=9000000001", "from 2 s to 9000000000 s"),
        ("etcd://127.0.0.1/ns?ttl=1", "from 2 s to 9000000000 s"),
        ("nats://127.0.0.1/ns?ttl=1000000000000", "from 1 s to 9223372036 s"),
        ("nats://127.0.0.1/ns?ttl=9223372037", "from 1 s to 9223372036 s"),
        ("nats://127.0.0.1/ns?ttl=1e300", "from 1 s to 9223372036 s"),
        ("nats://127.0.0.1/ns?ttl=0.5", "from 1 s to 9223372036 s"),
    ],
)
def test_a_ttl_outside_what_the_store_grants_is_a_config_error_naming_the_limits(
    url: str, limits: str
) -> None:
    with pytest.raises(ConfigError) as info:
        store_from_url(url)
    message = str(info.value)
    assert f"an ephemeral TTL must be from {limits[5:]} there" in message, message
    assert "nothing was written" in message


def test_the_longest_ttls_each_store_grants_are_accepted() -> None:
    assert store_from_url("etcd://127.0.0.1/ns?ttl=9000000000").ephemeral_ttl == 9e9
    assert store_from_url("nats://127.0.0.1/ns?ttl=9223372036").ephemeral_ttl == 9223372036


def test_a_ttl_mismatch_writes_each_ttl_so_it_can_be_typed_back() -> None:
    from spate_stores._namespace import ttl_mismatch

    message = str(ttl_mismatch("etcd", "ns", 1e12, 30))
    assert "already uses an ephemeral TTL of 1000000000000 s, not 30 s" in message
    assert "open the store with ttl=1000000000000 " in message  # never 1e+12: "+" is a space
    assert "`spate reset-ttl --store URL`" in message


async def _record(server: EtcdServer, namespace: str, value: bytes) -> None:
    key = base64.b64encode(f"spate/{namespace}:meta/ephemeral-ttl".encode()).decode()
    await server.call("/v3/kv/put", {"key": key, "value": base64.b64encode(value).decode()})


async def _recorded(server: EtcdServer, namespace: str) -> bool:
    key = base64.b64encode(f"spate/{namespace}:meta/ephemeral-ttl".encode()).decode()
    return bool((await server.call("/v3/kv/range", {"key": key})).get("kvs"))


@pytest.mark.etcd
async def test_an_etcd_ttl_below_what_the_server_grants_records_nothing() -> None:
    # 1.5 election timeouts of 5 s: this etcd grants no lease shorter than 8 s.
    args = ("--election-timeout=5000", "--heartbeat-interval=500")
    async with etcd_server(extra_args=args) as server:
        with pytest.raises(ConfigError) as info:
            async with open_store(server.store_url("short", ttl=2)):
                pass
        message = str(info.value)
        assert "grants a lease of 8 s when asked for ttl=2" in message, message
        assert "--election-timeout" in message
        assert "Open it with ttl=8 or more" in message
        assert not await _recorded(server, "short")
        async with open_store(server.store_url("short", ttl=8)) as store, store.session() as held:
            await store.create(Keyspace.EPHEMERAL, "k", b"v", session=held)


@pytest.mark.etcd
async def test_an_etcd_ttl_out_of_range_leaves_the_namespace_usable(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    with pytest.raises(ConfigError):
        async with open_store(etcd_session_server.store_url(namespace) + "&ttl=1000000000000"):
            pass
    assert not await _recorded(etcd_session_server, namespace)
    async with open_store(etcd_session_server.store_url(namespace, ttl=5)) as store:
        assert store.ephemeral_ttl == 5


@pytest.mark.etcd
async def test_a_recorded_etcd_ttl_out_of_range_is_refused_and_reset_ttl_clears_it(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    await _record(etcd_session_server, namespace, b"1000000000000")  # an older spate's record
    with pytest.raises(StoreError) as info:
        async with open_store(etcd_session_server.store_url(namespace, ttl=30)):
            pass
    message = str(info.value)
    assert "records an ephemeral TTL of 1000000000000 s, which etcd cannot grant" in message
    assert "`spate reset-ttl --store URL`" in message
    async with open_store(etcd_session_server.store_url(namespace)) as adopted:
        with pytest.raises(StoreError, match="which etcd cannot grant"):
            async with adopted.session():
                pass
        with pytest.raises(StoreError, match="which etcd cannot grant"):
            await adopted.create(Keyspace.EPHEMERAL, "k", b"v")
        assert await reset_ttl(adopted)
    async with open_store(etcd_session_server.store_url(namespace, ttl=30)) as store:
        assert store.ephemeral_ttl == 30


@pytest.mark.etcd
async def test_reset_ttl_refuses_while_a_job_is_left_and_changes_nothing(
    etcd_session_server: EtcdServer, namespace: str
) -> None:
    async with open_store(etcd_session_server.store_url(namespace, ttl=7)) as store:
        await store.create(Keyspace.DURABLE, "job-1.plan", b"{}")
        with pytest.raises(ResetRefused, match=r"still holds jobs job-1, so its TTL was left"):
            await reset_ttl(store)
    async with open_store(etcd_session_server.store_url(namespace)) as store:
        assert store.ephemeral_ttl == 7


async def test_reset_ttl_on_a_memory_store_says_it_records_no_ttl() -> None:
    async with open_store("memory://reset-ttl?ttl=5") as store:
        with pytest.raises(StoreError, match="records no namespace TTL"):
            await reset_ttl(store)


@pytest.mark.etcd
def test_spate_reset_ttl_clears_an_etcd_namespace_ttl(
    etcd_session_server: EtcdServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trio.run(_record, etcd_session_server, namespace, b"1000000000000")
    # The URL's ttl= is ignored: the store is opened to adopt what is recorded.
    url = etcd_session_server.store_url(namespace, ttl=30)
    assert main(["reset-ttl", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "cleared the ephemeral TTL recorded for" in out
    assert "(1000000000000 s)" in out
    assert not trio.run(_recorded, etcd_session_server, namespace)
    assert main(["reset-ttl", "--store", url]) == 0
    assert "records no ephemeral TTL; nothing was changed" in capsys.readouterr().out


@pytest.mark.nats
async def test_a_nats_ttl_out_of_range_leaves_no_bucket_behind(
    spate_nats_server: NatsServer, namespace: str
) -> None:
    with pytest.raises(ConfigError, match="outside what NATS grants"):
        async with open_store(spate_nats_server.store_url(namespace) + "&ttl=1000000000000"):
            pass
    async with open_store(spate_nats_server.store_url("elsewhere", ttl=5)) as store:
        assert isinstance(store, NatsStore)
        js = JetStream(store.connection)
        for keyspace in Keyspace:
            with pytest.raises(ApiError):
                await js.api(f"STREAM.INFO.KV_{bucket_name(namespace, keyspace)}")


@pytest.mark.nats
def test_spate_reset_ttl_lets_an_empty_nats_namespace_take_another_ttl(
    spate_nats_server: NatsServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def open_with(ttl: float) -> float:
        async with open_store(spate_nats_server.store_url(namespace, ttl=ttl)) as store:
            return store.ephemeral_ttl

    assert trio.run(open_with, 5) == 5
    with pytest.raises(StoreError, match="already uses an ephemeral TTL of 5 s"):
        trio.run(open_with, 30)
    assert main(["reset-ttl", "--store", spate_nats_server.store_url(namespace)]) == 0
    assert "(5 s)" in capsys.readouterr().out
    assert trio.run(open_with, 30) == 30


@pytest.mark.nats
def test_spate_reset_ttl_refuses_a_nats_namespace_with_a_job(
    spate_nats_server: NatsServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def seed() -> None:
        async with open_store(spate_nats_server.store_url(namespace, ttl=5)) as store:
            await store.create(Keyspace.DURABLE, "job-1.plan", b"{}")

    trio.run(seed)
    assert main(["reset-ttl", "--store", spate_nats_server.store_url(namespace)]) == 2
    assert "still holds jobs job-1" in capsys.readouterr().err
