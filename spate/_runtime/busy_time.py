"""``Config(measure_load=True)``: a split's load is its handler's busy time on the event loop.

A :class:`trio.abc.Instrument` times every step of every task (``before_task_step`` to
``after_task_step``, on the process's performance counter: busy time is real CPU time, not
the Trio clock, which may be virtual). A step of a split's handler task, or of a task it
started (found by walking ``task.parent_nursery.parent_task`` up to a handler task), counts
as that split's work, in seconds. Steps of other tasks (the coordinator's own) count for no
split.

The time is added up per split and reported once per split and flush (every
:data:`FLUSH_EVERY` seconds of the Trio clock, which is what the meters and the presence
renewals run on), so a task stepping thousands of times a second costs a dict update a step,
not a meter update.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import trio

from spate._errors import FatalCoordinationError, Fenced

__all__ = ["FLUSH_EVERY", "BusyTime"]

FLUSH_EVERY = 0.5
"""Seconds (of the Trio clock) between reports of the summed busy times."""


class BusyTime(trio.abc.Instrument):
    """Times handler tasks' steps and reports each split's busy seconds (see the module)."""

    def __init__(self, report: Callable[[str, int, float], None]) -> None:
        """``report(split, fence, seconds)`` counts busy time for a tenancy; it may raise."""
        self._report = report
        self._handlers: dict[trio.lowlevel.Task, tuple[str, int]] = {}
        self._began: dict[trio.lowlevel.Task, float] = {}
        self._pending: dict[tuple[str, int], float] = {}
        self._flushed = -math.inf

    def handler_started(self, task: trio.lowlevel.Task, split: str, fence: int) -> None:
        """``task`` runs the handler of ``split``'s tenancy ``fence``: time it and its children."""
        self._handlers[task] = (split, fence)

    def handler_ended(self, task: trio.lowlevel.Task) -> None:
        """``task`` no longer runs a handler; its unreported time is reported now."""
        self._handlers.pop(task, None)
        self.flush()

    def _owner(self, task: trio.lowlevel.Task) -> tuple[str, int] | None:
        seen: trio.lowlevel.Task | None = task
        while seen is not None:
            owner = self._handlers.get(seen)
            if owner is not None:
                return owner
            nursery = seen.parent_nursery
            seen = None if nursery is None else nursery.parent_task
        return None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began[task] = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        began = self._began.pop(task, None)
        if began is None:
            return
        now = time.perf_counter()
        owner = self._owner(task)
        if owner is not None:
            self._pending[owner] = self._pending.get(owner, 0.0) + (now - began)
        if trio.current_time() - self._flushed >= FLUSH_EVERY:
            self.flush()

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self._began.pop(task, None)

    def flush(self) -> None:
        """Report the busy time summed since the last flush."""
        self._flushed = trio.current_time()
        pending, self._pending = self._pending, {}
        for (split, fence), seconds in pending.items():
            try:
                self._report(split, fence, seconds)
            except (Fenced, FatalCoordinationError):
                pass  # the tenancy (or the coordinator) ended: its time is nobody's load
