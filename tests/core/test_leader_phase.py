"""The leader's phase: one value, moved only by the rows of its transition table.

The first tests hold the table itself (each row moves the phase as written; any pair it does
not list is refused). The rest drive real machines through each row, in the order a
leadership lives it: follower, electing, fencing, gathering, leading, and back.
"""

from __future__ import annotations

import itertools

import pytest

from spate._core.leader.phase import (
    LEADING_PHASES,
    TRANSITIONS,
    LeaderEvent,
    LeaderPhase,
    LeaderPhases,
)
from spate.store import Keyspace

from .world import KEYS, LEASE, Held, Worker, World, config, leading_now, phase_now

P, E = LeaderPhase, LeaderEvent
EPHEMERAL, DURABLE = Keyspace.EPHEMERAL, Keyspace.DURABLE


@pytest.mark.parametrize(("row", "after"), sorted(TRANSITIONS.items(), key=str))
def test_each_row_of_the_table_moves_the_phase_as_written(
    row: tuple[LeaderPhase, LeaderEvent], after: LeaderPhase
) -> None:
    phases = LeaderPhases()
    phases.phase, event = row
    assert phases.apply(event) is after
    assert phases.phase is after


@pytest.mark.parametrize(
    "row",
    sorted((set(itertools.product(P, E)) - TRANSITIONS.keys()), key=str),
)
def test_a_pair_the_table_does_not_list_is_refused(row: tuple[LeaderPhase, LeaderEvent]) -> None:
    phases = LeaderPhases()
    phases.phase, event = row
    with pytest.raises(RuntimeError, match="cannot take event"):
        phases.apply(event)
    assert phases.phase is row[0]


def test_only_the_phases_that_hold_the_key_lead() -> None:
    phases = LeaderPhases()
    assert phases.phase is P.FOLLOWER
    for phase in P:
        phases.phase = phase
        assert phases.leading is (phase in LEADING_PHASES)
    assert {P.FENCING, P.GATHERING, P.LEADING} == LEADING_PHASES


# -- the rows, lived by a machine ----------------------------------------------------------------


def _a_follower_whose_leader_died(**cfg: float) -> tuple[World, Worker, Held]:
    """A world where ``b`` follows ``a``, ``a`` dies, and ``b``'s create of the key is held."""
    world = World()
    a = world.start("a", cfg=config(**cfg))
    world.run_until(lambda: phase_now(a) is P.LEADING, within=3 * LEASE)
    b = world.start("b", cfg=config(**cfg))
    world.run_for(1.0)
    assert phase_now(b) is P.FOLLOWER
    create = b.hold_next("create", EPHEMERAL, KEYS.leader)
    a.kill()
    world.run_until(lambda: create.arrived, within=3 * LEASE)
    return world, b, create


def test_a_follower_that_sees_no_leader_key_elects_itself() -> None:
    """FOLLOWER --ELECT--> ELECTING, then ELECTING --WON--> FENCING."""
    world, a, create = _a_follower_whose_leader_died()
    assert phase_now(a) is P.ELECTING
    assert not leading_now(a)
    bump = a.hold_next("update", DURABLE, KEYS.plan)
    create.release()
    world.settle()
    assert phase_now(a) is P.FENCING
    assert leading_now(a)  # it holds the key, and writes nothing a leader writes until fenced
    assert bump.arrived
    bump.release()
    world.settle()
    assert phase_now(a) in (P.GATHERING, P.LEADING)


def test_a_lost_election_returns_to_follower() -> None:
    """ELECTING --ELECTION_ENDED--> FOLLOWER (the create failed)."""
    world, a, create = _a_follower_whose_leader_died()
    a.partition()
    create.release()
    world.settle()
    assert phase_now(a) is P.FOLLOWER


def test_the_fence_landing_begins_gathering_and_the_join_window_ending_begins_leading() -> None:
    """FENCING --FENCED--> GATHERING (the election then returns: GATHERING stays), and
    GATHERING --GATHERED--> LEADING once the join window of a new job has passed."""
    world = World()
    a = world.start("a", cfg=config(membership_debounce=2.0))
    world.run_until(lambda: leading_now(a), within=LEASE)
    world.settle()
    assert phase_now(a) is P.GATHERING
    fenced_at = world.now
    world.run_until(lambda: phase_now(a) is P.LEADING, within=LEASE)
    assert world.now >= fenced_at + 2.0
    world.run_until(lambda: bool(a.owned), within=1.0)  # the first assignment went out


def test_a_job_that_has_assignments_already_is_gathered_at_once() -> None:
    """GATHERING --GATHERED--> LEADING with no wait when assignment records exist."""
    world = World()
    a = world.start("a", cfg=config(membership_debounce=2.0))
    world.run_until(lambda: phase_now(a) is P.LEADING and bool(a.owned), within=3 * LEASE)
    a.step_down(resign=True)
    assert phase_now(a) is P.FOLLOWER
    world.run_until(lambda: leading_now(a), within=LEASE)
    world.settle()
    world.run_until(lambda: phase_now(a) is P.LEADING, within=1.0)


def test_a_deposition_while_fencing_leaves_it_deposed_until_its_election_returns() -> None:
    """FENCING --DEMOTED--> DEPOSED; DEPOSED --FENCED--> DEPOSED (a bump sent before the
    deposition lands, and fences nothing); DEPOSED --ELECTION_ENDED--> FOLLOWER."""
    world, a, create = _a_follower_whose_leader_died()
    bump = a.hold_next("update", DURABLE, KEYS.plan)
    create.release()
    world.settle()
    assert bump.arrived
    assert phase_now(a) is P.FENCING
    a.step_down(resign=False)
    assert phase_now(a) is P.DEPOSED
    assert not leading_now(a)
    a.heartbeat()  # its own key is not given back while its election runs
    assert not [op for _, op, _ in a.writes if op == "resign"]
    bump.release()
    world.settle()
    assert phase_now(a) is P.FOLLOWER


def test_a_deposition_while_deposed_or_electing_changes_nothing() -> None:
    """ELECTING --DEMOTED--> ELECTING and DEPOSED --DEMOTED--> DEPOSED."""
    world, a, create = _a_follower_whose_leader_died()
    a.step_down(resign=True)
    assert phase_now(a) is P.ELECTING
    bump = a.hold_next("update", DURABLE, KEYS.plan)
    create.release()
    world.settle()
    assert bump.arrived
    assert phase_now(a) is P.FENCING
    a.step_down(resign=False)
    a.step_down(resign=False)
    assert phase_now(a) is P.DEPOSED
    bump.release()
    world.settle()


def test_a_leader_or_a_gathering_leader_that_steps_down_is_a_follower() -> None:
    """LEADING --DEMOTED--> FOLLOWER, GATHERING --DEMOTED--> FOLLOWER, and
    FOLLOWER --DEMOTED--> FOLLOWER."""
    world = World()
    a = world.start("a")
    world.run_until(lambda: phase_now(a) is P.LEADING, within=LEASE)
    a.step_down(resign=True)
    assert phase_now(a) is P.FOLLOWER
    a.step_down(resign=True)
    assert phase_now(a) is P.FOLLOWER

    world = World()
    b = world.start("b", cfg=config(membership_debounce=2.0))
    world.run_until(lambda: phase_now(b) is P.GATHERING, within=LEASE)
    b.step_down(resign=True)
    assert phase_now(b) is P.FOLLOWER
    world.run_until(lambda: phase_now(b) is P.GATHERING, within=LEASE)  # elected again
