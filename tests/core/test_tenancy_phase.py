"""A split's phase on a worker (and its drain): one value, moved only by the rows of a table.

The first tests hold the tables themselves: every phase is reachable and can end, each row
moves the phase (and the indexes with it) as written, any pair a table does not list is
refused. The rest drive real machines, and the simulator's seeds, with the indexes checked
against the phases after every move.
"""

from __future__ import annotations

import collections
import itertools

import pytest

from spate import Event, Gained, Lost, Progress, RevokeRequested
from spate._core.tenancy.phase import (
    BUSY_PHASES,
    CLAIM_PHASES,
    DRAIN_TRANSITIONS,
    DRAINING,
    HELD_PHASES,
    TRANSITIONS,
    DrainEvent,
    DrainPhase,
    DrainPhases,
    SplitEvent,
    SplitPhase,
    SplitPhases,
)
from spate_testing.sim._runner import run_seed

from .world import LEASE, Worker, World, cooperative, planner_of

P, E = SplitPhase, SplitEvent
D, DE = DrainPhase, DrainEvent


def _paths() -> dict[SplitPhase, tuple[SplitEvent, ...]]:
    """For each phase the table reaches from FREE, the shortest events that reach it."""
    paths: dict[SplitPhase, tuple[SplitEvent, ...]] = {P.FREE: ()}
    queue = collections.deque([P.FREE])
    while queue:
        phase = queue.popleft()
        for (before, event), after in TRANSITIONS.items():
            if before is phase and after not in paths:
                paths[after] = (*paths[phase], event)
                queue.append(after)
    return paths


def _driven_to(phase: SplitPhase) -> SplitPhases[object]:
    phases: SplitPhases[object] = SplitPhases()
    for event in _paths()[phase]:
        phases.move("s", event, object() if event is E.WON else None)
    assert phases.phase_of("s") is phase
    phases.check()
    return phases


def test_every_phase_is_reachable_and_every_phase_can_come_free() -> None:
    assert set(_paths()) == set(P)
    free = {P.FREE}
    while True:
        more = {before for (before, _), after in TRANSITIONS.items() if after in free}
        if more <= free:
            break
        free |= more
    assert free == set(P)


def test_every_drain_is_reachable_and_every_drain_can_end() -> None:
    reached, ends = {D.NONE}, {D.NONE}
    for _ in D:
        reached |= {after for (before, _), after in DRAIN_TRANSITIONS.items() if before in reached}
        ends |= {before for (before, _), after in DRAIN_TRANSITIONS.items() if after in ends}
    assert reached == ends == set(D)


def test_the_indexes_name_phases_of_the_table() -> None:
    assert CLAIM_PHASES <= BUSY_PHASES
    assert P.FREE not in HELD_PHASES | BUSY_PHASES
    # Only WON begins a tenancy (it alone brings the tenancy's record).
    begins = {row for row, after in TRANSITIONS.items() if after in HELD_PHASES}
    assert {event for (before, event) in begins if before not in HELD_PHASES} == {E.WON}


@pytest.mark.parametrize(("row", "after"), sorted(TRANSITIONS.items(), key=str))
def test_each_row_of_the_table_moves_the_phase_and_its_indexes_as_written(
    row: tuple[SplitPhase, SplitEvent], after: SplitPhase
) -> None:
    before, event = row
    phases = _driven_to(before)
    held = phases.owned.get("s")
    tenancy = object()
    assert phases.move("s", event, tenancy if event is E.WON else None) is after
    assert phases.phase_of("s") is after
    phases.check()
    assert ("s" in phases.owned) is (after in HELD_PHASES)
    assert ("s" in phases.busy) is (after in BUSY_PHASES)
    assert phases.claiming == int(after in CLAIM_PHASES)
    if after in HELD_PHASES:
        # The tenancy is the one its WON brought, kept while it lasts.
        assert phases.owned["s"] is (tenancy if event is E.WON else held)


@pytest.mark.parametrize(
    "row", sorted((set(itertools.product(P, E)) - TRANSITIONS.keys()), key=str)
)
def test_a_pair_the_table_does_not_list_is_refused(row: tuple[SplitPhase, SplitEvent]) -> None:
    before, event = row
    phases = _driven_to(before)
    with pytest.raises(RuntimeError, match="cannot take event"):
        phases.move("s", event, object())
    assert phases.phase_of("s") is before
    phases.check()


def _drained_to(drain: DrainPhase) -> DrainPhases[object]:
    drains: DrainPhases[object] = DrainPhases()
    for event in {
        D.NONE: (),
        D.REVOKING: (DE.REQUEST,),
        D.CANCELLED: (DE.REQUEST, DE.CANCEL),
        D.FORCING: (DE.REQUEST, DE.FORCE),
    }[drain]:
        drains.move("s", event, object())
    assert drains.drain_of("s") is drain
    drains.check()
    return drains


