"""spate_stores.open_store: URL parsing, clear errors, no leaked credentials."""

from __future__ import annotations

import sys

import pytest

import spate_stores
from spate import ConfigError, StoreError
from spate.store import Keyspace, Won
from spate_stores import SUPPORTED_SCHEMES, open_store, redact_url, store_from_url
from spate_stores.memory import DEFAULT_EPHEMERAL_TTL, MemoryStore


async def test_memory_url_with_namespace_and_ttl() -> None:
    async with open_store("memory://?namespace=job-1&ttl=7.5&max_value_size=100") as store:
        assert isinstance(store, MemoryStore)
        assert store.namespace == "job-1"
        assert store.ephemeral_ttl == 7.5
        assert store.capabilities.max_value_size == 100


async def test_memory_url_takes_the_namespace_from_its_path() -> None:
    async with open_store("memory://tenant/job") as store:
        assert isinstance(store, MemoryStore)
        assert store.namespace == "tenant/job"
        assert store.ephemeral_ttl == DEFAULT_EPHEMERAL_TTL


async def test_memory_urls_of_one_process_share_data_and_namespaces_isolate() -> None:
    async with (
        open_store("memory://?namespace=a") as one,
        open_store("memory://a") as two,
        open_store("memory://?namespace=b") as other,
    ):
        assert isinstance(await one.create(Keyspace.DURABLE, "k", b"v"), Won)
        assert await two.get(Keyspace.DURABLE, "k") is not None
        assert await other.get(Keyspace.DURABLE, "k") is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memory://?ttl=soon", "ttl must be a number of seconds"),
        ("memory://?ttl=0", "ephemeral_ttl must be a positive number"),
        ("memory://?max_value_size=big", "max_value_size must be a whole number of bytes"),
        ("memory://?colour=blue", r"unknown parameter\(s\) \['colour'\]"),
    ],
)
def test_bad_memory_parameters_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        store_from_url(url)


def test_unknown_scheme_names_the_supported_ones() -> None:
    with pytest.raises(ConfigError) as info:
        store_from_url("redis://localhost:6379")
    message = str(info.value)
    assert "'redis://localhost:6379'" in message
    for scheme in SUPPORTED_SCHEMES:
        assert f"{scheme}://" in message


def test_a_url_without_a_scheme_is_refused() -> None:
    with pytest.raises(ConfigError, match="the scheme must be one of"):
        store_from_url("localhost:2379")


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # A scheme whose adapter module cannot be imported, as when its extra is not installed.
    monkeypatch.setitem(spate_stores._ADAPTERS, "fake", ("spate_fake_adapter", "fake"))
    monkeypatch.setitem(sys.modules, "spate_fake_adapter", None)
    with pytest.raises(StoreError) as info:
        store_from_url("fake://host")
    assert "pip install 'trio-spate[fake]'" in str(info.value)
    assert "pip install '.[fake]'" in str(info.value)
    assert "spate_fake_adapter" in str(info.value)


def test_etcd_without_httpx_names_the_etcd_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    monkeypatch.delitem(sys.modules, "spate_stores.etcd", raising=False)
    with pytest.raises(StoreError, match=r"pip install 'trio-spate\[etcd\]'"):
        store_from_url("etcd://127.0.0.1:2379")


def test_credentials_never_appear_in_errors() -> None:
    with pytest.raises(ConfigError) as info:
        store_from_url("redis://alice:s3cret@db.example:6379/0")
    assert "s3cret" not in str(info.value)
    assert "alice:***@db.example:6379" in str(info.value)


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("etcd://u:p@h:1/x?ttl=2", "etcd://u:***@h:1/x?ttl=2"),
        ("nats://token@h:4222", "nats://***@h:4222"),
        ("memory://job", "memory://job"),
        ("etcd://u:p@h:notaport", "etcd://u:***@h:notaport"),
        ("etcd://u:p@h1:1,h2:2/x", "etcd://u:***@h1:1,h2:2/x"),
        ("etcd://u:a/b@c@h:1/x", "etcd://u:***@h:1/x"),
        ("nats://h:1?token=t0k&ttl=5", "nats://h:1?token=***&ttl=5"),
        (
            "nats://h:1?password=p&user_password=q&auth_token=r",
            "nats://h:1?password=***&user_password=***&auth_token=***",
        ),
        (
            "nats://h:1?ca=/etc/ca.pem&creds=/x/u.creds",
            "nats://h:1?ca=/etc/ca.pem&creds=/x/u.creds",
        ),
        (42, "<not a store URL>"),
    ],
)
def test_redact_url(url: object, redacted: str) -> None:
    assert redact_url(url) == redacted


@pytest.mark.parametrize(
    "url",
    [
        "nats://h:4222?password=s3cret-q&ttl=5",
        "nats://h:4222?token=s3cret-q",
        "etcd://h:2379?password=s3cret-q",
        "nats://u:s3cret-q@h:notaport",
        "etcd://u:s3cret-q@h:notaport",
        "etcd://u:s3cret-q@h:2379?ttl=abc",
        "memory://job?password=s3cret-q",
        "memory://job?token=s3cret-q&ttl=abc",
        "nats://u:s3cret-q@h:4222?replicas=2",
    ],
)
def test_a_refused_url_is_never_echoed_with_its_secret(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        store_from_url(url)
    assert "s3cret-q" not in str(info.value)
