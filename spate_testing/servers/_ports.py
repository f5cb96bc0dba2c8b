"""Free loopback ports and readiness polling shared by the server fixtures."""

from __future__ import annotations

import socket

import trio

__all__ = ["free_port", "wait_for_tcp"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def wait_for_tcp(port: int, *, within: float = 20.0, host: str = "127.0.0.1") -> None:
    """Wait until something accepts TCP connections on ``host:port``.

    Raises TimeoutError if nothing does within ``within`` seconds.
    """
    with trio.move_on_after(within):
        while True:
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError:
                await trio.sleep(0.05)
                continue
            await stream.aclose()
            return
    raise TimeoutError(f"nothing accepted connections on {host}:{port} within {within} s")
