"""Assignment, revocation (drained, forced, cancelled, declined), departure, reconcile."""

from __future__ import annotations

from spate import Event, Gained, Lost, Progress, RevokeRequested
from spate._core.records import AssignmentRecord, decode
from spate.store import Keyspace, Won
from spate_testing.faults import FaultRates

from .world import KEYS, LEASE, Worker, World, config, cooperative, planner_of


def test_revocation_drained() -> None:
    world = World()
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 4)
    b = world.start("b", planner=planner_of(4))
    world.run_until(lambda: len(b.owned) == 2)
    assert len(a.of(RevokeRequested)) == 2
    assert not a.of(Lost)
    assert a.counts["revocation:requested"] == 2
    assert a.counts["revocation:drained"] == 2
    for gained in b.of(Gained):
        assert gained.progress.watermark == 7  # the drain's final commit: nothing replays


def test_revocation_forced_at_deadline() -> None:
    world = World()
    a = world.start("a", planner=planner_of(2))
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2))
    world.run_until(lambda: bool(a.of(RevokeRequested)))
    (request,) = a.of(RevokeRequested)
    world.run_until(lambda: bool(a.of(Lost, request.split)))
    (lost,) = a.of(Lost, request.split)
    assert lost.reason == "revoked"
    assert a.time_of(lost) - a.time_of(request) == 3.0  # drain_deadline
    world.run_until(lambda: bool(b.of(Gained, request.split)), within=1)
    record, _ = world.record(request.split)
    assert record.attempts == 0  # forcing is a release: being revoked is not poison
    assert a.counts["revocation:forced"] == 1
    assert a.counts["lost:revoked"] == 1


def test_revocation_cancelled_and_then_bounded_by_silence() -> None:
    world = World()
    a = world.start("a", planner=planner_of(2))
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2))
    world.run_until(lambda: bool(a.of(RevokeRequested)))
    (request,) = a.of(RevokeRequested)
    world.wait(b.depart())  # the move is no longer wanted: the leader names the split for a again
    world.run_until(lambda: a.counts["revocation:cancelled"] == 1, within=1)
    # A drain that keeps committing is not forced, however long it takes.
    for step in range(1, 5):
        world.run_for(2.0)
        world.wait(a.commit(request.split, Progress(step)))
    assert not a.of(Lost)
    # Silence for a whole drain deadline releases it, and a claims it back afresh.
    world.run_until(lambda: bool(a.of(Lost, request.split)), within=4)
    assert a.of(Lost, request.split)[0].reason == "revoked"
    world.run_until(lambda: len(a.of(Gained, request.split)) == 2, within=1)
    assert a.of(Gained, request.split)[1].progress.watermark == 4
    assert a.counts["revocation:requested"] == 1
    assert a.counts["revocation:forced"] == 0  # it ended as "cancelled"


def decline(worker: Worker, event: Event) -> None:
    if isinstance(event, RevokeRequested):
        worker.decline_revoke(event.split)


def test_revocation_declined_is_forced_at_once() -> None:
    world = World()
    a = world.start("a", planner=planner_of(2), on_event=decline)
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2))
    world.run_until(lambda: bool(a.of(RevokeRequested)))
    (request,) = a.of(RevokeRequested)
    world.run_until(lambda: bool(a.of(Lost, request.split)), within=1)
    (lost,) = a.of(Lost, request.split)
    assert lost.reason == "revoked"
    assert a.time_of(lost) == a.time_of(request)
    world.run_until(lambda: bool(b.of(Gained, request.split)), within=1)


def test_departure_retires_the_worker_and_it_claims_nothing_more() -> None:
    world = World()
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 4 and a.leading)
    b = world.start("b", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: len(b.owned) == 2)
    gained_before = len(a.of(Gained))
    world.wait(a.depart())
    assert not a.owned
    assert not a.leading
    assert world.get(Keyspace.EPHEMERAL, KEYS.worker("a")) is None
    world.run_until(lambda: len(b.owned) == 4, within=LEASE)
    world.run_for(3 * LEASE)
    assert not a.owned
    assert len(a.of(Gained)) == gained_before
    assert not a.of(Lost)
    for split in b.owned:
        record, _ = world.record(split)
        assert record.attempts == 0


