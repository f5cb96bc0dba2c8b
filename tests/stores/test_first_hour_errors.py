"""The store errors of a user's first hour, against real servers.

A TLS URL against a plain server says the server does not speak TLS; a NATS server without
JetStream says to start it with -js; a bad ``?ttl=`` names the parameter; a bad name is
echoed at most ~100 characters.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import trio

from spate import ConfigError, PlanError, SpateError, StoreError
from spate._plan import validate_instance, validate_job, validate_split_id
from spate_stores import open_store, store_from_url
from spate_testing.servers._ports import free_port
from spate_testing.servers.etcd import EtcdServer
from spate_testing.servers.etcd import etcd_session_server as etcd_session_server
from spate_testing.servers.nats import NatsServer, find_nats_server
from spate_testing.servers.nats import spate_nats_server as spate_nats_server


async def _open_error(url: str) -> SpateError:
    async def opening() -> None:
        with trio.fail_after(30):
            async with open_store(url):
                pass

    with pytest.raises(SpateError) as info:
        await opening()
    return info.value


@pytest.mark.etcd
async def test_an_etcd_https_url_against_a_plain_server_says_it_does_not_speak_tls(
    etcd_session_server: EtcdServer,
) -> None:
    where = f"127.0.0.1:{etcd_session_server.client_port}"
    error = await _open_error(f"etcd+https://{where}?timeout=5")
    assert f"the server at {where} does not speak TLS" in str(error)
    assert "use an etcd:// URL" in str(error)


@pytest.mark.nats
async def test_a_nats_tls_url_against_a_plain_server_says_it_does_not_speak_tls(
    spate_nats_server: NatsServer,
) -> None:
    where = f"127.0.0.1:{spate_nats_server.port}"
    error = await _open_error(f"tls://{where}")
    assert type(error) is StoreError
    assert f"the server at {where} does not speak TLS" in str(error)
    assert "use a nats:// URL" in str(error)


@pytest.fixture
def nats_without_jetstream() -> Iterator[int]:
    """A nats-server started without -js; its port."""
    port = free_port()
    process = subprocess.Popen(
        [find_nats_server(), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        process.kill()
        process.wait()


@pytest.mark.nats
async def test_nats_without_jetstream_says_to_start_it_with_js(
    nats_without_jetstream: int,
) -> None:
    error = await _open_error(f"nats://127.0.0.1:{nats_without_jetstream}")
    assert type(error) is StoreError
    assert "start nats-server with -js (JetStream)" in str(error)


@pytest.mark.parametrize(
    "url",
    [
        "etcd://127.0.0.1?ttl=abc",
        "etcd://127.0.0.1?timeout=abc",
        "nats://127.0.0.1?ttl=abc",
        "nats://127.0.0.1?timeout=abc",
        "memory://job?ttl=abc",
    ],
)
def test_a_bad_number_in_the_url_names_the_parameter(url: str) -> None:
    param = url.rpartition("?")[2].partition("=")[0]
    with pytest.raises(ConfigError) as info:
        store_from_url(url)
    assert f"{param} must be a number of seconds, got 'abc'" in str(info.value)


LONG = "x" * 5000


@pytest.mark.parametrize(
    ("check", "error"),
    [
        (lambda: validate_job(LONG + "."), ConfigError),
        (lambda: validate_split_id(LONG + "!"), PlanError),
        (lambda: validate_instance(LONG + "!"), ConfigError),
        (lambda: store_from_url(f"etcd://127.0.0.1/{LONG}!"), ConfigError),
        (lambda: store_from_url(f"etcd://127.0.0.1?{LONG}=1"), ConfigError),
        (lambda: store_from_url(f"nats://127.0.0.1?ttl={LONG}"), ConfigError),
        (lambda: store_from_url(f"nats://127.0.0.1?{LONG}=1"), ConfigError),
        (lambda: store_from_url(f"nats://127.0.0.1?replicas={LONG}"), ConfigError),
        (lambda: store_from_url(f"etcd://{LONG}!:2379"), ConfigError),
        (lambda: store_from_url(f"nats://{LONG}!:4222"), ConfigError),
        (lambda: store_from_url(f"memory://job?ttl={LONG}"), ConfigError),
        (lambda: store_from_url(f"memory://job?{LONG}=1"), ConfigError),
    ],
)
def test_errors_echo_at_most_about_100_characters_of_a_bad_name(
    check: object, error: type[Exception]
) -> None:
    with pytest.raises(error) as info:
        check()  # type: ignore[operator]
    message = str(info.value)
    assert "x" * 100 in message
    assert "x" * 101 not in message
    assert len(message) < 600, message
