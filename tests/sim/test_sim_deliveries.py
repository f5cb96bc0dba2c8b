"""The foreign-delivery invariant on whole runs.

A correct fleet is delivered only what its roles watch (docs/protocol.md, Who reads what), and
a fleet whose workers watch too much is caught.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from spate import Config
from spate._core.machine import Machine
from spate._core.view.scopes import WatchScope
from spate.store import Keyspace
from spate_testing.faults import FaultRates
from spate_testing.sim._checker import check
from spate_testing.sim._history import Delivered, Leading
from spate_testing.sim._machines import simulate_machines
from spate_testing.sim._scenario import Scenario, Scripted
from spate_testing.sim._workload import Workload

LEASE = 3.0
FLEET = Scenario(
    seed=7,
    workload=Workload(batches=(tuple((f"s{i:02d}", 8, 1) for i in range(6)),), step_seconds=0.5),
    initial_workers=3,
    max_workers=4,
    lease=LEASE,
    # (No split requests: this fleet's handlers never split, and the script is timed to its
    # history without them.)
    config=Config(
        lease_duration=LEASE, planner_thread=False, max_in_flight=3, split_requests=False
    ),
    rates=FaultRates(duplicate_rate=0.05, replay_rate=0.05),
    chaos_seconds=20.0,
    # The first leader stalls past its lease (another leads), a worker joins late, and
    # one is killed: leadership moves and splits change hands.
    script=(
        Scripted(at=6.0, what="freeze", target="w0", duration=2 * LEASE),
        Scripted(at=9.0, what="join"),
        Scripted(at=14.0, what="kill", target="w1"),
    ),
)


def foreign(scenario: Scenario) -> list[str]:
    history = simulate_machines(scenario).history
    assert history.of(Delivered), "nothing was recorded to check"
    assert history.of(Leading), "nobody led"
    return [v.detail for v in check(history) if v.invariant == "foreign-delivery"]


def test_a_correct_fleet_is_delivered_only_what_its_roles_watch() -> None:
    history = simulate_machines(FLEET).history
    assert check(history) == []
    leaders = {e.actor for e in history.of(Leading) if e.leading}
    assert len(leaders) > 1  # leadership moved, so the check saw a leader step down
    assert {e.actor for e in history.of(Delivered)} <= leaders  # followers hear no split


def widened(extra: Callable[[Machine], tuple[WatchScope, ...]]) -> property:
    """``Machine.watches`` with ``extra`` scopes on top, one tuple per wish (no churn)."""
    cache: dict[int, tuple[tuple[WatchScope, ...], tuple[WatchScope, ...]]] = {}

    def watches(self: Machine) -> tuple[WatchScope, ...]:
        wanted = self.scopes.wanted
        held = cache.get(id(self))
        if held is None or held[0] is not wanted:
            more = tuple(s for s in extra(self) if s not in wanted)
            held = cache[id(self)] = (wanted, (*wanted, *more))
        return held[1]

    return property(watches)


def test_a_fleet_watching_the_whole_durable_prefix_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every worker watches the job's durable keyspace, as every worker once did.
    monkeypatch.setattr(
        Machine,
        "watches",
        widened(lambda m: (WatchScope(Keyspace.DURABLE, m.keys.prefix, exact=False),)),
    )
    found = foreign(FLEET)
    assert any("a progress record" in f for f in found), found
    assert any("a spec" in f for f in found), found
    assert any("another instance's assignment record while not leading" in f for f in found)


def test_a_follower_watching_leases_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # Followers watch the leases too.
    monkeypatch.setattr(
        Machine,
        "watches",
        widened(lambda m: (WatchScope(m.view.lease_keyspace, m.view.lease_key(""), exact=False),)),
    )
    # (On a session store, where leases are ephemeral keys that live exactly as long as their
    # session: a follower that watched them could at least not misjudge them.)
    assert FLEET.script is not None
    found = foreign(attrs.evolve(FLEET, sessions=True, script=FLEET.script[:2]))
    assert any("a lease while not leading" in f for f in found), found
    assert not any("progress record" in f for f in found), found
