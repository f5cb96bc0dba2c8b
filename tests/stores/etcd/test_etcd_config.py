"""etcd URLs and the key layout, with no server."""

from __future__ import annotations

import itertools

import pytest

from spate import ConfigError
from spate.store import MAX_KEY_LENGTH, Keyspace
from spate_stores.etcd import DEFAULT_MAX_REQUEST_BYTES, EtcdConfig, EtcdStore, store_from_url
from spate_stores.etcd._config import KeyLayout


def test_a_full_url_parses_into_its_parts() -> None:
    config = EtcdConfig.from_url(
        "etcd+https://al%40ce:p%3Ass@etcd.internal:2390/jobs/backfill"
        "?ttl=10&ca=/ca.pem&cert=/c.pem&key=/k.pem&timeout=2.5&max_request_bytes=4194304"
    )
    assert config.endpoint == "https://etcd.internal:2390"
    assert config.namespace == "jobs/backfill"
    assert config.ephemeral_ttl == 10
    assert (config.username, config.password) == ("al@ce", "p:ss")
    assert (config.ca, config.cert, config.key) == ("/ca.pem", "/c.pem", "/k.pem")
    assert config.timeout == 2.5
    assert config.max_request_bytes == 4194304


def test_defaults() -> None:
    config = EtcdConfig.from_url("etcd://localhost")
    assert config.endpoint == "http://localhost:2379"
    assert config.namespace == ""
    assert config.ephemeral_ttl is None
    assert config.username is None
    assert config.max_request_bytes == DEFAULT_MAX_REQUEST_BYTES
    assert EtcdConfig.from_url("etcd+http://[::1]:2379?namespace=a").endpoint == (
        "http://[::1]:2379"
    )


def test_the_password_is_never_in_reprs() -> None:
    url = "etcd://root:hunter2-secret@127.0.0.1:2379/ns"
    store = store_from_url(url)
    assert "hunter2" not in repr(store)
    assert "hunter2" not in repr(store.config)
    assert "root" in repr(store)


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("etcd://h:2379?ttl=1", "must be from 2 s to 9000000000 s"),
        ("etcd://h:2379?ttl=2.5", "whole number of seconds from 2 to"),
        ("etcd://h:2379?ttl=soon", "ttl must be a number of seconds, got 'soon'"),
        ("etcd://h:2379?tll=5", "unknown etcd URL parameter 'tll'"),
        ("etcd://h:2379?ca=/ca.pem", "etcd+https://"),
        ("etcd+https://h:2379?cert=/c.pem", "both cert= and key="),
        ("etcd://user@h:2379", "both a user name and a password"),
        ("etcd://h:2379/a?namespace=b", "give one"),
        ("etcd://h:2379/bad:ns", "invalid etcd namespace"),
        ("etcd://h:2379?namespace=a//b", "invalid etcd namespace"),
        ("etcd://h:99999", "malformed etcd URL"),
        ("etcd://h:2379?timeout=0", "timeout must be a positive"),
        ("nats://h:2379", "etcd://"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint.replace("+", r"\+").replace("?", r"\?")):
        EtcdStore.from_url(url)


def test_a_bad_url_error_never_echoes_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        EtcdStore.from_url("etcd://root:hunter2-secret@h:2379?bogus=1")
    assert "hunter2" not in str(info.value)


def test_namespaces_and_keyspaces_are_prefix_free() -> None:
    layouts = [KeyLayout(ns) for ns in ("", "a", "a/b", "ab", "a.b", "a-b/c")]
    prefixes = [layout.prefix(ks) for layout in layouts for ks in Keyspace]
    prefixes += [layout.ttl_key for layout in layouts]
    for one, other in itertools.permutations(prefixes, 2):
        assert not other.startswith(one), (one, other)


def test_keys_round_trip_through_the_layout() -> None:
    layout = KeyLayout("jobs/x")
    raw = layout.key(Keyspace.EPHEMERAL, "split.0001")
    assert raw == b"spate/jobs/x:ephemeral/split.0001"
    assert layout.store_key(Keyspace.EPHEMERAL, raw) == "split.0001"


def test_max_value_size_leaves_room_for_the_longest_key_twice() -> None:
    layout = KeyLayout("n" * 200)
    size = layout.max_value_size(DEFAULT_MAX_REQUEST_BYTES)
    longest = len(layout.prefix(Keyspace.EPHEMERAL)) + MAX_KEY_LENGTH
    assert size + 2 * longest < DEFAULT_MAX_REQUEST_BYTES
    assert size > 1_500_000
