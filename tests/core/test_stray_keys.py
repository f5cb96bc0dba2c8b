"""A key of this process's that it no longer acts on is given back, not left standing.

On a per-key store such a key expires within a lease. On a session store (etcd) the
process's keepalive keeps every key written under its session alive, so a leader key or a
split's lease key that the process does not lead or hold would stand for ever: nobody else
elects, nobody else claims the split. Both were found by the simulator's machine engine
once its store model kept keys by session (seeds 166 and 2719, 1704, 3294).
"""

from __future__ import annotations

import logging

import pytest

from spate._core.records import LeaderRecord, LeaseRecord, encode
from spate.store import Keyspace

from .test_machine import lone_worker
from .world import KEYS, leading_now

EPHEMERAL = Keyspace.EPHEMERAL


def test_a_leader_key_of_this_process_it_does_not_lead_by_is_given_back() -> None:
    world, w1 = lone_worker()
    assert w1.leading
    # Leadership given up without its key (or an election that landed unseen): the key
    # stands under this process's nonce while the machine does not lead.
    w1.step_down(resign=False)
    assert world.get(EPHEMERAL, KEYS.leader) is not None
    before = len(w1.ops)
    w1.heartbeat()
    world.settle()
    resigns = [op for op in w1.ops[before:] if op.operation == "resign"]
    assert [(op.method, op.key) for op in resigns] == [("delete", KEYS.leader)]
    # With the key gone, an election can be won again.
    assert w1.leading


def test_a_leader_key_written_unseen_is_given_back_and_the_election_runs_again() -> None:
    world, w1 = lone_worker()
    w1.step_down(resign=True)
    world.settle()
    assert w1.leading  # re-elected at once; now make the next attempt land unseen
    w1.fail_next("delete", EPHEMERAL, KEYS.leader)  # the resignation never lands
    w1.step_down(resign=True)
    world.settle()
    current = world.get(EPHEMERAL, KEYS.leader)
    assert current is not None
    record = LeaderRecord(owner="w1", nonce=w1.nonce, generation=99)
    world.write("update", EPHEMERAL, KEYS.leader, encode(record), current.revision)
    world.settle()
    assert not leading_now(w1)  # nobody elects while a leader key stands
    w1.heartbeat()
    world.settle()
    assert leading_now(w1)


def test_a_lease_key_of_this_process_for_a_split_it_does_not_hold_is_given_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="spate")
    world, w1 = lone_worker()
    # The tenancy ends without the lease key going (a loss noticed first; a hand-back whose
    # delete could not be written); and the worker claims nothing more (it is leaving), so
    # it will not simply hold the split again.
    w1.drop_silently("a")
    w1.stop_claiming()
    lease = world.get(*w1.lease_key("a"))
    assert lease is not None
    # Not at once: a beat later (the key may be a claim's own write, not yet a holding).
    before = len(w1.ops)
    w1.heartbeat()
    world.settle()
    assert not [op for op in w1.ops[before:] if op.operation == "lease-release"]
    world.run_for(w1.lease / 3)
    w1.heartbeat()
    world.settle()
    gave_back = [op for op in w1.ops[before:] if op.operation == "lease-release"]
    assert [(op.key, op.expected) for op in gave_back] == [(lease.key, lease.revision)]
    assert world.get(*w1.lease_key("a")) is None
    record, _ = world.record("a")
    assert record.epoch == 1
    # Said by the tenancies, under their own logger (not the claims').
    [said] = [r for r in caplog.records if "giving back a lease key" in r.getMessage()]
    assert said.name == "spate.tenancy"


def test_a_stray_lease_key_whose_give_back_failed_is_tried_again() -> None:
    world, w1 = lone_worker()
    w1.drop_silently("b")
    # Leaving: otherwise the next step simply claims the split again, adopting the key.
    w1.stop_claiming()
    leases, lease_key = w1.lease_key("b")
    current = world.get(leases, lease_key)
    assert current is not None
    world.run_for(w1.lease / 3)
    # Rewritten under this process's nonce behind the machine's back: the give-back's
    # delete, guarded by the revision it knew, loses; the next beat tries the new one.
    w1.deafen(leases, lease_key)
    lease = LeaseRecord(owner="w1", nonce=w1.nonce, epoch=1)
    world.write("update", leases, lease_key, encode(lease), current.revision)
    w1.heartbeat()
    world.settle()
    w1.hear(leases)
    world.run_for(w1.lease / 3)
    w1.heartbeat()
    world.settle()
    deletes = [op for op in w1.ops if op.operation == "lease-release" and op.key == lease_key]
    assert [op.expected for op in deletes][:1] == [current.revision]
    assert len(deletes) == 2
    # Nothing of this process's stands orphaned.
    assert world.get(leases, lease_key) is None
    assert not w1.stray_leases


def test_a_stray_lease_key_that_moved_unheard_is_read_again_and_given_back() -> None:
    """The give-back's guarded delete loses to a revision the view never heard of (an event
    lost with a broken watch): the key is read again, so the next beat's attempt is guarded
    by what the store holds. Guarded by the old revision for ever, it lost for ever: on an
    etcd cluster whose leader was killed, the worker held none of its splits again."""
    world, w1 = lone_worker()
    w1.drop_silently("b")
    w1.stop_claiming()  # claims nothing more: the split cannot simply be held again
    leases, lease_key = w1.lease_key("b")
    current = world.get(leases, lease_key)
    assert current is not None
    w1.deafen(leases, lease_key)  # no watch event: the view keeps the old revision
    world.write("update", leases, lease_key, current.value, current.revision)
    moved = world.get(leases, lease_key)
    assert moved is not None
    for _ in range(3):
        world.run_for(w1.lease / 3)
        w1.heartbeat()
        world.settle()
    deletes = [op for op in w1.ops if op.operation == "lease-release" and op.key == lease_key]
    assert [op.expected for op in deletes][:2] == [current.revision, moved.revision]
    assert world.get(leases, lease_key) is None


def test_a_leader_key_that_moved_unheard_is_read_again_and_resigned() -> None:
    world, w1 = lone_worker()
    w1.step_down(resign=False)
    current = world.get(EPHEMERAL, KEYS.leader)
    assert current is not None
    w1.deafen(EPHEMERAL, KEYS.leader)  # no watch event: the view keeps the old revision
    world.write("update", EPHEMERAL, KEYS.leader, current.value, current.revision)
    moved = world.get(EPHEMERAL, KEYS.leader)
    assert moved is not None
    for _ in range(2):
        w1.heartbeat()
        world.settle()
    resigns = [op for op in w1.ops if op.operation == "resign"]
    assert [op.expected for op in resigns] == [current.revision, moved.revision]
    w1.hear(EPHEMERAL)
    world.settle()
    assert w1.leading  # the key gone, the election ran again
