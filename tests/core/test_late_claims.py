"""Regression scenarios found by the demo: a claim that lands late must not undo newer history."""

from __future__ import annotations

import itertools

import attrs
import pytest

from spate import Gained, Lost
from spate._core.records import ProgressRecord, Status, encode
from spate.store import Keyspace

from .world import KEYS, LEASE, World, config, planner_of


def test_a_claim_whose_lease_lands_after_another_owner_finished_writes_nothing() -> None:
    # Found by `spate demo`: a frozen worker's claim decided its epoch before the freeze, its
    # lease create landed after the thaw (the key was free again: the other owner had
    # finished), and it then wrote that stale epoch over the finished record with a fresh
    # revision, un-finishing the split at a lower epoch.
    world = World()
    a = world.start("a", planner=planner_of(1), wait=False)
    held = a.hold_next("create", *a.lease_key("s00"))
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
    assert world.get(*a.lease_key("s00")) is None  # the stray lease is removed


def test_a_claim_whose_lease_lands_after_another_claim_never_lowers_the_epoch() -> None:
    # Another worker claims the split (epoch + 1) while a's lease write is held; it has no
    # lease (it died at once), so a may take the split over — but only at a newer epoch.
    world = World()
    a = world.start("a", planner=planner_of(1), wait=False)
    held = a.hold_next("create", *a.lease_key("s00"))
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


@pytest.mark.parametrize("sessions", [False, True], ids=["per-key", "session"])
def test_nothing_is_renewed_per_split_the_session_alone_keeps_every_lease(sessions: bool) -> None:
    # Renewals are O(workers) (docs/protocol.md, "Heartbeat"). On a per-key store the heartbeat
    # renews the presence record (the session every lease names) and, on the leader, the leader key;
    # on a session store the session's keepalive keeps both. No split's lease is ever rewritten.
    world = World(sessions=sessions)
    a = world.start("a", planner=planner_of(8), cfg=config(max_in_flight=8))
    world.run_until(lambda: len(a.owned) == 8)
    mark = len(a.writes)
    world.run_for(20 * LEASE)
    assert len(a.owned) == 8
    assert not a.of(Lost)
    kept = [op for _, op, _ in a.writes[mark:]]
    assert "renew" not in kept
    if not sessions:
        beats = kept.count("presence-renew")
        assert beats >= 20 * 3 * 0.8  # about one a heartbeat, three a lease
        presence = sorted(t for t, op, _ in a.writes[mark:] if op == "presence-renew")
        assert max(b - a for a, b in itertools.pairwise(presence)) <= 0.45 * LEASE
    # A steady worker writes at most its presence and the leader key per heartbeat (about
    # three a lease), whatever it holds: not one write per held split.
    assert len(kept) <= 2 * 20 * 3 * 1.25, sorted(set(kept))
