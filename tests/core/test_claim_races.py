"""Regression scenarios found by the demo: a claim that lands late must not undo newer history."""

from __future__ import annotations

import itertools

import attrs

from spate import Gained
from spate._core.records import ProgressRecord, Status, encode
from spate.store import Keyspace

from .world import KEYS, LEASE, World, planner_of


def test_a_claim_whose_lease_lands_after_another_owner_finished_writes_nothing() -> None:
    # Found by `spate demo`: a frozen worker's claim decided its epoch before the freeze, its
    # lease create landed after the thaw (the key was free again: the other owner had
    # finished), and it then wrote that stale epoch over the finished record with a fresh
    # revision, un-finishing the split at a lower epoch.
    world = World()
    a = world.start("a", planner=planner_of(1), wait=False)
    held = a.hold_next("create", Keyspace.EPHEMERAL, KEYS.split("s00"))
    world.run_until(lambda: held.arrived)
    record, revision = world.record("s00")
    finished = attrs.evolve(
        record,
        epoch=record.epoch + 3,
        owner="b",
        status=Status.COMPLETED,
        completed=True,
        watermark=100,
    )
    world.write("update", Keyspace.DURABLE, KEYS.split("s00"), encode(finished), revision)
    world.run_for(1)  # a's watch brings the finished record into its view
    held.release()
    world.run_for(5)
    final, _ = world.record("s00")
    assert final == finished
    assert not a.of(Gained)
    assert world.get(Keyspace.EPHEMERAL, KEYS.split("s00")) is None  # the stray lease is removed


def test_a_claim_whose_lease_lands_after_another_claim_never_lowers_the_epoch() -> None:
    # Another worker claims the split (epoch + 1) while a's lease write is held; it has no
    # lease (it died at once), so a may take the split over — but only at a newer epoch.
    world = World()
    a = world.start("a", planner=planner_of(1), wait=False)
    held = a.hold_next("create", Keyspace.EPHEMERAL, KEYS.split("s00"))
    world.run_until(lambda: held.arrived)
    record, revision = world.record("s00")
    taken: ProgressRecord = attrs.evolve(record, epoch=record.epoch + 1, owner="b")
    world.write("update", Keyspace.DURABLE, KEYS.split("s00"), encode(taken), revision)
    world.run_for(1)
    held.release()
    world.run_for(5)
    final, _ = world.record("s00")
    assert final.epoch > taken.epoch
    assert all(gained.epoch > taken.epoch for gained in a.of(Gained))


def test_renewals_leave_slack_a_held_lease_is_renewed_on_every_heartbeat() -> None:
    # Found by the benchmarks: renewing only once a full third of the lease had passed skipped
    # every early (jittered) heartbeat, so leases went two thirds of their life unrenewed.
    world = World()
    a = world.start("a", planner=planner_of(2))
    world.run_until(lambda: bool(a.of(Gained)))
    start = world.now
    world.run_for(20 * LEASE)
    renewals = [t for t, op, _ in a.writes if op == "renew" and t >= start]
    per_split = len(renewals) / 2
    assert per_split >= 20 * 3 * 0.8  # about one renewal per heartbeat, three per lease
    times = sorted({round(t, 6) for t in renewals})
    assert max(b - a for a, b in itertools.pairwise(times)) <= 0.45 * LEASE
