"""Regression scenarios: every bug the simulator found, kept as a named scenario forever.

Each scenario pins the *shape* of a bug (a fixed script of actions on a fixed workload), not
the seed that found it, so it keeps meaning the same thing when unrelated changes reshuffle
what a seed draws. The seed that first found each one is named in its docstring.
"""

from __future__ import annotations

from spate.config import Config
from spate_testing.faults import FaultRates
from spate_testing.sim.runner import SeedResult, run_checked
from spate_testing.sim.scenario import Scenario, Scripted
from spate_testing.sim.workload import Workload

SEVEN_SPLITS = Workload(
    batches=(
        (
            ("s00", 3, 1),
            ("s01", 3, 1),
            ("s02", 3, 3),
            ("s03", 2, 3),
            ("s04", 3, 3),
            ("s05", 5, 3),
            ("s06", 1, 2),
        ),
    ),
    poison=frozenset({"s02"}),
    step_seconds=1.0,
)


def run(scenario: Scenario) -> SeedResult:
    result = run_checked(scenario, wall_budget=30)
    return result


def invariants(result: SeedResult) -> set[str]:
    return {v.invariant for v in result.violations}


def test_a_stale_own_lease_does_not_spin_the_claim_loop() -> None:
    """Found by seed 24: a worker cut off for most of a lease comes back while a second
    process under its instance id has rewritten its leases. Each reclaim CAS lost against
    the newer lease revision and was retried at once, without waiting, so the worker spun
    against the store (and simulated time stood still) until its watch caught up."""
    lease = 4.0
    scenario = Scenario(
        seed=24,
        workload=SEVEN_SPLITS,
        initial_workers=1,
        max_workers=4,
        lease=lease,
        config=Config(
            lease_duration=lease,
            max_in_flight=3,
            max_attempts=3,
            replan_interval=3.0,
            reconcile_interval=1.0,
            rebalance_delay=2.0,
            drain_deadline=4.0,
            planner_thread=False,
        ),
        rates=FaultRates(),
        chaos_seconds=20.0,
        script=(
            Scripted(at=2.25, what="partition", target="w0", duration=0.9 * lease),
            Scripted(at=5.3, what="duplicate", target="w0"),
        ),
    )
    result = run(scenario)
    assert "hang" not in invariants(result), result.violations
