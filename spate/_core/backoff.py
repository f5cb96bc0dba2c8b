"""Capped exponential backoff: the one schedule every retry in spate follows.

Startup steps, re-opening a broken watch, replacing a lost session, waiting for a handed-back
split to be owned elsewhere and re-running a failed planner all retry the same way: a first
delay, doubled after every failure up to a cap, back to the first after a success. The
schedule is pure (it only answers "how long now?"), so the machine uses it with its injected
clock and the runtime sleeps it with Trio.
"""

from __future__ import annotations

import attrs

__all__ = [
    "IDLE_BACKOFF",
    "REOPEN_BACKOFF",
    "RETRY_BACKOFF",
    "REWATCH_BACKOFF",
    "STARTUP_BACKOFF",
    "Backoff",
]

STARTUP_BACKOFF = (0.2, 5.0)
"""First and largest delay between tries of a startup step."""
REWATCH_BACKOFF = (0.2, 5.0)
"""First and largest delay before re-establishing a broken watch."""
REOPEN_BACKOFF = (0.2, 5.0)
"""First and largest delay between tries to open a replacement for a lost session."""
RETRY_BACKOFF = (0.05, 2.0)
"""First and largest delay before a handler's call to an unreachable store is tried again."""
IDLE_BACKOFF = (1.0, 60.0)
"""First and largest delay before a handler that returned without completing runs again."""


@attrs.define
class Backoff:
    """Delays of ``first``, then doubling, never above ``cap``; :meth:`reset` after a success."""

    first: float
    cap: float
    _next: float = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if not 0 < self.first <= self.cap:
            raise ValueError(f"backoff needs 0 < first <= cap, got {self.first} and {self.cap}")
        self._next = self.first

    @classmethod
    def of(cls, bounds: tuple[float, float]) -> Backoff:
        """A schedule from a ``(first, cap)`` pair, the way spate's constants spell them."""
        return cls(*bounds)

    def delay(self) -> float:
        """The delay to wait now; the next one doubles (up to the cap)."""
        current = self._next
        self._next = min(self.cap, current * 2)
        return current

    def reset(self) -> None:
        """Start again from the first delay (the thing retried just succeeded)."""
        self._next = self.first
