"""The job every coordinator test runs, whichever harness runs it: its name, keys, timings, plans.

The synchronous world (:mod:`tests.core.world`) and the Trio harness
(:mod:`tests.runtime.harness`) both take these, so a rule tested machine by machine and end to
end runs the same job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spate import Config, Plan, PlanContext, Planner, SplitSpec
from spate._core.records import Keys

JOB = "job"
KEYS = Keys(JOB)


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
