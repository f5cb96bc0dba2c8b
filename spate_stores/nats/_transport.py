"""Byte transports under the NATS protocol: TCP (optionally upgraded to TLS) and WebSocket.

Both look the same to the connection: ``send_all(bytes)``, ``receive_some() -> bytes`` (empty
at end of stream) and ``aclose()``. WebSocket messages are treated as a byte stream, because
nats-server packs several operations into one frame or splits one across frames.
Transport failures surface as :class:`TransportError` so the connection has exactly one
exception to translate.
"""

from __future__ import annotations

import socket
import ssl
from typing import Protocol

import trio
import trio_websocket

__all__ = [
    "NotTls",
    "SocketTransport",
    "StreamTransport",
    "Transport",
    "TransportError",
    "WebSocketTransport",
]

_RECEIVE_SIZE = 256 * 1024
# What the ssl module reports when the other end answers a ClientHello with something other
# than TLS (an HTTP 400 page from a plain WebSocket listener, a NATS INFO line).
_NOT_TLS_REASONS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"}
)
# nats-server frames can carry a whole max_payload message plus its headers and more ops.
_MAX_WS_MESSAGE = 80 * 1024 * 1024


class TransportError(Exception):
    """The transport failed (refused, reset, closed, TLS or WebSocket handshake failed)."""


class Transport(Protocol):
    """A bidirectional byte stream to one server."""

    sends_directly: bool
    """Whether :meth:`try_send` can send at all (else only the writer task's send_all does)."""

    def try_send(self, data: bytes) -> int:
        """Send what can be sent without waiting; how many bytes that was (maybe 0)."""
        ...

    async def send_all(self, data: bytes) -> None:
        """Send every byte of ``data``; raises TransportError if the stream broke."""
        ...

    async def receive_some(self) -> bytes:
        """The next bytes received; ``b""`` when the peer closed the stream."""
        ...

    async def aclose(self) -> None:
        """Close the stream (never raises)."""
        ...


class SocketTransport:
    """Plain TCP on a non-blocking socket, driven by ``trio.lowlevel.wait_readable/writable``.

    Why not :class:`trio.SocketStream`: it yields to the scheduler on every send and receive
    (it must, to be a checkpoint), and a request/reply client that writes a small message and
    then waits for the reply anyway pays for that on every round trip. Here a send completes
    without yielding whenever the kernel takes the bytes at once (nearly always); callers
    provide their own checkpoints.
    """

    sends_directly = True

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock

    @classmethod
    async def connect(cls, host: str, port: int) -> SocketTransport:
        """Open a TCP connection; raises TransportError if it cannot."""
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise TransportError(f"cannot connect: {exc.strerror or exc}") from exc
        # Take the socket over from trio (which set TCP_NODELAY and resolved the address).
        return cls(socket.socket(fileno=stream.socket.detach()))

    async def start_tls(self, context: ssl.SSLContext, server_hostname: str) -> StreamTransport:
        """Hand the socket to a TLS stream and handshake; raises TransportError on failure."""
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(self._sock))
        return await StreamTransport.start_tls(stream, context, server_hostname)

    def try_send(self, data: bytes) -> int:
        """Send what the kernel takes right now, without waiting."""
        try:
            return self._sock.send(data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise TransportError(f"connection broken while sending: {exc}") from exc

    async def send_all(self, data: bytes) -> None:
        """Send every byte of ``data``, waiting only if the kernel's buffer is full."""
        view = memoryview(data)
        try:
            while view:
                try:
                    sent = self._sock.send(view)
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(self._sock)
                    continue
                view = view[sent:]
        except (OSError, trio.ClosedResourceError) as exc:
            raise TransportError(f"connection broken while sending: {exc}") from exc

    async def receive_some(self) -> bytes:
        """The next bytes received; ``b""`` at end of stream."""
        try:
            while True:
                await trio.lowlevel.wait_readable(self._sock)
                try:
                    return self._sock.recv(_RECEIVE_SIZE)
                except BlockingIOError:
                    continue
        except (OSError, trio.ClosedResourceError) as exc:
            raise TransportError(f"connection broken while receiving: {exc}") from exc

    async def aclose(self) -> None:
        """Close the socket; a task waiting on it gets TransportError."""
        if self._sock.fileno() != -1:
            trio.lowlevel.notify_closing(self._sock)
            self._sock.close()
        await trio.lowlevel.checkpoint()


class NotTls(TransportError):
    """The server answered the TLS handshake with something that is not TLS (``port``: where)."""

    def __init__(self, host: str, port: int, detail: str) -> None:
        super().__init__(f"the server answered the TLS handshake with something else ({detail})")
        self.host = host
        self.port = port


def _not_tls_reason(exc: BaseException) -> str | None:
    """The ssl reason in ``exc``'s chain saying the other end does not speak TLS, if any."""
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            return None
        reason = getattr(current, "reason", None) if isinstance(current, ssl.SSLError) else None
        if reason in _NOT_TLS_REASONS:
            return str(reason)
        current = current.__cause__ or current.__context__
    return None


class StreamTransport:
    """A Trio stream (used for TLS: NATS sends INFO in clear, then the client upgrades)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream

    @classmethod
    async def start_tls(
        cls, stream: trio.abc.Stream, context: ssl.SSLContext, server_hostname: str
    ) -> StreamTransport:
        """Wrap ``stream`` in TLS and handshake; raises TransportError if that fails."""
        tls = trio.SSLStream(stream, context, server_hostname=server_hostname)
        try:
            await tls.do_handshake()
        except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
            await trio.aclose_forcefully(stream)
            raise TransportError(f"TLS handshake failed: {cause or exc}") from exc
        return cls(tls)

    sends_directly = False

    def try_send(self, data: bytes) -> int:
        """Nothing: a TLS stream only writes from the connection's writer task."""
        return 0

    async def send_all(self, data: bytes) -> None:
        """Send every byte of ``data``."""
        try:
            await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise TransportError(f"connection broken while sending: {_why(exc)}") from exc

    async def receive_some(self) -> bytes:
        """The next bytes received; ``b""`` at end of stream."""
        try:
            return bytes(await self._stream.receive_some(_RECEIVE_SIZE))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise TransportError(f"connection broken while receiving: {_why(exc)}") from exc

    async def aclose(self) -> None:
        """Close the stream without waiting for the peer."""
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self._stream)


