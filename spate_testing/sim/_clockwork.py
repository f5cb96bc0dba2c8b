"""A discrete-event scheduler: the one clock and the one order of a machine-level simulation.

The machine-level simulator (:mod:`spate_testing.sim._machines`) runs no event loop of anyone
else's. Every timer, store reply and watch delivery of every simulated worker is a callback
in one heap, ordered by its due time and, among callbacks due at the same instant, by the
order they were scheduled in. Nothing else decides what runs next, so a run is a pure
function of what was scheduled: two runs of one seed take the same path, callback for
callback, in any process.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable

import attrs

__all__ = ["Scheduler", "Timer"]


@attrs.define(eq=False)
class Timer:
    """One scheduled callback; :meth:`cancel` keeps it from running."""

    due: float
    fn: Callable[[], None] | None

    def cancel(self) -> None:
        """Drop the callback (a no-op once it ran)."""
        self.fn = None

    @property
    def pending(self) -> bool:
        """Whether the callback is still to run."""
        return self.fn is not None


class Scheduler:
    """Callbacks by due time, ties in scheduling order; time jumps from one to the next."""

    def __init__(self) -> None:
        self._now = 0.0
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self.ran = 0
        """Callbacks run so far (a measure of a run's size)."""

    def now(self) -> float:
        """The simulated time, in seconds since the run began."""
        return self._now

    def at(self, due: float, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` at ``due`` (at once, after what is already due now, if it has passed)."""
        timer = Timer(max(due, self._now), fn)
        heapq.heappush(self._heap, (timer.due, next(self._order), timer))
        return timer

    def later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` ``delay`` seconds from now."""
        return self.at(self._now + delay, fn)

    def soon(self, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` at the current instant, after everything already due."""
        return self.at(self._now, fn)

    def next_due(self) -> float:
        """When the next pending callback is due (inf when none is)."""
        while self._heap and self._heap[0][2].fn is None:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else math.inf

    def run_until(self, deadline: float, done: Callable[[], bool] | None = None) -> bool:
        """Run callbacks due by ``deadline``; stop early once ``done()`` is true.

        Returns whether ``done`` stopped the run. Time ends at ``deadline`` otherwise (or at
        the last callback, when nothing more is due before it).
        """
        while True:
            if done is not None and done():
                return True
            due = self.next_due()
            if due > deadline:
                if deadline < math.inf:
                    self._now = max(self._now, deadline)
                return False
            _, _, timer = heapq.heappop(self._heap)
            fn, timer.fn = timer.fn, None
            self._now = due
            assert fn is not None
            self.ran += 1
            fn()
