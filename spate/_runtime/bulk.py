"""Bulk work without paying for repeated full garbage collections.

Folding a watch snapshot of a large job, or seeding the records of a large plan, builds
hundreds of thousands of small, long-lived objects. CPython's cyclic collector is triggered by
allocation counts, and its full collections walk the whole heap: while a heap grows by a few
hundred thousand objects, it runs about ten of them, each longer than the last, and none frees
anything, since none of those objects is garbage. At 100,000 splits that was about a quarter of
a joining worker's CPU and a fifth of the planning leader's.

Two scopes, for the two kinds of bulk work:

* :func:`collector_paused` pauses the collector around one *synchronous* call (a snapshot's
  fold). Nothing else of the application runs on the Trio thread meanwhile; other threads
  only see collection deferred for the fold's duration (well under a second per 100,000
  records).
* :class:`Deferral` defers only the *full* collections while bulk work that awaits runs (a
  plan's seeding, from the planner's answer until its records are written and placed), with
  the application's tasks running alongside. Young collections go on as before, so the
  application's short-lived cycles are still reclaimed; only cycles that outlived two young
  collections wait until the bulk work ends (a few seconds per 100,000 records), when the
  thresholds are restored. If the application set thresholds of its own meanwhile, they are
  left as it set them. This relies on CPython's generational collector; a collector that
  ignores the third threshold simply collects as it always does.

Small batches are left alone: under :data:`BULK` records a full collection is cheap.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BULK", "Deferral", "collector_paused"]

BULK = 10_000
"""Records of bulk work from which the collector is paused or its full collections deferred."""

_NEVER = 2**31 - 1
"""A third threshold no count of young collections reaches within one bulk run."""

_deferring = 0
"""Bulk runs now deferring full collections (several coordinators may plan at once)."""

_restore: tuple[tuple[int, ...], tuple[int, ...]] | None = None
"""The thresholds before the first deferring run, and the ones it set."""


@contextmanager
def collector_paused(records: int) -> Iterator[None]:
    """Pause the cyclic garbage collector for a fold of ``records`` records, if it is bulky."""
    if records < BULK or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Deferral:
    """Full collections deferred while a coordinator reports bulk work (a plan's seeding).

    The runtime calls :meth:`hold` after each step of its machine with the records of bulk
    work then in progress, and :meth:`release` when it stops. Coordinators that hold at the
    same time share one deferral: the thresholds are restored when the last one lets go.
    """

    def __init__(self) -> None:
        self._held = False

    def hold(self, records: int) -> None:
        """Defer full collections if ``records`` is bulky; end this deferral if not."""
        if (records >= BULK) != self._held:
            self._held = not self._held
            if self._held:
                _defer()
            else:
                _undefer()

    def release(self) -> None:
        """End this deferral, if any."""
        self.hold(0)


def _defer() -> None:
    global _deferring, _restore
    if _deferring == 0:
        before = gc.get_threshold()
        gc.set_threshold(before[0], before[1], _NEVER)
        _restore = (before, gc.get_threshold())
    _deferring += 1


def _undefer() -> None:
    global _deferring, _restore
    _deferring -= 1
    if _deferring == 0 and _restore is not None:
        before, deferred = _restore
        _restore = None
        if gc.get_threshold() == deferred:
            gc.set_threshold(*before)
