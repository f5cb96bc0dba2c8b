"""Endpoint lists in etcd and NATS URLs: parsing, bad lists, and every endpoint down."""

from __future__ import annotations

import pytest

from spate import ConfigError, StoreUnavailable
from spate_stores import open_store
from spate_stores.etcd import EtcdConfig
from spate_stores.etcd._endpoints import EndpointSet
from spate_stores.nats._options import parse_url
from spate_stores.nats._servers import ServerPool
from spate_testing.servers._ports import free_port


def test_etcd_url_names_every_member() -> None:
    config = EtcdConfig.from_url("etcd://u:s3cret@h1:2379,h2,[::1]:2390/job?ttl=5")
    assert config.endpoints == ("http://h1:2379", "http://h2:2379", "http://[::1]:2390")
    assert config.endpoint == "http://h1:2379"
    assert config.namespace == "job"
    assert (config.username, config.password) == ("u", "s3cret")
    assert "s3cret" not in repr(config)
    tls = EtcdConfig.from_url("etcd+https://a:1,b:2")
    assert tls.endpoints == ("https://a:1", "https://b:2")


def test_nats_url_names_every_server() -> None:
    options = parse_url("nats://u:s3cret@h1:4222,h2,[::1]:4223/job?replicas=3")
    assert options.connect.configured == (("h1", 4222), ("h2", 4222), ("::1", 4223))
    assert options.replicas == 3
    assert "s3cret" not in options.connect.url
    assert parse_url("nats://h1").connect.configured == (("h1", 4222),)


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("etcd://u:s3cret@h1:2379,,h2:2379", "empty entry"),
        ("etcd://u:s3cret@h1:2379,h1:2379", "twice"),
        ("etcd://u:s3cret@h1:2379,h2:99999", "port must be 1-65535"),
        ("etcd://u:s3cret@h1:2379,h2:x", "port must be 1-65535"),
        ("etcd://u:s3cret@h1:2379,bad_host!:1", "expected host"),
        ("etcd://u:s3cret@h1,[::1", "malformed etcd URL"),
        ("nats://u:s3cret@h1:4222,,h2", "empty entry"),
        ("nats://u:s3cret@h1:4222,h2:0", "port must be 1-65535"),
    ],
)
def test_malformed_lists_are_config_errors(url: str, complaint: str) -> None:
    parse = EtcdConfig.from_url if url.startswith("etcd") else parse_url
    with pytest.raises(ConfigError, match=complaint) as caught:
        parse(url)
    assert "s3cret" not in str(caught.value)


def test_endpoint_set_moves_on_once_per_failure() -> None:
    endpoints = EndpointSet(("a", "b", "c"))
    assert endpoints.rotation() == ["a", "b", "c"]
    endpoints.failed("a")
    endpoints.failed("a")  # a second caller failing on the same member moves nothing
    assert endpoints.current == "b"
    assert endpoints.rotation() == ["b", "c", "a"]
    assert endpoints.switches == 1


def test_server_pool_learns_advertised_servers() -> None:
    pool = ServerPool([("127.0.0.1", 4222)])
    pool.learn(["127.0.0.1:4222", "127.0.0.1:4223", "nats://[::1]:4224", "garbage"])
    assert pool.servers == (("127.0.0.1", 4222), ("127.0.0.1", 4223), ("::1", 4224))
    assert pool.learned == 2
    pool.advance()
    assert pool.current == ("127.0.0.1", 4223)


async def test_every_etcd_endpoint_down_names_them_all() -> None:
    ports = [free_port(), free_port()]
    url = f"etcd://root:s3cret@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/job?timeout=2"
    with pytest.raises(StoreUnavailable) as caught:
        async with open_store(url):
            pass
    message = str(caught.value)
    assert f"127.0.0.1:{ports[0]}" in message
    assert f"127.0.0.1:{ports[1]}" in message
    assert "tried" in message
    assert "s3cret" not in message


async def test_every_nats_server_down_names_them_all() -> None:
    ports = [free_port(), free_port()]
    url = f"nats://root:s3cret@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/job?timeout=2"
    with pytest.raises(StoreUnavailable) as caught:
        async with open_store(url):
            pass
    message = str(caught.value)
    assert f"127.0.0.1:{ports[0]}" in message
    assert f"127.0.0.1:{ports[1]}" in message
    assert "tried" in message
    assert "s3cret" not in message
