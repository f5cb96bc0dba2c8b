"""The job every coordinator test runs, whichever harness runs it: its name, keys, timings, plans.

The synchronous world (:mod:`tests.core.world`) and the Trio harness
(:mod:`tests.runtime.harness`) both take these, so a rule tested machine by machine and end to
end runs the same job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from spate import Config, Event, Plan, PlanContext, Planner, SplitSpec
from spate._core.records import Keys

JOB = "job"
KEYS = Keys(JOB)

_E = TypeVar("_E", bound=Event)


def config(**overrides: Any) -> Config:
    """Test timings: short intervals, no rebalance delay or debounce, inline planners.

    (A planner thread would race the mock clock.)
    """
    base: dict[str, Any] = {
        "op_timeout": 1.0,
        "max_in_flight": 8,
        "reconcile_interval": 5.0,
        "replan_interval": 10.0,
        "rebalance_delay": 0.0,
        # No join window or debounce: a lone test worker's job is placed at once (the join
        # window and the debounce have tests of their own that set them).
        "membership_debounce": 0.0,
        "drain_deadline": 3.0,
        "planner_thread": False,
        # No split requests: a test fleet with spare lanes would otherwise be asked to split
        # its splits (assignment rewrites and reads of their own); the splitting tests, in
        # tests/worker/test_splitting.py, turn them on.
        "split_requests": False,
    }
    base.update(overrides)
    return Config(**base)


def planner_of(
    count: int, *, final: bool = True, weight: Callable[[int], int] = lambda i: 1
) -> Planner:
    """A planner of ``count`` splits named s00, s01, ... (descriptor ``d<i>``)."""

    def plan(ctx: PlanContext) -> Plan:
        return Plan(
            [SplitSpec(f"s{i:02d}", f"d{i}".encode(), weight(i)) for i in range(count)],
            final=final,
        )

    return plan


class EventLog:
    """The events a test worker emitted and when: both harnesses' workers keep one."""

    events: list[Event]
    times: list[float]

    def of(self, kind: type[_E], split: str | None = None) -> list[_E]:
        """The events of ``kind`` emitted so far (about ``split``, if given)."""
        return [
            e
            for e in self.events
            if isinstance(e, kind) and (split is None or getattr(e, "split", None) == split)
        ]

    def time_of(self, event: Event) -> float:
        """When ``event`` was emitted."""
        return self.times[self.events.index(event)]
