"""The claim deadline: a worker that never claims what it is given is set aside for placement.

A presence record proves only that something writes it. One rewritten for a worker that does
not exist (a ghost) used to keep the splits assigned to it unowned for as long as the writes
went on; the leader now places them elsewhere once the worker has claimed nothing for the
claim deadline, gives it work again later (a slow starter is not starved), and treats it like
any worker once it claims.
"""

from __future__ import annotations

import pytest

from spate._core.records import AssignmentRecord, PresenceRecord, decode, encode
from spate.store import Keyspace

from .world import KEYS, LEASE, World, config, cooperative, planner_of

SPLITS = 8
DEADLINE = max(2 * LEASE, LEASE + config().drain_deadline)
"""The default claim deadline under the world's lease and the tests' drain deadline."""


def _ghost_presence(world: World, instance: str = "ghost", lanes: int = SPLITS) -> None:
    """Write (or rewrite) a presence record for a worker that does not exist."""
    key = KEYS.worker(instance)
    value = encode(PresenceRecord(nonce=f"n-{instance}", max_in_flight=lanes))
    entry = world.get(Keyspace.EPHEMERAL, key)
    if entry is None:
        world.write("create", Keyspace.EPHEMERAL, key, value)
    else:
        world.write("update", Keyspace.EPHEMERAL, key, value, expected=entry.revision)


def _haunt(world: World, seconds: float) -> None:
    """Run ``seconds`` while the ghost's record is rewritten every third of a lease."""
    end = world.now + seconds
    while world.now < end:
        _ghost_presence(world)
        world.run_for(min(LEASE / 3, end - world.now))


def _assigned(world: World, instance: str) -> tuple[str, ...]:
    entry = world.get(Keyspace.DURABLE, KEYS.assign(instance))
    return () if entry is None else decode(AssignmentRecord, entry.key, entry.value).splits


@pytest.mark.parametrize(
    "timings",
    [{}, {"membership_debounce": 2.0, "rebalance_delay": 20.0}],
    ids=["no-debounce", "debounce-and-grace-window"],
)
def test_a_ghost_s_splits_are_owned_by_others_within_the_claim_deadline(
    timings: dict[str, float],
) -> None:
    # (The join window and the debounce delay the ghost's share, not its return to a; a
    # grace window is for departed workers, and the ghost never departs.)
    world = World()
    a = world.start("a", planner=planner_of(SPLITS), cfg=config(**timings), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == SPLITS)
    _haunt(world, LEASE)  # the ghost joins: a rebalance gives it half the job
    given = _assigned(world, "ghost")
    assert given, "the ghost was given splits"
    assert len(a.owned) < SPLITS
    _haunt(world, DEADLINE + LEASE)  # (the deadline, a drain, a claim)
    # Set aside: its splits went back to a, and its record names nothing.
    assert len(a.owned) == SPLITS
    assert _assigned(world, "ghost") == ()
    assert a.leading


def test_a_worker_that_claims_late_is_given_work_again_and_kept() -> None:
    world = World()
    a = world.start("a", planner=planner_of(SPLITS), cfg=config(), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == SPLITS)
    b = world.start("b", planner=planner_of(SPLITS), cfg=config(), wait=False)
    keyspace, key = b.lease_key("")
    unwedge = b.fail_every("create", keyspace, key)  # b cannot claim (yet)
    world.run_for(LEASE)
    assert _assigned(world, "b")
    assert not b.owned
    world.run_for(DEADLINE + LEASE)
    assert _assigned(world, "b") == (), "b was set aside"
    assert len(a.owned) == SPLITS
    unwedge()  # b works now: it is given work again (later), claims it, and keeps it
    world.run_until(lambda: bool(b.owned), within=4 * DEADLINE + LEASE)
    world.run_for(10 * DEADLINE)
    assert b.owned
    assert len(a.owned) + len(b.owned) == SPLITS
    assert abs(len(a.owned) - len(b.owned)) <= 1


def test_a_worker_that_claims_is_never_set_aside_while_it_waits_on_a_draining_split() -> None:
    # b is given splits a still holds while they drain (a drains slowly: up to its drain
    # deadline, three times the claim deadline): nothing b could claim is free, so no clock
    # runs, and b claims each split once a lets it go.
    world = World()
    cfg = config(drain_deadline=3 * LEASE, claim_deadline=LEASE)
    a = world.start("a", planner=planner_of(SPLITS), cfg=cfg)  # (a never hands back early)
    world.run_until(lambda: len(a.owned) == SPLITS)
    b = world.start("b", planner=planner_of(SPLITS), cfg=cfg)
    world.run_until(lambda: bool(b.owned), within=3 * LEASE + 2 * LEASE)
    world.run_for(5 * DEADLINE)
    assert len(b.owned) == SPLITS // 2
    assert len(a.owned) == SPLITS // 2
