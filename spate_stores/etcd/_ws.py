"""WebSocket streams to the gateway (``/v3/watch``, ``/v3/lease/keepalive``).

The gateway's WebSocket proxy turns each text message into one line of the streaming gRPC
request and each reply line into one message, so both directions flow at once (plain
HTTP/1.1 streaming sends nothing back until the request body ends). Failures map to
StoreUnavailable naming the endpoint.

With several members, a socket opens on the first member (from the current one on) that
accepts it, and a stream that breaks or goes unanswered moves the client past its member,
so the next stream (a re-watch, the etcd lease keepalive's next connection) goes elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio_websocket

from spate import StoreUnavailable
from spate_stores.etcd import _errors as errors
from spate_stores.etcd._gateway import Gateway

__all__ = ["WS_ERRORS", "GatewaySocket", "open_socket"]

# A replayed watch batch (or one txn's events) can be several MiB of JSON.
_MAX_MESSAGE = 256 * 1024 * 1024
# The proxy's reader dies silently on a malformed message; a short close handshake keeps a
# dead stream from holding a task for the library's default 60 s.
_DISCONNECT_TIMEOUT = 1.0

WS_ERRORS = (
    trio_websocket.HandshakeError,
    trio_websocket.ConnectionClosed,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)
"""What a socket operation can raise that means "the stream is broken"."""


class GatewaySocket:
    """One open WebSocket: send a JSON object, receive a message, errors mapped."""

    def __init__(self, ws: trio_websocket.WebSocketConnection, endpoint: str, what: str) -> None:
        self._ws = ws
        self._endpoint = endpoint
        self._what = what

    async def send(self, body: dict[str, Any]) -> None:
        """Send one request (always a well-formed JSON object: see the module docstring)."""
        try:
            await self._ws.send_message(json.dumps(body, separators=(",", ":")))
        except WS_ERRORS as exc:
            raise self._broken(exc) from None

    async def receive(self) -> str:
        """The next message; StoreUnavailable when the stream ends or breaks."""
        try:
            message = await self._ws.get_message()
        except WS_ERRORS as exc:
            raise self._broken(exc) from None
        return message if isinstance(message, str) else message.decode("utf-8", "replace")

    async def aclose(self) -> None:
        """Close the socket (idempotent)."""
        with trio.CancelScope(shield=True), trio.move_on_after(_DISCONNECT_TIMEOUT):
            await self._ws.aclose()

    def _broken(self, exc: BaseException) -> StoreUnavailable:
        if isinstance(exc, trio_websocket.ConnectionClosed):
            reason = exc.reason
            if reason is None:
                return errors.stream_closed(self._endpoint, self._what, None, None)
            return errors.stream_closed(self._endpoint, self._what, reason.code, reason.reason)
        return errors.stream_broken(self._endpoint, self._what, exc)


@asynccontextmanager
async def open_socket(gateway: Gateway, path: str, what: str) -> AsyncIterator[GatewaySocket]:
    """Open a WebSocket to ``path`` on a member and close it on exit.

    Tries each member once, from the current one on. Raises StoreUnavailable naming the
    members tried (or StoreError for TLS trust problems) if none connects within the
    configured timeout. Exceptions of the body pass through untouched, but a
    StoreUnavailable from the body (the stream broke) moves the client past the member.
    """
    tried: list[str] = []
    failure: Exception | None = None
    for endpoint in gateway.endpoints.rotation():
        tried.append(endpoint)
        try:
            async with _connect(gateway, endpoint, path, what) as ws:
                try:
                    yield GatewaySocket(ws, endpoint, what)
                except StoreUnavailable:
                    gateway.endpoints.failed(endpoint)
                    raise
            return
        except _ConnectFailed as exc:
            gateway.endpoints.failed(endpoint)
            failure = exc.error
    assert failure is not None
    if len(tried) == 1:
        raise failure
    raise errors.no_member_accepted_stream(what, tried, failure)


class _ConnectFailed(Exception):
    """A socket could not be opened on one member (nothing was sent on it)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@asynccontextmanager
async def _connect(
    gateway: Gateway, endpoint: str, path: str, what: str
) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    url = ("wss" if endpoint.startswith("https:") else "ws") + endpoint[endpoint.index(":") :]
    stage = "connecting"
    try:
        async with trio_websocket.open_websocket_url(
            url + path,
            ssl_context=gateway.ssl_context,
            connect_timeout=gateway.config.timeout,
            disconnect_timeout=_DISCONNECT_TIMEOUT,
            max_message_size=_MAX_MESSAGE,
        ) as ws:
            stage = "open"
            yield ws
            stage = "closing"
    except WS_ERRORS as exc:
        if stage == "open":
            raise
        if stage == "closing":
            return  # the caller is done with the stream; a failed close handshake is moot
        if isinstance(exc, trio_websocket.ConnectionTimeout):
            raise _ConnectFailed(
                errors.stream_handshake_timeout(endpoint, what, gateway.config.timeout)
            ) from None
        error = errors.transport_error(endpoint, exc, doing=f"opening the {what} stream")
        if isinstance(error, StoreUnavailable):
            raise _ConnectFailed(error) from None
        raise error from None