def test_missed_watch_events_recovered_by_reconcile() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"})
    # b never hears of expiries (like NATS before 2.11): only its reconcile listing can.
    b = world.start("b", planner=planner_of(1), rates=FaultRates(silent_expiry=True))
    a.kill()
    killed_at = world.now
    world.run_until(lambda: bool(b.of(Gained, "s00")), within=4 * LEASE)
    assert b.link.injected["silent_expiry"] > 0
    # At most: the lease runs out, then the next reconcile (every 5 s) sees it gone.
    assert b.time_of(b.of(Gained, "s00")[0]) - killed_at <= LEASE + 5.0 + 1.0


def test_absent_assignment_never_means_release_everything() -> None:
    world = World()
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: a.leading)
    b = world.start("b", planner=planner_of(4))
    world.run_until(lambda: len(b.owned) == 2)
    held = b.owned
    entry = world.get(Keyspace.DURABLE, KEYS.assign("b"))
    assert entry is not None
    assert isinstance(
        world.write("delete", Keyspace.DURABLE, entry.key, expected=entry.revision), Won
    )
    world.run_for(3 * LEASE)
    assert not b.of(RevokeRequested)
    assert not b.of(Lost)
    assert b.owned == held


def test_steady_fleet_writes_no_assignment() -> None:
    world = World()
    workers = [world.start(f"w{i}", planner=planner_of(12), on_event=cooperative) for i in range(3)]
    world.run_until(lambda: all(len(w.owned) == 4 for w in workers), within=3 * LEASE)
    world.run_for(LEASE)
    for w in workers:
        # Every revocation ended in exactly one way (none is in flight any more).
        counts = w.counts
        assert counts["revocation:requested"] == (
            counts["revocation:drained"]
            + counts["revocation:forced"]
            + counts["revocation:cancelled"]
        )
    assert sum(w.counts["revocation:requested"] for w in workers) > 0
    mark = [len(w.writes) for w in workers]
    world.run_for(10 * LEASE)
    ops = {op for w, m in zip(workers, mark, strict=True) for _, op, _ in w.writes[m:]}
    assert ops <= {"renew", "presence-renew", "leader-renew"}


def test_assignment_of_a_gone_instance_is_deleted_after_the_grace_window() -> None:
    world = World()
    cfg = config(rebalance_delay=10.0)
    a = world.start("a", planner=planner_of(2), cfg=cfg)
    world.run_until(lambda: a.leading)
    b = world.start("b", planner=planner_of(2), cfg=cfg)
    world.run_for(LEASE)
    assert world.get(Keyspace.DURABLE, KEYS.assign("b")) is not None
    b.kill()
    world.run_for(LEASE + 1.0)  # b's presence has expired: its window is open
    entry = world.get(Keyspace.DURABLE, KEYS.assign("b"))
    assert entry is not None
    assert decode(AssignmentRecord, entry.key, entry.value).splits
    world.run_for(10.0)
    assert world.get(Keyspace.DURABLE, KEYS.assign("b")) is None


def test_membership_debounce_delays_the_rebalance() -> None:
    world = World()
    cfg = config(membership_debounce=5.0)
    a = world.start("a", planner=planner_of(4), cfg=cfg)
    world.run_until(lambda: len(a.owned) == 4)
    world.run_for(LEASE)
    joined = world.now
    world.start("b", planner=planner_of(4), cfg=cfg)
    world.run_until(lambda: bool(a.of(RevokeRequested)), within=LEASE)
    assert a.time_of(a.of(RevokeRequested)[0]) - joined >= 5.0


