"""Every adapter is built the same way: ``Store.from_url(url, *, namespace=, ttl=)``."""

from __future__ import annotations

import inspect

import pytest

from spate import ConfigError
from spate_stores import store_from_url
from spate_stores.etcd import EtcdStore
from spate_stores.memory import MemoryStore
from spate_stores.nats import NatsStore

Adapter = type[MemoryStore] | type[EtcdStore] | type[NatsStore]

ADAPTERS: list[tuple[Adapter, str]] = [
    (MemoryStore, "memory://ns-url?ttl=7"),
    (EtcdStore, "etcd://127.0.0.1:2379/ns-url?ttl=7"),
    (NatsStore, "nats://127.0.0.1:4222/ns-url?ttl=7"),
]


def namespace_of(store: object) -> str:
    if isinstance(store, EtcdStore):
        return store.config.namespace
    if isinstance(store, NatsStore):
        return store._options.namespace
    assert isinstance(store, MemoryStore)
    return store.namespace


def ttl_given(store: object) -> float | None:
    if isinstance(store, EtcdStore):
        return store.config.ephemeral_ttl
    if isinstance(store, NatsStore):
        return store._options.ttl
    assert isinstance(store, MemoryStore)
    return store.ephemeral_ttl


@pytest.mark.parametrize(("cls", "url"), ADAPTERS, ids=lambda v: getattr(v, "__name__", ""))
def test_from_url_takes_the_url_and_the_same_optional_overrides(cls: Adapter, url: str) -> None:
    parameters = inspect.signature(cls.from_url).parameters
    assert list(parameters)[:3] == ["url", "namespace", "ttl"]
    assert parameters["namespace"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["ttl"].kind is inspect.Parameter.KEYWORD_ONLY
    plain = cls.from_url(url)
    assert (namespace_of(plain), ttl_given(plain)) == ("ns-url", 7.0)
    assert type(store_from_url(url)) is cls  # open_store builds the same thing
    overridden = cls.from_url(url, namespace="ns-given", ttl=3.0)
    assert (namespace_of(overridden), ttl_given(overridden)) == ("ns-given", 3.0)


@pytest.mark.parametrize(("cls", "url"), ADAPTERS, ids=lambda v: getattr(v, "__name__", ""))
def test_a_bad_override_is_a_config_error(cls: Adapter, url: str) -> None:
    with pytest.raises(ConfigError):
        cls.from_url(url, ttl=-1.0)
