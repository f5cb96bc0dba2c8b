"""A graceful hand-over costs a few round trips, however many splits the leaving worker holds."""

from __future__ import annotations

import pytest

from spate import Progress
from spate.store import Keyspace

from .world import KEYS, Worker, World, config, planner_of

LATENCY = 0.2
"""Seconds every write of the leaving worker takes once it starts leaving."""


def _peak(worker: Worker) -> int:
    """The most hand-back writes (progress-record updates) that were in flight at once."""
    starts = [t for t, kind, key in worker.slow_started if kind == "update"]
    return max((sum(1 for u in starts if t <= u < t + LATENCY) for t in starts), default=0)


@pytest.mark.parametrize("held", [2, 12])
def test_a_departing_worker_hands_back_every_split_at_once_and_the_other_claims_at_once(
    held: int,
) -> None:
    world = World()
    # A long membership debounce on both: it must not hold back a hand-over (released splits
    # are unowned, and unowned splits are handed out during the quiet period). It also keeps
    # the newcomer from being given a share before the leave. (A new job's first assignment
    # waits out the same window as its join window, hence the long first wait.)
    cfg = config(max_in_flight=held, membership_debounce=1000.0)
    a = world.start("a", planner=planner_of(held), cfg=cfg)
    world.run_until(lambda: len(a.owned) == held and a.leading, within=1100.0)
    b = world.start("b", planner=planner_of(held), cfg=cfg)
    world.run_for(1.0)
    assert len(a.owned) == held
    assert not b.owned
    a.slow_writes("update", Keyspace.DURABLE, KEYS.split_prefix, LATENCY)
    a.slow_writes("delete", Keyspace.EPHEMERAL, "", LATENCY)
    a.slow_writes("delete", *a.lease_key(""), LATENCY)
    began = world.now
    world.wait(a.depart())
    left = world.now - began
    # Every hand-back write was in flight at once ...
    assert _peak(a) == held
    # ... so leaving took two writes' time, whatever the count: the hand-backs, then the
    # lease deletes with the presence delete beside them (one after another it was two
    # writes per split; with the presence delete after the lease deletes, three writes).
    assert left <= 2 * LATENCY + 0.1, left
    world.run_until(lambda: len(b.owned) == held, within=5.0)
    took = world.now - began
    # The survivor (elected once the leader resigned) claimed them all together.
    assert took <= left + 0.5, took


@pytest.mark.parametrize("held", [2, 12])
def test_a_departing_follower_hands_back_at_once_and_the_leader_reassigns_at_once(
    held: int,
) -> None:
    world = World()
    cfg = config(max_in_flight=held, membership_debounce=1000.0)
    # The leader fills its lanes; the follower is handed the rest (unowned splits are
    # handed out during the debounce), then the leader finishes its own so it has room.
    b = world.start("b", planner=planner_of(2 * held), cfg=cfg)
    world.run_until(lambda: len(b.owned) == held and b.leading, within=1100.0)  # join window
    a = world.start("a", planner=planner_of(2 * held), cfg=cfg)
    world.run_until(lambda: len(a.owned) == held)
    for split in sorted(b.owned):
        world.wait(b.commit(split, Progress(1, completed=True)))
    assert not b.owned
    a.slow_writes("update", Keyspace.DURABLE, KEYS.split_prefix, LATENCY)
    a.slow_writes("delete", Keyspace.EPHEMERAL, "", LATENCY)
    a.slow_writes("delete", *a.lease_key(""), LATENCY)
    began = world.now
    world.wait(a.depart())
    left = world.now - began
    assert _peak(a) == held
    assert left <= 2 * LATENCY + 0.1, left
    world.run_until(lambda: len(b.owned) == held, within=5.0)
    # The leader, debouncing the membership change, still handed them out at once.
    assert world.now - began <= left + 0.5


def test_a_departure_deletes_its_presence_once_its_hand_backs_landed_beside_its_leases() -> None:
    # The working set is emptied first (every owner cleared), so the leader never meets a
    # departed worker's split still owned; the presence then goes with the lease drops, not a
    # write after them.
    world = World()
    a = world.start("a", planner=planner_of(4), cfg=config(max_in_flight=4))
    world.run_until(lambda: len(a.owned) == 4)
    for kind in ("create", "update", "delete"):
        for keyspace in Keyspace:
            a.slow_writes(kind, keyspace, "", LATENCY)
    mark = len(world.store_writes())
    world.wait(a.depart())
    started = {(kind, key): t for t, kind, key in a.slow_started}
    landed = {(w.op, w.key): w.at for w in world.store_writes()[mark:] if w.actor == a.actor}
    splits = [KEYS.split(f"s0{n}") for n in range(4)]
    hand_backs = [landed[("update", key)] for key in splits]
    lease_drops = [started[("delete", a.lease_key(f"s0{n}")[1])] for n in range(4)]
    presence = started[("delete", KEYS.worker("a"))]
    assert presence >= max(hand_backs), "the presence went before the working set was empty"
    assert presence == min(lease_drops), "the presence waited for the lease drops"


def test_a_lease_freed_while_the_claim_was_in_flight_is_claimed_at_once_not_after_a_pause() -> None:
    # The leaver drops its leases and its presence together. The leader can see the presence
    # (the session) go first and take a lease over by CAS on the revision it knows, while the
    # leaver's delete of that very lease lands just before the CAS: the CAS loses to a key that
    # is now free. The claimant reads the key again and claims it at once; holding the split
    # back for the pause after an error left it idle for a second on every such race (NATS,
    # half of the 16-split hand-overs).
    world = World()
    cfg = config(max_in_flight=4, membership_debounce=1000.0)
    b = world.start("b", planner=planner_of(8), cfg=cfg)
    world.run_until(lambda: len(b.owned) == 4 and b.leading, within=1100.0)  # join window
    a = world.start("a", planner=planner_of(8), cfg=cfg)
    world.run_until(lambda: len(a.owned) == 4)
    for split in sorted(b.owned):
        world.wait(b.commit(split, Progress(1, completed=True)))
    raced = sorted(a.owned)[0]
    keyspace, key = a.lease_key(raced)
    held = a.hold_next("delete", keyspace, key)  # the leaver's drop of one lease, in the network
    b.before_next("update", keyspace, key, held.release)  # ... lands just before the takeover
    began = world.now
    world.wait(a.depart())
    world.run_until(lambda: raced in b.owned, within=5.0)
    assert held.arrived
    refused = [w for w in b.writes if w[1] == "claim-lease" and w[2] == "lost"]
    assert refused, "the race did not happen: the takeover's CAS did not lose"
    # Claimed within a few round trips of the leave, not after RETRY_AFTER_ERROR (1 s).
    assert world.now - began < 0.5, world.now - began