def test_a_fleet_started_together_places_each_split_once() -> None:
    world = World()
    cfg = config(membership_debounce=2.0)
    workers = [world.start(name, planner=planner_of(12), cfg=cfg) for name in ("a", "b", "c")]
    world.run_until(lambda: all(len(w.owned) == 4 for w in workers), within=LEASE)
    world.run_for(LEASE)
    # The first assignment waited for the fleet to gather: nothing was given to the first
    # worker to see the plan and taken back from it.
    assert not any(w.of(RevokeRequested) for w in workers)
    assert sum(len(w.of(Gained)) for w in workers) == 12
    assert min(w.time_of(w.of(Gained)[0]) for w in workers) >= 2.0


def test_a_trickle_of_joins_does_not_postpone_a_new_jobs_first_assignment_for_ever() -> None:
    world = World()
    cfg = config(membership_debounce=2.0)
    a = world.start("a", planner=planner_of(24), cfg=cfg)
    for n in range(12):  # a join every 1.5 s: each within the window of the one before
        world.run_for(1.5)
        world.start(f"w{n:02d}", planner=planner_of(24), cfg=cfg)
        if a.of(Gained):
            break
    assert a.of(Gained)
    assert a.time_of(a.of(Gained)[0]) <= 3 * 2.0 + 1.0  # three windows after leadership began


def test_completions_alone_never_move_a_running_split() -> None:
    world = World()
    a = world.start("a", planner=planner_of(8), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 8)
    b = world.start("b", planner=planner_of(8), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 4 and len(b.owned) == 4)
    world.run_for(LEASE)
    asked = len(a.of(RevokeRequested)) + len(b.of(RevokeRequested))
    for split in sorted(b.owned)[:3]:  # b finishes three: 4 against 1, and nothing to place
        world.wait(b.commit(split, Progress(100, completed=True)))
    world.run_for(3 * LEASE)
    assert len(a.of(RevokeRequested)) + len(b.of(RevokeRequested)) == asked
    assert len(a.owned) == 4
    assert len(b.owned) == 1


def test_no_split_is_asked_to_drain_twice_within_a_drain_deadline() -> None:
    world = World()
    a = world.start("a", planner=planner_of(8))  # keeps its splits until forced (3 s)
    world.run_until(lambda: len(a.owned) == 8)
    b = world.start("b", planner=planner_of(8))
    world.run_until(lambda: bool(a.of(RevokeRequested)))
    first = {r.split for r in a.of(RevokeRequested)}
    world.start("c", planner=planner_of(8))  # at once: its share comes from a's other splits
    # Nothing on its way to b is redirected to c within the window: b gets all it was sent.
    world.run_until(lambda: len(a.owned) <= 3 and first <= b.owned, within=3 * LEASE)
    asked = [r.split for r in a.of(RevokeRequested)]
    assert len(asked) == len(set(asked))  # no split asked back twice


def test_a_second_join_right_after_a_first_is_served_at_once_not_after_a_drain_window() -> None:
    # The partition test's fleet (6 splits, 4 lanes each, no debounce): a holds 4, b joins and
    # its rebalance moves one of a's running splits; c joins 10 ms later. c must get its share
    # from the splits nobody moved, at once: holding the whole fleet for the drain window left
    # c idle until the job was over.
    world = World()
    cfg = config(max_in_flight=4, drain_deadline=30.0)
    a = world.start("a", planner=planner_of(6), cfg=cfg, on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 4)
    b = world.start("b", planner=planner_of(6), cfg=cfg, on_event=cooperative)
    world.run_until(lambda: bool(a.of(RevokeRequested)), within=1.0)
    world.run_for(0.01)
    c = world.start("c", planner=planner_of(6), cfg=cfg, on_event=cooperative)
    workers = (a, b, c)
    world.run_until(lambda: all(len(w.owned) == 2 for w in workers), within=2.0)
    asked = [r.split for w in workers for r in w.of(RevokeRequested)]
    assert len(asked) == len(set(asked))  # still: no split asked back twice
