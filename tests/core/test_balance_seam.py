"""The balance seam: what load a split puts on a worker, and when running splits move.

One function (:func:`spate._core.placement.split_load.split_load`) says what load a split puts on a
worker; placement takes that load as an input (:attr:`Placement.load`), the index and the
reference model alike. One policy object
(:class:`spate._core.leader.rebalance_policy.RebalancePolicy`) decides when running splits move:
after a membership change (past the debounce), when leadership begins, when a hold ends that held a
move back, or on any other trigger that calls
:meth:`~spate._core.leader.rebalance_policy.RebalancePolicy.owe`.
"""

from __future__ import annotations

from collections.abc import Collection
from types import SimpleNamespace
from typing import cast

import pytest

from spate._config import Config
from spate._core.host import Host
from spate._core.leader.phase import LeaderEvent, LeaderPhase, LeaderPhases
from spate._core.leader.rebalance_policy import JOIN_WINDOWS, RebalancePolicy
from spate._core.placement.index import PlacementIndex, solve_placement
from spate._core.placement.split_load import split_load
from spate._core.placement.vocabulary import Placement, Worker
from spate_testing._placement_model import place

# -- what load a split puts on a worker ----------------------------------------------------------


@pytest.mark.parametrize(("weight", "load"), [(-3, 1), (0, 1), (1, 1), (2, 2), (40, 40)])
def test_a_splits_load_is_its_weight_and_at_least_one(weight: int, load: int) -> None:
    assert split_load(weight) == load


def test_a_placement_carries_the_load_of_its_weight_unless_given_another() -> None:
    assert Placement(0, None).load == 1
    assert Placement(7, "a").load == 7
    assert Placement(1, "a", "", 9).load == 9
    assert Placement(1, "a", load=9) != Placement(1, "a")


def test_the_index_and_the_reference_model_balance_by_the_load_they_are_given() -> None:
    # Four splits of weight 1; s0 is given a load of 3. Balanced by load, s0 goes alone.
    workers = {"a": Worker(4), "b": Worker(4)}
    splits = {f"s{n}": Placement(1, None, load=3 if n == 0 else 1) for n in range(4)}
    answer = solve_placement(workers, splits, default_cap=4, seed=1)
    assert answer == place(workers, splits, default_cap=4, seed=1)
    alone = next(m for m, placed in answer.items() if "s0" in placed)
    assert answer[alone] == ("s0",)
    # By weight alone the two workers would take two each.
    by_weight = {s: Placement(1, None) for s in splits}
    assert sorted(
        len(v) for v in solve_placement(workers, by_weight, default_cap=4, seed=1).values()
    ) == [2, 2]


# -- when running splits move --------------------------------------------------------------------


class _Index:
    """What the policy tells placement, recorded."""

    def __init__(self, moves: set[str] | None = None, held_back: bool = False) -> None:
        self.rebalance: bool | None = None
        self.held: frozenset[str] | None = None
        self._moves = moves or set()
        self._held_back = held_back

    def set_rebalance(self, allowed: bool) -> None:
        self.rebalance = allowed

    def set_held(self, splits: Collection[str]) -> None:
        self.held = frozenset(splits)

    def moves_running(self) -> set[str]:
        return set(self._moves)

    def held_back(self) -> bool:
        return self._held_back


def _policy(*, debounce: float = 2.0, drain: float = 3.0) -> tuple[RebalancePolicy, LeaderPhases]:
    config = Config(membership_debounce=debounce, drain_deadline=drain)
    view = SimpleNamespace(splits={}, presence={}, assignments={})
    phases = LeaderPhases()
    return RebalancePolicy(cast(Host, SimpleNamespace(config=config, view=view)), phases), phases


def _decide(policy: RebalancePolicy, now: float, index: _Index | None = None) -> bool:
    index = index or _Index()
    debouncing = policy.debouncing(now)
    allowed = policy.decide(cast(PlacementIndex, index), now, debouncing=debouncing)
    assert index.rebalance is allowed
    if allowed:
        policy.rebalanced(cast(PlacementIndex, index))
    return allowed


def _leading(policy: RebalancePolicy, phases: LeaderPhases, now: float = 0.0) -> None:
    phases.phase = LeaderPhase.FENCING
    phases.apply(LeaderEvent.FENCED)
    policy.began_leading(now)


def test_a_new_leadership_owes_one_rebalance_and_then_none() -> None:
    policy, phases = _policy()
    _leading(policy, phases)
    assert _decide(policy, 1.0)
    assert not _decide(policy, 1.1)  # claims, completions and hand-backs move no running split


def test_a_membership_change_owes_a_rebalance_after_the_debounce() -> None:
    policy, phases = _policy(debounce=2.0)
    _leading(policy, phases)
    _decide(policy, 0.5)
    policy.membership_changed(1.0)
    assert policy.debouncing(2.9)
    assert not _decide(policy, 2.9)  # the debounce hands out unowned splits only
    assert not policy.debouncing(3.0)
    assert _decide(policy, 3.0)
    assert not _decide(policy, 3.1)


def test_another_trigger_owes_a_rebalance_without_a_membership_change() -> None:
    policy, phases = _policy()
    _leading(policy, phases)
    _decide(policy, 0.5)
    assert not _decide(policy, 1.0)
    policy.owe()  # say, measured load drifting out of its band
    assert _decide(policy, 1.0)


def test_a_rebalance_that_could_not_finish_is_carried_on() -> None:
    policy, phases = _policy()
    _leading(policy, phases)
    _decide(policy, 0.5)
    policy.unfinished()
    assert _decide(policy, 0.6)


def test_the_join_window_gathers_a_new_jobs_fleet_up_to_its_bound() -> None:
    policy, phases = _policy(debounce=2.0)
    _leading(policy, phases, now=10.0)
    assert policy.gathering(11.0)
    for t in (11.0, 12.5, 14.0, 15.5):  # a steady trickle of joins
        policy.membership_changed(t)
    assert policy.gathering(15.9)
    assert not policy.gathering(10.0 + JOIN_WINDOWS * 2.0)  # never past JOIN_WINDOWS windows
    assert phases.phase is LeaderPhase.LEADING


def test_a_moved_split_is_held_a_drain_window_and_its_end_owes_what_it_held_back() -> None:
    policy, phases = _policy(debounce=0.0, drain=3.0)
    _leading(policy, phases)
    index = _Index(moves={"s1"}, held_back=False)
    assert _decide(policy, 1.0, index)
    policy.hold({"s1"}, ("s1", "s2"), 1.0, "b")
    policy.membership_changed(2.0)  # a second join, inside s1's window
    index = _Index(held_back=True)
    assert _decide(policy, 2.0, index)
    assert index.held == frozenset({"s1"})  # the other splits still serve the new worker
    policy.wake_for_holds(2.0)
    assert not policy.wake(3.9)
    assert policy.wake(4.0)  # the window ends: look again
    assert _decide(policy, 4.0)  # the rebalance the hold kept back
