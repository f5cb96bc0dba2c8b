"""What every conformance test shares: the factory type, unique keys, timing, skips, events."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import attrs
import pytest
import trio

from spate.store import (
    Capabilities,
    Conflict,
    EphemeralSemantics,
    Keyspace,
    Store,
    WatchEvent,
    Won,
    WriteResult,
)

__all__ = [
    "INVALID_KEYS",
    "KEYSPACES",
    "NAMESPACE",
    "OTHER_NAMESPACE",
    "StoreFactory",
    "Timing",
    "expect_lost",
    "expect_won",
    "next_event",
    "require_expiry_reaches_watchers",
    "require_semantics",
    "unique_prefix",
]

StoreFactory = Callable[[str], AbstractAsyncContextManager[Store]]
"""``namespace -> async context manager of a new client`` of the store under test.

Clients made with the same namespace within one test share data (like two processes talking to
one server); clients of different namespaces never see each other's keys.
"""

NAMESPACE = "spate-conformance"
"""The namespace most tests use; keys are made unique per test, so it can outlive a run."""
OTHER_NAMESPACE = "spate-conformance-other"
"""A second namespace, for the isolation tests."""

KEYSPACES = pytest.mark.parametrize(
    "keyspace", [Keyspace.DURABLE, Keyspace.EPHEMERAL], ids=["durable", "ephemeral"]
)
"""Parametrize a test over both keyspaces (CAS must be exact in each)."""

INVALID_KEYS = ["", "a/b", "a b", "clé", "tab\tkey", "star*", "new\nline", "colon:key"]
"""Keys outside ``[A-Za-z0-9._-]``; ``/`` is reserved for the store's namespace separator."""

EVENT_TIMEOUT = 10.0
"""Seconds a test waits for a watch event it expects right away (the write already landed)."""


def unique_prefix() -> str:
    """A key prefix no other test (or earlier run against the same server) has used."""
    return f"c{secrets.token_hex(6)}."


@attrs.frozen
class Timing:
    """The deadlines an ephemeral-keyspace test derives from what the store declares.

    Times are measured on the Trio clock from the *start* of a write (the earliest the store
    can have applied it) for "not before" checks, and from its *end* (the latest) for "gone
    by" checks, so the suite is exact under ``MockClock`` and fair on a real server.
    """

    ttl: float
    """The store's ephemeral TTL."""
    slack: float
    """The store's declared ``expiry_slack``."""

    @classmethod
    def of(cls, store: Store) -> Timing:
        """The timing of ``store``, read from its ``ephemeral_ttl`` and capabilities."""
        return cls(store.ephemeral_ttl, store.capabilities.expiry_slack)

    @property
    def margin(self) -> float:
        """How far before the TTL a "still there" check reads, to cover a real read's latency."""
        return 0.2 * self.ttl

    @property
    def grace(self) -> float:
        """Extra time a watch gets to deliver an event due at a deadline.

        Without it a test's own timeout and the store's expiry timer would fire at the same
        instant under MockClock, and which one wins would be an accident of scheduling.
        """
        return 0.05 * self.ttl

    def alive_check_at(self, write_started: float) -> float:
        """When an entry written at ``write_started`` must still exist (per-key and session)."""
        return write_started + self.ttl - self.margin

    def gone_by(self, write_ended: float) -> float:
        """When a per-key entry last written by ``write_ended`` must be gone."""
        return write_ended + self.ttl + self.slack


def require_semantics(capabilities: Capabilities, semantics: EphemeralSemantics) -> None:
    """Skip the calling test unless the store declares ``semantics``, naming what it declares."""
    if capabilities.ephemeral is not semantics:
        pytest.skip(
            f"{capabilities.system} declares ephemeral={capabilities.ephemeral.value!r}; "
            f"this test holds {semantics.value!r} stores to their promise"
        )


def require_expiry_reaches_watchers(capabilities: Capabilities) -> None:
    """Skip the calling test unless expiries reach watchers, naming the capability."""
    if not capabilities.expiry_reaches_watchers:
        pytest.skip(
            f"{capabilities.system} declares expiry_reaches_watchers=False; expiry is "
            "checked through reads instead"
        )


async def next_event(
    events: AsyncIterator[WatchEvent], expected: str, *, deadline: float | None = None
) -> WatchEvent:
    """The next event of a watch; fails the test if none arrives by ``deadline``.

    ``expected`` describes what the test waits for, for the failure message. The default
    deadline is :data:`EVENT_TIMEOUT` from now.
    """
    if deadline is None:
        deadline = trio.current_time() + EVENT_TIMEOUT
    with trio.move_on_at(deadline):
        try:
            return await events.__anext__()
        except StopAsyncIteration:
            raise AssertionError(f"the watch ended while waiting for {expected}") from None
    raise AssertionError(f"no watch event arrived in time; expected {expected}")


def expect_won(result: WriteResult, what: str) -> Won:
    """Return ``result`` if it is Won, else fail saying which write should have won."""
    assert isinstance(result, Won), f"{what}: expected Won(revision), got {result!r}"
    assert isinstance(result.revision, int), f"{what}: revision {result.revision!r} is not an int"
    assert result.revision > 0, f"{what}: revision {result.revision} is not > 0"
    return result


def expect_lost(result: WriteResult, what: str) -> None:
    """Fail unless ``result`` is Conflict, saying which write should have lost."""
    assert isinstance(result, Conflict), f"{what}: expected Conflict, got {result!r}"
