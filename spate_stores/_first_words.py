"""What a server says first: how a store tells a wrong port from a hung or absent server.

A store whose first request to a server failed without an answer it understands asks the port
once more, on a connection of its own, what it speaks: a NATS client port greets with ``INFO``
at once; an HTTP server (etcd's gateway, nats-server's monitoring port, a WebSocket listener)
says nothing until asked, then answers a request with a status line; a hung server says
nothing at all. The adapters word what that means for their own URLs.
"""

from __future__ import annotations

import trio

__all__ = ["first_words"]


async def first_words(host: str, port: int, patience: float) -> bytes | None:
    """The first line a server at ``host:port`` says, unprompted or to an HTTP request.

    Waits half of ``patience`` for a greeting, then sends ``GET /`` and waits the rest for an
    answer. Returns at most 120 bytes of the first line; None when nothing came within
    ``patience`` seconds (a hung server, or none at all) or the connection failed.
    """
    with trio.move_on_after(patience):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            return None
        async with stream:
            try:
                with trio.move_on_after(patience / 2):
                    return _first_line(await stream.receive_some(1024))
                await stream.send_all(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                return _first_line(await stream.receive_some(1024))
            except (trio.BrokenResourceError, OSError):
                return None
    return None


def _first_line(data: bytes) -> bytes | None:
    return data.split(b"\r\n", 1)[0][:120] or None