def _why(exc: BaseException) -> BaseException:
    # trio.SSLStream wraps the TLS error (a server's alert, say "unknown ca") in an empty
    # BrokenResourceError: the cause is what says what happened.
    return exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc


class WebSocketTransport:
    """NATS over a WebSocket (binary messages carry the same bytes as TCP would)."""

    def __init__(self, connection: trio_websocket.WebSocketConnection) -> None:
        self._ws = connection

    @classmethod
    async def connect(
        cls, nursery: trio.Nursery, host: str, port: int, context: ssl.SSLContext | None
    ) -> WebSocketTransport:
        """Open a WebSocket to ``host:port``; its background tasks live in ``nursery``.

        The TLS handshake (``wss``) is made here, before the WebSocket's: trio-websocket waits
        for its opening handshake forever when the stream under it breaks, so a plain
        listener answering a ClientHello would look like a server that never answers.
        Raises :class:`NotTls` for that listener, TransportError for other failures.
        """
        try:
            stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]
            stream = await trio.open_tcp_stream(host, port)
            if context is not None:
                stream = await _tls_handshake(stream, context, host, port)
            ws = await trio_websocket.wrap_client_stream(
                nursery,
                stream,
                host if port in (80, 443) else f"{host}:{port}",
                "/",
                max_message_size=_MAX_WS_MESSAGE,
                message_queue_size=4,
            )
        except (OSError, trio_websocket.HandshakeError, trio.BrokenResourceError) as exc:
            raise TransportError(f"cannot open a WebSocket: {exc}") from exc
        except trio_websocket.ConnectionClosed as exc:
            raise TransportError(f"the WebSocket closed during its handshake: {exc}") from exc
        return cls(ws)

    sends_directly = False

    def try_send(self, data: bytes) -> int:
        """Nothing: WebSocket messages are only sent from the connection's writer task."""
        return 0

    async def send_all(self, data: bytes) -> None:
        """Send ``data`` as one binary message."""
        try:
            await self._ws.send_message(data)
        except (trio_websocket.ConnectionClosed, trio.BrokenResourceError, OSError) as exc:
            raise TransportError(f"WebSocket broken while sending: {exc}") from exc

    async def receive_some(self) -> bytes:
        """The next message's bytes; ``b""`` once the WebSocket closed."""
        try:
            message = await self._ws.get_message()
        except trio_websocket.ConnectionClosed:
            return b""
        except (trio.BrokenResourceError, OSError) as exc:
            raise TransportError(f"WebSocket broken while receiving: {exc}") from exc
        return message.encode() if isinstance(message, str) else bytes(message)

    async def aclose(self) -> None:
        """Close the WebSocket, waiting at most a moment for the peer's close frame."""
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            try:
                await self._ws.aclose()
            except (trio_websocket.ConnectionClosed, trio.BrokenResourceError, OSError):
                pass


async def _tls_handshake(
    stream: trio.SocketStream, context: ssl.SSLContext, host: str, port: int
) -> trio.SSLStream[trio.SocketStream]:
    tls = trio.SSLStream(stream, context, server_hostname=host, https_compatible=True)
    try:
        await tls.do_handshake()
    except (trio.BrokenResourceError, ssl.SSLError) as exc:
        await trio.aclose_forcefully(stream)
        reason = _not_tls_reason(exc)
        if reason is not None:
            raise NotTls(host, port, reason) from exc
        cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
        raise TransportError(f"cannot open a WebSocket: TLS handshake failed: {cause}") from exc
    return tls
