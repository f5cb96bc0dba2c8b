"""Key and namespace encoding, and the NATS URL format (no server needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spate import ConfigError, StoreError
from spate.store import Keyspace
from spate_stores.nats import NatsStore, parse_url
from spate_stores.nats._keys import (
    bucket_name,
    decode_key,
    encode_key,
    key_filter,
    prefix_filter,
)
from spate_stores.nats._watch import parse_ack_subject

keys = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True)


@given(keys)
def test_key_encoding_round_trips_and_makes_valid_subject_tokens(key: str) -> None:
    encoded = encode_key(key)
    assert decode_key(encoded) == key
    assert all(encoded.split(".")), f"{encoded!r} has an empty subject token"


@given(keys, keys)
def test_key_encoding_is_injective(a: str, b: str) -> None:
    assert (encode_key(a) == encode_key(b)) == (a == b)


def test_ordinary_keys_are_their_own_subjects() -> None:
    assert encode_key("split.0042.progress") == "split.0042.progress"
    assert encode_key(".a..b.") == "=.a.=.b.="


def _subject_matches(filter_: str, subject: str) -> bool:
    f, s = filter_.split("."), subject.split(".")
    for i, token in enumerate(f):
        if token == ">":
            return len(s) > i
        if i >= len(s) or token not in ("*", s[i]):
            return False
    return len(f) == len(s)


@given(keys, keys)
def test_prefix_filter_never_hides_a_matching_key(prefix: str, key: str) -> None:
    filter_, exact = prefix_filter(prefix)
    if key.startswith(prefix):
        assert _subject_matches(filter_, encode_key(key))
    elif exact:
        assert not _subject_matches(filter_, encode_key(key))


def test_prefix_filters() -> None:
    assert prefix_filter("") == (">", True)
    assert prefix_filter("split.") == ("split.>", True)
    assert prefix_filter("split") == (">", False)
    assert prefix_filter("job.spl") == ("job.>", False)
    assert prefix_filter(".") == ("=.>", True)


@given(keys, keys)
def test_key_filter_matches_its_key_and_no_other(key: str, other: str) -> None:
    filter_ = key_filter(key)
    assert not {"*", ">"} & set(filter_.split("."))
    assert _subject_matches(filter_, encode_key(key))
    assert _subject_matches(filter_, encode_key(other)) == (key == other)


def test_key_filters_exclude_keys_that_only_start_with_the_key() -> None:
    for key, longer in (
        ("x.assign.w1", "x.assign.w10"),
        ("x.plan", "x.plan2"),
        ("x.plan", "x.plan.y"),
    ):
        assert _subject_matches(key_filter(key), encode_key(key))
        assert not _subject_matches(key_filter(key), encode_key(longer))
    assert key_filter("a..b.") == "a.=.b.="


def test_bucket_names_are_distinct_per_namespace_and_keyspace() -> None:
    assert bucket_name("", Keyspace.DURABLE) == "spate_durable"
    assert bucket_name("job-42", Keyspace.EPHEMERAL) == "spate_ephemeral_job-42"
    assert bucket_name("tenant/job.1_x", Keyspace.DURABLE) == "spate_durable_tenant_2Fjob_2E1_5Fx"
    assert bucket_name("a_2F", Keyspace.DURABLE) != bucket_name("a/", Keyspace.DURABLE)
    with pytest.raises(StoreError, match="too long"):
        bucket_name("x" * 300, Keyspace.DURABLE)


def test_ack_subjects_of_both_forms() -> None:
    assert parse_ack_subject("$JS.ACK.KV_t.c.1.4.3.1795955460469434053.0") == (4, 3, 0)
    assert parse_ack_subject("$JS.ACK.dom.hash.KV_t.c.1.9.8.17959554604.2.xyz") == (9, 8, 2)
    assert parse_ack_subject("_INBOX.x") is None
    assert parse_ack_subject("$JS.ACK.KV_t.c.1.x.3.1.0") is None


def test_url_with_credentials_namespace_and_parameters() -> None:
    options = parse_url("nats://alice:s%40cret@nats.example:4333/job-7?ttl=15&timeout=2")
    connect = options.connect
    assert (connect.host, connect.port, connect.transport, connect.tls) == (
        "nats.example",
        4333,
        "tcp",
        False,
    )
    assert (connect.user, connect.password, connect.token) == ("alice", "s@cret", None)
    assert (options.namespace, options.ttl, connect.timeout) == ("job-7", 15.0, 2.0)
    assert "s@cret" not in repr(connect)
    assert "alice" not in connect.url


def test_url_token_and_defaults() -> None:
    options = parse_url("nats://t0ken@localhost")
    assert (options.connect.token, options.connect.user) == ("t0ken", None)
    assert (options.connect.port, options.namespace, options.ttl) == (4222, "", 30.0)


@pytest.mark.parametrize(
    ("url", "transport", "tls", "port"),
    [
        ("tls://h", "tcp", True, 4222),
        ("nats+tls://h:1", "tcp", True, 1),
        ("nats+ws://h", "ws", False, 80),
        ("nats+wss://h", "ws", True, 443),
        ("nats://h?ca=/etc/ca.pem", "tcp", True, 4222),
    ],
)
def test_url_schemes(url: str, transport: str, tls: bool, port: int) -> None:
    connect = parse_url(url).connect
    assert (connect.transport, connect.tls, connect.port) == (transport, tls, port)


def test_replicas_parameter() -> None:
    assert parse_url("nats://h?replicas=3").replicas == 3
    assert parse_url("nats://h").replicas == 1


def test_store_refuses_a_ttl_below_one_second() -> None:
    with pytest.raises(ConfigError, match="must be from 1 s to"):
        NatsStore.from_url("nats://h", ttl=0.5)


def test_namespace_parameter_overrides_the_path() -> None:
    assert parse_url("nats://h/a?namespace=b").namespace == "b"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h", "not a NATS URL"),
        ("nats://", "names no host"),
        ("nats://h:99999", "invalid host or port"),
        ("nats://h?ttl=0.5", "must be from 1 s to 9223372036 s"),
        ("nats://h?ttl=soon", "ttl must be a number of seconds, got 'soon'"),
        ("nats://h?timeout=-1", "positive number"),
        ("nats://h?colour=blue", "unknown parameter"),
        ("nats://h?replicas=2", "replicas must be 1, 3 or 5"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_url(url)


def test_bad_url_errors_never_show_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        parse_url("nats://bob:hunter2@h?colour=blue")
    assert "hunter2" not in str(info.value)
