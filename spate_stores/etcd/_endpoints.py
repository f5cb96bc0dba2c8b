"""Endpoint lists: parsing ``h1:2379,h2:2379`` and choosing which member to talk to.

An etcd URL may name several members of one cluster. Every request goes to the *current*
member; when a member cannot be reached (refused, reset, timed out, no leader) the client
moves on to the next one in the list and stays there, like etcd's own client does (it
pins one endpoint and switches only on failure). Which calls may be retried on the next
member at once is decided by the gateway (see ``_gateway.py``): a write whose bytes may
have reached a member is never resent, because it may have landed.
"""

from __future__ import annotations

from spate import ConfigError
from spate_stores._hosts import parse_host_list

__all__ = ["EndpointSet", "parse_host_list"]


class EndpointSet:
    """The members a client may talk to, and which one it uses now.

    Not thread-safe and needs no lock under Trio: every method runs without a checkpoint.
    """

    def __init__(self, endpoints: tuple[str, ...]) -> None:
        if not endpoints:
            raise ConfigError("an endpoint list needs at least one endpoint")
        self._endpoints = endpoints
        self._current = 0
        self.switches = 0
        """How many times the client moved to another member (for tests and telemetry)."""

    @property
    def all(self) -> tuple[str, ...]:
        """Every endpoint, in the configured order."""
        return self._endpoints

    @property
    def current(self) -> str:
        """The endpoint requests go to now."""
        return self._endpoints[self._current]

    def rotation(self) -> list[str]:
        """Every endpoint once, the current one first (the order a failing call tries)."""
        n = len(self._endpoints)
        return [self._endpoints[(self._current + i) % n] for i in range(n)]

    def failed(self, endpoint: str) -> None:
        """``endpoint`` did not answer: move past it (if it is still the current one).

        Concurrent calls that fail on the same member move the client on once, not once
        per call.
        """
        if len(self._endpoints) > 1 and self.current == endpoint:
            self._current = (self._current + 1) % len(self._endpoints)
            self.switches += 1

    def describe(self) -> str:
        """The endpoints for messages: ``http://a:2379, http://b:2379``."""
        return ", ".join(self._endpoints)
