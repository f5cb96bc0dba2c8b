"""A store URL aimed at the wrong port says so, instead of "retry" or "start it with -js".

An etcd URL at a port that speaks first or not HTTP (a NATS client port, anything else), a NATS
URL at an HTTP port (etcd, a WebSocket listener) or a ``nats+ws://`` URL at the TCP client port,
and ``nats+wss://`` at a WebSocket listener without TLS: each is a StoreError naming the port and
what to fix. The ports are real servers on loopback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio

from spate import SpateError, StoreError, StoreUnavailable
from spate_stores import open_store
from spate_testing.servers.etcd import EtcdServer
from spate_testing.servers.etcd import etcd_session_server as etcd_session_server
from spate_testing.servers.nats import NatsServer
from spate_testing.servers.nats import spate_nats_server as spate_nats_server

Handler = Callable[[trio.SocketStream], Awaitable[None]]


async def _open_error(url: str) -> SpateError:
    async def opening() -> None:
        with trio.fail_after(30):
            async with open_store(url):
                pass

    with pytest.raises(SpateError) as info:
        await opening()
    return info.value


@asynccontextmanager
async def _listener(handler: Handler) -> AsyncIterator[int]:
    """A TCP server on a free loopback port running ``handler`` per connection; its port."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def _greets_with_garbage(stream: trio.SocketStream) -> None:
    await stream.send_all(b"+OK welcome to something else\r\n")
    await stream.aclose()


async def _serves_http(stream: trio.SocketStream) -> None:
    with trio.move_on_after(5):
        await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    await stream.aclose()


async def _says_nothing(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


@pytest.mark.nats
async def test_an_etcd_url_at_a_nats_port_says_it_is_no_etcd(
    spate_nats_server: NatsServer,
) -> None:
    endpoint = f"http://127.0.0.1:{spate_nats_server.port}"
    error = await _open_error(f"etcd://127.0.0.1:{spate_nats_server.port}/ns?timeout=3")
    assert type(error) is StoreError
    assert f"{endpoint} is not an etcd gateway: it does not speak HTTP" in str(error)
    assert "(a NATS server's client port)" in str(error)
    assert "retry" not in str(error)


async def test_an_etcd_url_at_a_port_answering_garbage_says_it_is_no_etcd() -> None:
    async with _listener(_greets_with_garbage) as port:
        error = await _open_error(f"etcd://127.0.0.1:{port}/ns?timeout=3")
    assert type(error) is StoreError
    assert "does not speak HTTP, it says b'+OK welcome to something else'" in str(error)
    assert "check the host and port of the etcd URL" in str(error)


@pytest.mark.etcd
async def test_a_nats_url_at_an_etcd_port_says_it_answers_http(
    etcd_session_server: EtcdServer,
) -> None:
    port = etcd_session_server.client_port
    error = await _open_error(f"nats://127.0.0.1:{port}/ns?timeout=2")
    assert type(error) is StoreError
    assert f"127.0.0.1:{port} is not a NATS client port: it answers HTTP (HTTP/" in str(error)
    assert "-js" not in str(error)


async def test_a_nats_url_at_an_http_port_says_it_answers_http() -> None:
    async with _listener(_serves_http) as port:
        error = await _open_error(f"nats://127.0.0.1:{port}/ns?timeout=2")
    assert type(error) is StoreError
    assert "it answers HTTP (HTTP/1.1 404 Not Found)" in str(error)


async def test_a_nats_url_at_a_silent_port_names_both_causes_and_stays_retryable() -> None:
    # A hung nats-server looks the same as a port that never speaks: no certainty, so retry.
    async with _listener(_says_nothing) as port:
        error = await _open_error(f"nats://127.0.0.1:{port}/ns?timeout=1")
    assert type(error) is StoreUnavailable
    assert "no connection and handshake within 1 s" in str(error)
    assert "not running there (or is hung), or the port serves something other" in str(error)


@pytest.mark.nats
async def test_a_nats_ws_url_at_the_tcp_client_port_says_to_use_nats(
    spate_nats_server: NatsServer,
) -> None:
    port = spate_nats_server.port
    error = await _open_error(f"nats+ws://127.0.0.1:{port}/ns?timeout=2")
    assert type(error) is StoreError
    assert f"127.0.0.1:{port} is a NATS TCP client port, not a WebSocket listener" in str(error)
    assert "use a nats:// URL for it" in str(error)


@pytest.mark.nats
async def test_a_nats_wss_url_at_a_plain_websocket_listener_says_to_use_nats_ws(
    spate_nats_server: NatsServer,
) -> None:
    port = spate_nats_server.ws_port
    error = await _open_error(f"nats+wss://127.0.0.1:{port}/ns?timeout=5")
    assert type(error) is StoreError
    message = str(error)
    assert f"the WebSocket listener at 127.0.0.1:{port} does not speak TLS" in message
    assert "use a nats+ws:// URL" in message
    assert "-js" not in message
