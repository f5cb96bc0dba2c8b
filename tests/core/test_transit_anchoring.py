"""The leader anchors a split in transit on its assignee, whoever the view still names as owner.

A split is in transit from the moment this leader's records name a new worker for it until
that worker claims it. Placed from its owner instead, it is placed afresh on every solve while
the moves land one by one: it swaps between workers, a claim racing a swap takes it back to a
worker it left, and a domain overfilled that way is evened out by moving a split that was never
in transit (the flakes once seen in the failure-domain tests, now ``test_split_affinity`` and
``tests/runtime/test_domain_loss.py``, and in ``test_debounce``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from spate import Plan, PlanContext
from spate._core.host import Host
from spate._core.leader.leadership import Leadership
from spate._core.placement.vocabulary import Placement
from spate._core.records import (
    AssignmentRecord,
    Keys,
    LeaseRecord,
    PresenceRecord,
    ProgressRecord,
    SpecRecord,
)
from spate._core.view.changes import PlacementChanges
from spate._core.view.view import View
from tests.runtime.harness import JOB

GENERATION = 2


def _no_plan(ctx: PlanContext) -> Plan:
    return Plan([], final=True)


class _Fleet:
    """A leader's view built by hand: live workers, records, splits."""

    def __init__(self, *live: str) -> None:
        self.changes = PlacementChanges()
        self.view = View(Keys(JOB), max_attempts=3, changes=self.changes)
        self.rev = 0
        for instance in live:
            self.view.put_presence(instance, PresenceRecord(nonce=instance, max_in_flight=4), 1)
        host = SimpleNamespace(view=self.view, placement_changes=self.changes)
        self.leader = Leadership(cast(Host, host), _no_plan)
        self.leader.generation = GENERATION  # (the facade sets its election's)

    def _next(self) -> int:
        self.rev += 1
        return self.rev

    def split(self, split: str, *, owner: str | None, leased: bool) -> None:
        self.view.put_progress(split, ProgressRecord(id=split, epoch=1, owner=owner), self._next())
        self.view.put_spec(split, SpecRecord(id=split, weight=2), self._next())
        if leased and owner is not None:
            self.view.put_lease(split, LeaseRecord(owner=owner, nonce=owner, epoch=1), self._next())

    def assign(self, instance: str, *splits: str, generation: int = GENERATION) -> None:
        record = AssignmentRecord(generation=generation, splits=tuple(sorted(splits)))
        self.view.put_assignment(instance, record, self._next())

    def anchor(self, split: str) -> str | None:
        placement = self.leader.inputs.placement_input(split)
        assert placement is not None
        assert placement == Placement(2, placement.owner, "")
        return placement.owner


def test_a_revocation_in_flight_is_anchored_on_the_new_assignee() -> None:
    fleet = _Fleet("a", "d")
    fleet.split("s04", owner="a", leased=True)  # a still holds it, asked to hand it back
    fleet.assign("a")
    fleet.assign("d", "s04")
    assert fleet.anchor("s04") == "d"
    fleet.split("s05", owner="a", leased=True)
    fleet.assign("a", "s05")  # steady: owner and assignee agree
    assert fleet.anchor("s05") == "a"


def test_an_expired_owners_split_is_anchored_on_a_live_assignee_not_on_a_dead_record() -> None:
    fleet = _Fleet("a2", "c0")
    fleet.split("s03", owner="b0", leased=False)  # b0 died: its lease expired, not its record
    fleet.assign("b0", "s03")  # the dead worker's record, not deleted yet
    assert fleet.anchor("s03") == "b0"  # nobody live named yet: placed as unowned
    fleet.assign("c0", "s03")
    assert fleet.anchor("s03") == "c0"  # b0 sorts first, but only live workers anchor


def test_a_handed_back_split_is_anchored_on_the_first_live_assignee_by_name() -> None:
    fleet = _Fleet("b", "c")
    fleet.split("s01", owner=None, leased=False)
    fleet.assign("c", "s01")
    fleet.assign("b", "s01")  # a move being published: two records name it
    assert fleet.anchor("s01") == "b"


def test_a_predecessors_records_anchor_nothing() -> None:
    fleet = _Fleet("a", "d")
    fleet.split("s04", owner="a", leased=True)
    fleet.assign("d", "s04", generation=GENERATION - 1)
    assert fleet.anchor("s04") == "a"
    fleet.split("s06", owner=None, leased=False)
    fleet.assign("a", "s06", generation=GENERATION - 1)
    assert fleet.anchor("s06") is None


def test_a_write_in_flight_anchors_before_its_record_lands() -> None:
    # One publish moves s04 from a to d: a's record lands first, d's is still on its way.
    fleet = _Fleet("a", "d")
    fleet.split("s04", owner="a", leased=True)
    fleet.assign("a", "s04")
    fleet.changes.track()
    fleet.leader.writes.started("a", ())
    fleet.leader.writes.started("d", ("s04",))
    assert fleet.changes.take_placement_changes() == {"s04"}  # the index re-reads it
    assert fleet.anchor("s04") == "d"
    fleet.assign("a")
    fleet.leader.writes.ended("a")
    assert fleet.anchor("s04") == "d"  # not back on a while d's write is in flight
    fleet.leader.writes.ended("d")  # lost: no record names it, its owner anchors it again
    assert fleet.anchor("s04") == "a"


def test_a_join_or_departure_rereads_exactly_the_inputs_it_moves() -> None:
    """The leader's index re-reads, on a change of workers, only the splits naming one of
    them as assignee; every input it then holds is what a fresh read of the view gives."""
    from spate._config import Config
    from spate.store import Keyspace

    fleet = _Fleet("a", "b", "c")
    host = SimpleNamespace(
        view=fleet.view, placement_changes=fleet.changes, config=Config(), tie_seed=7
    )
    fleet.leader = Leadership(cast(Host, host), _no_plan)
    fleet.leader.election.generation = GENERATION
    for n in range(12):
        owner = "abc"[n % 3]
        fleet.split(f"s{n:02d}", owner=owner, leased=n % 4 != 0)
    # Some splits in transit: b's record names splits a still owns.
    fleet.assign("a", "s00", "s06")
    fleet.assign("b", "s01", "s03", "s04", "s07", "s09")
    fleet.assign("c", "s02", "s05", "s08", "s10", "s11")
    leader = fleet.leader

    def fresh() -> dict[str, Placement]:
        out = {}
        for split in fleet.view.splits:
            placement = leader.inputs.placement_input(split)
            if placement is not None:
                out[split] = placement
        return out

    index = leader.inputs.placement_index()
    assert index.pool() == fresh()
    # b leaves (its presence key expires): what it anchored is anchored no more.
    key = Keys(JOB).worker("b")
    fleet.view.apply_delete(Keyspace.EPHEMERAL, key, fleet._next())
    assert leader.inputs.placement_index().pool() == fresh()
    assert fresh()["s03"].owner == "a"  # back on its owner, no longer in transit to b
    # b comes back: its record (of this generation) anchors its splits again.
    fleet.view.put_presence("b", PresenceRecord(nonce="b2", max_in_flight=4), fleet._next())
    assert leader.inputs.placement_index().pool() == fresh()
    assert fresh()["s03"].owner == "b"