@pytest.mark.parametrize(("row", "after"), sorted(DRAIN_TRANSITIONS.items(), key=str))
def test_each_row_of_the_drain_table_moves_the_drain_and_its_indexes_as_written(
    row: tuple[DrainPhase, DrainEvent], after: DrainPhase
) -> None:
    before, event = row
    drains = _drained_to(before)
    opened = drains.revoking.get("s")
    entry = object()
    assert drains.move("s", event, entry) is after
    assert drains.drain_of("s") is after
    drains.check()
    assert ("s" in drains.forcing) is (after is D.FORCING)
    if after in DRAINING:
        # A revocation keeps the clocks it opened with (asked back again, its clock runs on).
        assert drains.revoking["s"] is (entry if before not in DRAINING else opened)
    else:
        assert "s" not in drains.revoking


@pytest.mark.parametrize(
    "row", sorted((set(itertools.product(D, DE)) - DRAIN_TRANSITIONS.keys()), key=str)
)
def test_a_pair_the_drain_table_does_not_list_is_refused(
    row: tuple[DrainPhase, DrainEvent],
) -> None:
    before, event = row
    drains = _drained_to(before)
    with pytest.raises(RuntimeError, match="cannot take event"):
        drains.move("s", event, object())
    assert drains.drain_of("s") is before
    drains.check()


def test_ending_a_tenancy_not_held_changes_nothing() -> None:
    phases = _driven_to(P.BUSY)
    assert phases.end("s") is None
    assert phases.phase_of("s") is P.BUSY
    held = _driven_to(P.HELD)
    tenancy = held.owned["s"]
    assert held.end("s") is tenancy
    assert held.phase_of("s") is P.FREE
    held.check()


# -- the indexes over real runs ------------------------------------------------------------------


@pytest.fixture
def lived(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[tuple[SplitPhase, SplitEvent]]:
    """Check every machine's indexes after every move; count the rows the run lived."""
    rows: collections.Counter[tuple[SplitPhase, SplitEvent]] = collections.Counter()
    move = SplitPhases.move

    def checked(
        self: SplitPhases[object], split: str, event: SplitEvent, tenancy: object | None = None
    ) -> SplitPhase:
        before = self.phase_of(split)
        after = move(self, split, event, tenancy)
        self.check()
        rows[before, event] += 1
        return after

    monkeypatch.setattr(SplitPhases, "move", checked)
    return rows


@pytest.fixture
def drained(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[tuple[DrainPhase, DrainEvent]]:
    """Check every machine's drain indexes after every move; count the rows the run lived."""
    rows: collections.Counter[tuple[DrainPhase, DrainEvent]] = collections.Counter()
    move = DrainPhases.move

    def checked(
        self: DrainPhases[object], split: str, event: DrainEvent, entry: object | None = None
    ) -> DrainPhase:
        before = self.drain_of(split)
        after = move(self, split, event, entry)
        self.check()
        rows[before, event] += 1
        return after

    monkeypatch.setattr(DrainPhases, "move", checked)
    return rows


def _phase(worker: Worker, split: str) -> SplitPhase:
    return worker.machine._tenancies.phases.phase_of(split)


def test_a_claim_is_claiming_until_its_record_lands_then_held(
    lived: collections.Counter[tuple[SplitPhase, SplitEvent]],
) -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    claim = a.hold_next("create", *a.lease_key("s00"))
    world.run_until(lambda: claim.arrived, within=3 * LEASE)
    assert _phase(a, "s00") is P.CLAIMING
    assert a.machine._claims.claiming == 1
    claim.release()
    world.run_until(lambda: bool(a.owned), within=LEASE)
    world.settle()
    assert _phase(a, "s00") is P.HELD
    assert a.machine._claims.claiming == 0
    assert lived[P.CLAIMING, E.WON] == 1
    assert lived[P.CLAIMED, E.CLAIM_RETURNED] == 1


def test_hand_backs_fails_completions_and_a_departure_keep_the_indexes_in_step(
    lived: collections.Counter[tuple[SplitPhase, SplitEvent]],
) -> None:
    world = World()
    a = world.start("a", planner=planner_of(6), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 6, within=3 * LEASE)
    b = world.start("b", planner=planner_of(6), on_event=cooperative)
    world.run_until(lambda: len(b.owned) == 3, within=3 * LEASE)  # a handed three back
    first, second, *rest = sorted(a.owned)
    world.wait(a.fail(first, "poison"))  # (still assigned here: it is claimed again)
    world.wait(a.commit(second, Progress(100, completed=True)))
    assert _phase(a, second) is P.FREE
    world.wait(a.depart())
    assert all(_phase(a, split) is P.FREE for split in rest)
    assert not a.machine._tenancies.busy
    world.run_until(lambda: len(b.owned) == 4, within=3 * LEASE)
    assert {(P.HELD, E.FLOW), (P.HANDING_BACK, E.ENDED), (P.BUSY, E.FLOW)} <= set(lived)


def test_a_takeover_after_a_kill_keeps_the_indexes_in_step(
    lived: collections.Counter[tuple[SplitPhase, SplitEvent]],
) -> None:
    world = World()
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 4, within=3 * LEASE)
    b = world.start("b", planner=planner_of(4))
    world.run_until(lambda: len(b.owned) == 2, within=3 * LEASE)
    a.kill()
    world.run_until(lambda: len(b.owned) == 4, within=6 * LEASE)
    assert len(b.of(Gained)) == 4
    assert all(_phase(b, split) is P.HELD for split in b.owned)


def _drain(worker: Worker, split: str) -> DrainPhase:
    return worker.machine._revocations._phases.drain_of(split)


def test_a_revocation_drained_and_one_forced_at_its_deadline(
    drained: collections.Counter[tuple[DrainPhase, DrainEvent]],
) -> None:
    world = World()
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 4)
    b = world.start("b", planner=planner_of(4))
    world.run_until(lambda: len(b.owned) == 2)
    assert drained == {(D.NONE, DE.REQUEST): 2, (D.REVOKING, DE.SETTLE): 2}
    assert all(_drain(a, split) is D.NONE for split in ("s00", "s01", "s02", "s03"))
    # A handler that drains nothing: its revocation is forced at the deadline.
    world = World()
    a = world.start("a", planner=planner_of(2))
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2))
    world.run_until(lambda: bool(a.of(RevokeRequested)))
    (request,) = a.of(RevokeRequested)
    assert _drain(a, request.split) is D.REVOKING
    world.run_until(lambda: bool(a.of(Lost, request.split)))
    assert _drain(a, request.split) is D.NONE
    assert drained[D.REVOKING, DE.FORCE] == drained[D.FORCING, DE.FORCED] == 1
    world.run_until(lambda: bool(b.of(Gained, request.split)), within=1)


