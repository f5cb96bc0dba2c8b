"""A key of this process's that it no longer acts on is given back, not left standing.

On a per-key store such a key expires within a lease. On a session store (etcd) the
process's keepalive keeps every key written under its session alive, so a leader key or a
split's lease key that the process does not lead or hold would stand for ever: nobody else
elects, nobody else claims the split. Both were found by the simulator's machine engine
once its store model kept keys by session (seeds 166 and 2719, 1704, 3294).
"""

from __future__ import annotations

from spate._core.records import LeaderRecord, LeaseRecord, encode
from spate.store import Entry

from .test_machine import D, E, started_world


def test_a_leader_key_of_this_process_it_does_not_lead_by_is_given_back() -> None:
    world = started_world()
    machine = world.machine
    assert machine.leading
    # Leadership given up without its key (or an election that landed unseen): the key
    # stands under this process's nonce while the machine does not lead.
    machine._leader.demote(resign=False)
    key = machine.keys.leader
    assert (E, key) in world.table
    before = len(world.ops)
    machine.heartbeat()
    world.settle()
    resigns = [op for op in world.ops[before:] if op.operation == "resign"]
    assert [(op.kind, op.key) for op in resigns] == [("delete", key)]
    # With the key gone, an election can be won again.
    assert machine.leading


def test_a_leader_key_written_unseen_is_given_back_and_the_election_runs_again() -> None:
    world = started_world()
    machine = world.machine
    machine._leader.demote(resign=True)
    world.settle()
    assert machine.leading  # re-elected at once; now make the next attempt land unseen
    machine._leader.demote(resign=True)
    world.flows.clear()  # the resignation never ran: the key is still there, ours
    current = world.table[(E, machine.keys.leader)]
    record = LeaderRecord(owner="w1", nonce="n1", generation=99)
    world.revision += 1
    unseen = Entry(current.key, encode(record), world.revision)
    world.table[(E, current.key)] = unseen
    machine.watch_put(E, unseen)
    machine.step()
    assert not machine.leading  # nobody elects while a leader key stands
    machine.heartbeat()
    world.settle()
    assert machine.leading


def test_a_lease_key_of_this_process_for_a_split_it_does_not_hold_is_given_back() -> None:
    world = started_world()
    machine = world.machine
    held = machine._claims.owned["a"]
    # The tenancy ends without the lease key going (a loss noticed first; a hand-back whose
    # delete could not be written); and the worker claims nothing more (it is leaving), so
    # it will not simply hold the split again.
    machine._claims.drop("a", "fenced")
    machine._parting = True
    lease_key = machine.keys.split("a")
    assert (E, lease_key) in world.table
    lease_rev = world.table[(E, lease_key)].revision
    # Not at once: a beat later (the key may be a claim's own write, not yet a holding).
    before = len(world.ops)
    machine.heartbeat()
    world.settle()
    assert not [op for op in world.ops[before:] if op.operation == "lease-release"]
    world.now += machine.lease / 3
    machine.heartbeat()
    world.settle()
    gave_back = [op for op in world.ops[before:] if op.operation == "lease-release"]
    assert [(op.key, op.expected) for op in gave_back] == [(lease_key, lease_rev)]
    assert (E, lease_key) not in world.table
    assert held.epoch == 1


def test_a_stray_lease_key_whose_give_back_failed_is_tried_again() -> None:
    world = started_world()
    machine = world.machine
    machine._claims.drop("b", "fenced")
    lease_key = machine.keys.split("b")
    # Rewritten under this process's nonce behind the machine's back: the give-back's
    # delete, guarded by the revision it knew, loses; the next beat tries the new one.
    current = world.table[(E, lease_key)]
    lease = LeaseRecord(owner="w1", nonce="n1", epoch=1)
    world.now += machine.lease / 3
    world.revision += 1
    moved = Entry(current.key, encode(lease), world.revision)
    world.table[(E, lease_key)] = moved
    machine.heartbeat()
    world.settle()
    machine.watch_put(E, moved)
    world.now += machine.lease / 3
    machine.heartbeat()
    world.settle()
    deletes = [op for op in world.ops if op.operation == "lease-release" and op.key == lease_key]
    assert [op.expected for op in deletes][:1] == [current.revision]
    # The lost delete read the key again: this worker, still assigned the split, adopts the
    # key it found and holds the split again (had it been leaving, the next beat would have
    # given the key back under its new revision: see the test below). Either way nothing
    # of this process's stands orphaned.
    assert "b" in machine._claims.owned or (E, lease_key) not in world.table
    assert not machine._claims._stray
    assert D is not None


def test_a_stray_lease_key_that_moved_unheard_is_read_again_and_given_back() -> None:
    """The give-back's guarded delete loses to a revision the view never heard of (an event
    lost with a broken watch): the key is read again, so the next beat's attempt is guarded
    by what the store holds. Guarded by the old revision for ever, it lost for ever: on an
    etcd cluster whose leader was killed, the worker held none of its splits again."""
    world = started_world()
    machine = world.machine
    machine._claims.drop("b", "fenced")
    machine._parting = True  # claims nothing more: the split cannot simply be held again
    lease_key = machine.keys.split("b")
    current = world.table[(E, lease_key)]
    world.revision += 1
    moved = Entry(current.key, current.value, world.revision)
    world.table[(E, lease_key)] = moved  # no watch event: the view keeps the old revision
    for _ in range(3):
        world.now += machine.lease / 3
        machine.heartbeat()
        world.settle()
    deletes = [op for op in world.ops if op.operation == "lease-release" and op.key == lease_key]
    assert [op.expected for op in deletes][:2] == [current.revision, moved.revision]
    assert (E, lease_key) not in world.table


def test_a_leader_key_that_moved_unheard_is_read_again_and_resigned() -> None:
    world = started_world()
    machine = world.machine
    machine._leader.demote(resign=False)
    key = machine.keys.leader
    current = world.table[(E, key)]
    world.revision += 1
    moved = Entry(current.key, current.value, world.revision)
    world.table[(E, key)] = moved  # no watch event: the view keeps the old revision
    for _ in range(2):
        machine.heartbeat()
        world.settle()
    resigns = [op for op in world.ops if op.operation == "resign"]
    assert [op.expected for op in resigns] == [current.revision, moved.revision]
    assert machine.leading  # the key gone, the election ran again
