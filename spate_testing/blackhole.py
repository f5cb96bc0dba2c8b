"""A TCP proxy that can cut a client off from its server the way a network partition does.

Put it between one store client and a real server (:func:`open_blackhole`, then
:meth:`BlackholeProxy.url_for` to point a store URL at it) and call :meth:`~BlackholeProxy.cut`:
bytes stop flowing both ways, and nothing is reset or closed — the client's requests and the
server's answers sit in the proxy (and, once its small buffer is full, in the kernel's) exactly
as unacknowledged segments sit in TCP retransmission queues during a partition. Connections
made during the cut are accepted but reach nothing. Keepalives, pings and requests time out
on the client's own clock, as they would in production; a server that has stopped hearing from
the client expires its sessions on its own.

:meth:`~BlackholeProxy.heal` lets everything flow again, held bytes first: a request the client
gave up on during the cut reaches the server after the heal, which is the late write fencing
exists for. A closed end is passed on only after the heal, too (a FIN is a segment like any
other).

Example::

    async with open_blackhole("127.0.0.1", server.client_port) as proxy:
        async with EtcdStore.from_url(proxy.url_for(server.store_url("job"))) as store:
            ...
            proxy.cut()
            ...
            proxy.heal()
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from urllib.parse import urlsplit, urlunsplit

import trio

__all__ = ["BlackholeProxy", "open_blackhole"]

logger = logging.getLogger("spate_testing.blackhole")

CHUNK = 64 * 1024
"""Bytes read from one side at a time (at most this much is held per direction in a cut)."""


class BlackholeProxy:
    """Forwards TCP connections from a loopback port to a target until :meth:`cut`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        """The loopback port clients connect to (set once the proxy listens)."""
        self._open = trio.Event()
        self._open.set()
        self.cuts = 0
        """How many times the link was cut."""

    def cut(self) -> None:
        """Stop every byte both ways (and new connections from reaching the target)."""
        if self._open.is_set():
            self._open = trio.Event()
            self.cuts += 1

    def heal(self) -> None:
        """Let held and new bytes flow again."""
        self._open.set()

    def url_for(self, url: str) -> str:
        """``url`` with its host and port replaced by this proxy's (scheme, query kept)."""
        parts = urlsplit(url)
        userinfo, _, _ = parts.netloc.rpartition("@")
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{self.port}"))

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while True:
                data = await source.receive_some(CHUNK)
                # Read first, then wait: what was read during a cut is held, not dropped,
                # and the next read waits, so the kernel buffers fill and TCP pushes back.
                await self._open.wait()
                if not data:
                    await sink.send_eof()
                    return
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return

    async def _serve(self, client: trio.SocketStream) -> None:
        async with client:
            await self._open.wait()
            try:
                upstream = await trio.open_tcp_stream(self.target_host, self.target_port)
            except OSError as exc:
                logger.info("blackhole proxy could not reach its target: %s", exc)
                return
            async with upstream, trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, upstream)
                nursery.start_soon(self._pump, upstream, client)


@asynccontextmanager
async def open_blackhole(target_host: str, target_port: int) -> AsyncIterator[BlackholeProxy]:
    """Run a :class:`BlackholeProxy` to ``target_host:target_port`` for the block's duration."""
    proxy = BlackholeProxy(target_host, target_port)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, host="127.0.0.1"), proxy._serve, 0)
        proxy.port = listeners[0].socket.getsockname()[1]
        try:
            yield proxy
        finally:
            proxy.heal()
            nursery.cancel_scope.cancel()