def _declining(worker: Worker, event: Event) -> None:
    if isinstance(event, RevokeRequested):
        worker.decline_revoke(event.split)


def test_a_cancelled_revocation_is_kept_when_declined_and_forced_by_silence_otherwise(
    drained: collections.Counter[tuple[DrainPhase, DrainEvent]],
) -> None:
    world = World()
    a = world.start("a", planner=planner_of(2))
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2))
    world.run_until(lambda: bool(a.of(RevokeRequested)))
    (request,) = a.of(RevokeRequested)
    assert _drain(a, request.split) is D.REVOKING
    world.wait(b.depart())  # the leader names the split for a again
    world.run_until(lambda: _drain(a, request.split) is D.CANCELLED, within=1)
    # Silence for a whole drain deadline forces it (and a claims it back afresh).
    world.run_until(lambda: bool(a.of(Lost, request.split)), within=4)
    assert drained[D.CANCELLED, DE.FORCE] == 1
    world.run_until(lambda: len(a.of(Gained, request.split)) == 2, within=1)
    # Asked back once more, cancelled once more, then declined: the drain is kept.
    b = world.start("b", planner=planner_of(2))
    world.run_until(lambda: len(a.of(RevokeRequested)) == 2, within=3 * LEASE)
    (_, again) = a.of(RevokeRequested)
    world.wait(b.depart())
    world.run_until(lambda: _drain(a, again.split) is D.CANCELLED, within=1)
    a.decline_revoke(again.split)
    assert _drain(a, again.split) is D.NONE
    assert drained[D.CANCELLED, DE.KEEP] == 1


def test_the_indexes_agree_with_the_phases_over_simulated_seeds(
    lived: collections.Counter[tuple[SplitPhase, SplitEvent]],
    drained: collections.Counter[tuple[DrainPhase, DrainEvent]],
) -> None:
    for seed in range(12):
        result = run_seed(seed, engine="machines", wall_budget=60)
        assert not result.violations, (seed, result.violations)
    # The rows every run lives (the rest are the rare ones: a departure abandoned half-way, a
    # claim lost before its flow returned).
    common = {
        (P.FREE, E.CLAIM), (P.FREE, E.FLOW), (P.CLAIMING, E.WON),
        (P.CLAIMING, E.CLAIM_RETURNED), (P.CLAIMED, E.CLAIM_RETURNED),
        (P.BUSY, E.FLOW_ENDED), (P.HANDING_BACK, E.FLOW_ENDED), (P.HELD, E.ENDED),
    }  # fmt: skip
    assert common <= set(lived)
    assert {(D.NONE, DE.REQUEST), (D.REVOKING, DE.SETTLE), (D.FORCING, DE.FORCED)} <= set(drained)
