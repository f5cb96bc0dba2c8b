"""The servers a NATS client may connect to: the configured ones, then those a cluster advertises.

A NATS cluster tells each client, in INFO (``connect_urls``, or ``ws_connect_urls`` for
WebSocket clients), where its other servers listen, and updates that list as servers join.
The pool keeps the configured servers first and adds every advertised one it has not seen;
a connection that fails or breaks moves the client on to the next server in the pool, the way
nats.go does, so a client given one address still finds the rest of the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ServerPool"]


def _address(text: str) -> tuple[str, int] | None:
    """``host:port`` (optionally with a scheme) as ``(host, port)``, or None if unreadable."""
    text = text.strip().rpartition("://")[2].rstrip("/")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = text.rpartition(":")
    if not host or not port_text.isdigit():
        return None
    return host, int(port_text)


class ServerPool:
    """Addresses to connect to, in order, and which one is next."""

    def __init__(self, configured: Iterable[tuple[str, int]]) -> None:
        self._servers = list(dict.fromkeys(configured))
        if not self._servers:
            raise ValueError("a server pool needs at least one server")
        self._current = 0
        self.learned = 0
        """How many servers were added from the cluster's INFO (for tests and telemetry)."""

    def __len__(self) -> int:
        return len(self._servers)

    @property
    def servers(self) -> tuple[tuple[str, int], ...]:
        """Every known server, configured ones first."""
        return tuple(self._servers)

    @property
    def current(self) -> tuple[str, int]:
        """The server the next connection attempt goes to."""
        return self._servers[self._current]

    def advance(self) -> None:
        """Move on to the next server (after a failed or broken connection)."""
        self._current = (self._current + 1) % len(self._servers)

    def learn(self, urls: object) -> None:
        """Add the servers a cluster advertises (INFO ``connect_urls``) not yet known."""
        if not isinstance(urls, list):
            return
        for url in urls:
            address = _address(str(url))
            if address is not None and address not in self._servers:
                self._servers.append(address)
                self.learned += 1

    @staticmethod
    def describe(servers: Iterable[tuple[str, int]]) -> str:
        """``a:4222, b:4222`` for messages."""
        return ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in servers)
