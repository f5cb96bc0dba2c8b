"""A simulated worker's store session: what the machine reads of it, and its keepalive.

On a SESSION store (etcd), the coordinator opens one session at startup; every ephemeral write
names its lease; a keepalive every third of the TTL keeps it, and with it every key written
under it, alive. :class:`SimSession` models what :class:`spate._runtime.session.SessionSlot`
and the etcd adapter's :class:`~spate_stores.etcd._session.EtcdLeaseSession` do: the same
:class:`~spate._core.host.SessionFacts` for the machine (``session``, ``keeps_keys``,
``starved``), the keepalive with its backoff, the clock's verdict that a lease no keepalive
confirmed for a whole TTL is gone, and a lost session replaced by a new one (a new
session number) at the next heartbeat. Its requests go through the worker's
:class:`~spate_testing.sim._model.Link`, so partitions, freezes and injected unavailability
reach them too.

On a PER_KEY store (memory, NATS) it is a light handle: session 1, nothing kept alive by
it, never lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import outcome

from spate import StoreUnavailable
from spate._core.backoff import REOPEN_BACKOFF, Backoff
from spate.store import SessionLost
from spate_testing.sim._clockwork import Timer
from spate_testing.sim._model import Link

__all__ = ["SimSession"]

logger = logging.getLogger("spate_testing.sim")


class SimSession:
    """One worker's session (see the module docstring)."""

    def __init__(
        self,
        link: Link,
        *,
        keeps_keys: bool,
        ttl: float,
        clock: Callable[[], float],
        later: Callable[[float, Callable[[], None]], Timer],
        guard: Callable[[Callable[[], None]], Callable[[], None]],
    ) -> None:
        self._link = link
        self.keeps_keys = keeps_keys
        self._ttl = ttl
        self._clock = clock
        self._later = later
        self._guard = guard
        self.session = 0 if keeps_keys else 1
        self.lease: int | None = None
        self._lost = False
        self._confirmed_at = 0.0
        self._replacing = False
        # As the etcd adapter: retries start at 50 ms and never wait longer than a beat.
        self._keepalive_backoff = (0.05, ttl / 3)

    # -- what the machine reads ---------------------------------------------------------------

    @property
    def lost(self) -> bool:
        """Whether the lease is gone: etcd said so, or no keepalive was confirmed for a TTL."""
        if (
            self.keeps_keys
            and self.lease is not None
            and not self._lost
            and self._clock() - self._confirmed_at >= self._ttl
        ):
            self._lost = True
        return self._lost

    def starved(self, session: int, now: float, lease: float) -> bool:
        """Whether keys written under session number ``session`` may have expired by ``now``."""
        if self.lease is None or session != self.session or self.lost:
            return True
        return now - self._confirmed_at >= lease

    def lease_for_write(self) -> int | None:
        """The lease an ephemeral write names (raises SessionLost once it is gone)."""
        if not self.keeps_keys:
            return None
        if self.lease is None or self.lost:
            raise SessionLost("the store session is lost; a new one is being opened")
        return self.lease

    # -- opening, keeping, replacing -----------------------------------------------------------

    def open(self, done: Callable[[outcome.Outcome[Any]], None]) -> None:
        """Open the first session (a startup step); ``done`` hears how it went."""
        if not self.keeps_keys:
            done(outcome.Value(None))
            return
        self._grant(done)

    def _grant(self, done: Callable[[outcome.Outcome[Any]], None]) -> None:
        sent = self._clock()

        def granted(result: outcome.Outcome[Any]) -> None:
            if isinstance(result, outcome.Value):
                old = self.lease
                self.lease = result.unwrap()
                self._confirmed_at = sent
                self._lost = False
                self.session += 1
                self._keep_alive(Backoff.of(self._keepalive_backoff))
                if old is not None:
                    # The old lease is dead or dying: revoke it, best effort.
                    self._link.session_call(
                        "revoking", lambda: self._link.model.revoke(old), lambda _: None
                    )
            done(result)

        self._link.session_call("granting a session", self._link.model.grant, self._wrap(granted))

    def _keep_alive(self, backoff: Backoff) -> None:
        lease = self.lease
        if lease is None or self.lost:
            return  # a lost session is replaced at a heartbeat, with a keepalive of its own
        due = self._confirmed_at + self._ttl / 3
        now = self._clock()
        if now < due:
            self._later(due - now, lambda: self._keep_alive(backoff))
            return
        sent = now

        def answered(result: outcome.Outcome[Any]) -> None:
            if self.lease != lease:
                return  # an answer about a lease this session no longer holds
            if isinstance(result, outcome.Error):
                self._later(backoff.delay(), lambda: self._keep_alive(backoff))
                return
            if result.unwrap():
                self._confirmed_at = max(self._confirmed_at, sent)
                backoff.reset()
                self._keep_alive(backoff)
            else:
                self._lost = True  # etcd answered without a TTL: the lease is gone
                logger.warning("%s: the store session lease is lost", self._link.actor)

        self._link.session_call(
            "keepalive", lambda: self._link.model.keepalive(lease), self._wrap(answered)
        )

    def check(self) -> None:
        """Start replacing a lost session (a heartbeat input)."""
        if self.keeps_keys and self.lost and not self._replacing:
            self._replacing = True
            self._replace(Backoff.of(REOPEN_BACKOFF))

    def _replace(self, backoff: Backoff) -> None:
        def done(result: outcome.Outcome[Any]) -> None:
            if isinstance(result, outcome.Error):
                if not isinstance(result.error, StoreUnavailable):
                    result.unwrap()
                self._later(backoff.delay(), lambda: self._replace(backoff))
                return
            self._replacing = False

        self._grant(done)

    def close(self) -> None:
        """End the session as the coordinator stops: its lease is revoked if reachable."""
        lease, self.lease = self.lease, None
        link = self._link
        if lease is not None and not link.partitioned and not link.frozen:
            link.model.revoke(lease)

    def _wrap(
        self, fn: Callable[[outcome.Outcome[Any]], None]
    ) -> Callable[[outcome.Outcome[Any]], None]:
        return lambda result: self._guard(lambda: fn(result))()
