"""Who reads what: each role's watches, point reads and listings, machine by machine.

A follower watches three exact keys and learns its share by point reads; only the leader reads
the job, and it reads ownership (leases), not progress. These tests pin what each worker is
sent and what it asks the store for, not how it keeps what it learned.
"""

from __future__ import annotations

import functools

import attrs

from spate import Event, Gained, Progress, Quarantined, RevokeRequested
from spate._core.records import (
    AssignmentRecord,
    LeaseRecord,
    PlanRecord,
    PresenceRecord,
    Status,
    VerdictRecord,
    decode,
    encode,
)
from spate._core.view.scopes import WatchScope
from spate.store import Keyspace, Won
from spate_testing.faults import FaultRates

from .world import KEYS, LEASE, Worker, World, config, cooperative, planner_of

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL
# The world's store keeps per-key TTLs: a lease is a durable key alive by its owner's session.
LEASES, lease_of = DURABLE, KEYS.lease


def split_key_deliveries(worker: Worker, since: int = 0) -> list[tuple[Keyspace, str, str]]:
    """The live events of split keys (progress records, leases) ``worker`` was sent."""
    return [
        (keyspace, key, kind)
        for _, keyspace, key, kind in worker.delivered[since:]
        if key.startswith((KEYS.split(""), KEYS.lease("")))
    ]


def progress_reads(worker: Worker, split: str, since: int = 0) -> int:
    """How many point reads of ``split``'s progress record ``worker`` sent."""
    return sum(
        op.method == "get" and op.keyspace is DURABLE and op.key == KEYS.split(split)
        for op in worker.reads[since:]
    )


def assignment_of(world: World, instance: str) -> tuple[AssignmentRecord, int] | None:
    entry = world.get(DURABLE, KEYS.assign(instance))
    if entry is None:
        return None
    return decode(AssignmentRecord, entry.key, entry.value), entry.revision


def leader_and_follower(count: int = 4, **cfg: object) -> tuple[World, Worker, Worker]:
    """``a`` leads, ``b`` follows; both hold their share of ``count`` splits, and it is quiet."""
    world = World(ticking=False)
    a = world.start("a", planner=planner_of(count), cfg=config(**cfg), on_event=cooperative)
    world.run_until(lambda: a.leading and len(a.owned) == count)
    b = world.start("b", planner=planner_of(count), cfg=config(**cfg), on_event=cooperative)
    world.run_until(lambda: len(b.owned) >= 1 and len(a.owned) + len(b.owned) == count)
    world.run_for(1.0)
    return world, a, b


# -- watch scopes ------------------------------------------------------------------------------


def test_a_follower_watches_three_exact_keys_and_lists_nothing() -> None:
    world = World()
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: a.leading and len(a.owned) == 4)
    b = world.start("b", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: len(b.owned) >= 1)
    world.run_for(3 * LEASE)  # heartbeats, renewals and reconciles come round
    assert set(b.watches) == {
        WatchScope(EPHEMERAL, KEYS.leader, exact=True),
        WatchScope(DURABLE, KEYS.plan, exact=True),
        WatchScope(DURABLE, KEYS.assign("b"), exact=True),
    }
    assert [op for op in b.reads if op.method == "list"] == []
    # What it was sent is those three keys' events, and nothing of anyone's splits.
    assert {key for _, _, key, _ in b.delivered} <= {KEYS.leader, KEYS.plan, KEYS.assign("b")}


def test_a_follower_reads_a_splits_records_side_by_side_in_one_round_trip() -> None:
    # A hand-over waits for these reads (the target learns the split came free): the
    # progress record, the lease and the spec go out together, not one after another.
    world = World()
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: a.leading and len(a.owned) == 4)
    b = world.start("b", planner=planner_of(4), on_event=cooperative)
    held = b.hold_next_read("get", DURABLE, KEYS.split("s00"))
    world.run_until(lambda: held.arrived)
    world.run_for(0.01)
    read = {op.key for op in b.reads}
    assert {KEYS.lease("s00"), KEYS.spec("s00")} <= read  # sent while the first is held
    held.release()
    world.run_until(lambda: len(b.owned) >= 1)


def test_the_leader_watches_the_ephemeral_keyspace_and_two_exact_durable_keys() -> None:
    _, a, _ = leader_and_follower()
    assert set(a.watches) == {
        WatchScope(EPHEMERAL, KEYS.prefix, exact=False),
        WatchScope(DURABLE, KEYS.plan, exact=True),
        WatchScope(DURABLE, KEYS.assign("a"), exact=True),
        # (where leases are durable keys: claims write them, ends of tenancy delete them)
        WatchScope(DURABLE, KEYS.lease_prefix, exact=False),
    }
    # It lists the durable keyspace once, when it wins the leader key (and not since).
    assert a.listings(KEYS.prefix) == 1


def test_a_plain_commit_is_delivered_to_nobody() -> None:
    world, a, b = leader_and_follower()
    workers = (a, b)
    marks = [len(w.delivered) for w in workers]
    (theirs,) = sorted(b.owned)[:1]
    (ours,) = sorted(a.owned)[:1]
    world.wait(b.commit(theirs, Progress(50, b"x")))
    world.wait(a.commit(ours, Progress(50, b"y")))
    world.run_for(1.0)
    assert [split_key_deliveries(w, m) for w, m in zip(workers, marks, strict=True)] == [[], []]
    # A completing commit deletes its lease: only the leader hears of it, once; nobody hears
    # of the progress record.
    marks = [len(w.delivered) for w in workers]
    world.wait(b.commit(theirs, Progress(100, completed=True)))
    world.run_for(1.0)
    assert split_key_deliveries(a, marks[0]) == [(LEASES, lease_of(theirs), "delete")]
    assert split_key_deliveries(b, marks[1]) == []


# -- a follower's point reads ------------------------------------------------------------------


def test_a_follower_reads_an_assigned_split_before_claiming_it() -> None:
    _, _, b = leader_and_follower()
    for split in b.owned:
        keys = (KEYS.split(split), KEYS.spec(split), lease_of(split))
        calls = [op for _, op in b.calls if op.key in keys]
        claim = next(
            i for i, op in enumerate(calls) if op.method == "create" and op.keyspace is LEASES
        )
        before = {(op.method, op.keyspace, op.key) for op in calls[:claim]}
        assert before >= {
            ("get", DURABLE, KEYS.split(split)),
            ("get", DURABLE, KEYS.spec(split)),
            ("get", LEASES, lease_of(split)),
        }, split


def test_a_follower_whose_claim_was_refused_reads_the_split_again_when_its_retry_comes_due() -> (
    None
):
    world = World(ticking=False)
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: a.leading and len(a.owned) == 4)
    refused: list[float] = []

    def another_claims_first(split: str) -> None:
        # Just before b's lease write lands, another live process's lease appears (it stays:
        # nobody deletes it within the test, so no lease event tells the leader to nudge b).
        # Its session lives, so b's read of the key again right after the refusal finds the
        # split taken, and b holds it back until its retry comes due.
        if world.get(Keyspace.EPHEMERAL, KEYS.worker("z")) is None:
            presence = PresenceRecord(nonce="n-z", max_in_flight=1)
            world.write("create", Keyspace.EPHEMERAL, KEYS.worker("z"), encode(presence))
        lease = LeaseRecord(owner="z", nonce="n-z", epoch=9)
        world.write("create", LEASES, lease_of(split), encode(lease))
        refused.append(world.now)

    b = world.start("b", planner=planner_of(4), on_event=cooperative, wait=False)
    for split in ("s00", "s01", "s02", "s03"):
        b.before_next(
            "create", LEASES, lease_of(split), functools.partial(another_claims_first, split)
        )
    world.run_until(lambda: bool(refused))
    world.run_for(0.1)
    mark = len(b.reads)
    world.run_for(1.5)
    rereads = [(t, op.key) for t, op in b.calls if op in b.reads[mark:]]
    split_keys = (KEYS.split(""), KEYS.lease(""))
    assert any(key.startswith(split_keys) and t >= refused[0] + 1.0 for t, key in rereads), rereads


def test_a_follower_waiting_on_a_draining_owner_claims_when_the_leader_nudges_it() -> None:
    # a leads and holds everything; b joins and is given half, still leased to a, whose
    # handler takes 2 s to drain. b watches no lease: it claims when the leader, seeing a's
    # lease go, rewrites b's assignment record (same content), and b reads the split again.
    world = World(ticking=False)
    cfg = config(reconcile_interval=3600.0, drain_deadline=30.0)

    def slow_drain(worker: Worker, event: Event) -> None:
        if isinstance(event, RevokeRequested):
            split = event.split

            def release() -> None:
                worker.release([split])

            worker.later(2.0, release)

    a = world.start("a", planner=planner_of(4), cfg=cfg, on_event=slow_drain)
    world.run_until(lambda: a.leading and len(a.owned) == 4)
    b = world.start("b", planner=planner_of(4), cfg=cfg)
    world.run_until(lambda: bool(a.of(RevokeRequested)))
    world.run_until(lambda: len(b.owned) >= 1, within=5.0)  # (a lease is 9 s)
    world.run_for(1.0)
    moved = sorted(b.owned)
    assert moved
    assert not (set(moved) & a.owned)
    for split in moved:
        gone = max(
            w.at
            for w in world.store_writes(LEASES, lease_of(split))
            if w.op == "delete" and w.outcome == "won"
        )
        gained = b.time_of(b.of(Gained, split)[0])
        assert gone <= gained < gone + 2.0, (split, gone, gained)  # long before any backstop
    nudges = [w for w in world.store_writes(DURABLE, KEYS.assign("b")) if w.outcome == "won"]
    assert len(nudges) >= 2  # the assignment, then a rewrite of it: the nudge


def test_a_follower_waiting_on_a_draining_follower_claims_when_the_leader_nudges_it() -> None:
    # The draining owner is another follower: the leader hears its lease go on its watch.
    world = World(ticking=False)
    cfg = config(reconcile_interval=3600.0, drain_deadline=30.0)

    def slow_drain(worker: Worker, event: Event) -> None:
        if isinstance(event, RevokeRequested):
            split = event.split

            def release() -> None:
                worker.release([split])

            worker.later(2.0, release)

    a = world.start("a", planner=planner_of(6), cfg=config(max_in_flight=1, **_quiet()))
    world.run_until(lambda: a.leading and len(a.owned) == 1)
    b = world.start("b", planner=planner_of(6), cfg=cfg, on_event=slow_drain)
    world.run_until(lambda: len(b.owned) == 5)
    c = world.start("c", planner=planner_of(6), cfg=cfg)
    world.run_until(lambda: bool(b.of(RevokeRequested)))
    world.run_until(lambda: len(c.owned) >= 1, within=5.0)  # (a lease is 9 s)
    world.run_for(1.0)
    for split in sorted(c.owned):
        gone = max(
            w.at
            for w in world.store_writes(LEASES, lease_of(split))
            if w.op == "delete" and w.outcome == "won"
        )
        gained = c.time_of(c.of(Gained, split)[0])
        assert gone <= gained < gone + 2.0, (split, gone, gained)


def _quiet() -> dict[str, float]:
    return {"reconcile_interval": 3600.0, "drain_deadline": 30.0}


def test_a_followers_backstop_reads_its_own_keys_and_never_lists_the_job() -> None:
    world, _, b = leader_and_follower(reconcile_interval=3600.0)
    mark = len(b.reads)
    b.reconcile()
    world.run_for(1.0)
    reads = b.reads[mark:]
    assert [op for op in reads if op.method == "list"] == []
    keys = {(op.keyspace, op.key) for op in reads}
    assert keys >= {(EPHEMERAL, KEYS.leader), (DURABLE, KEYS.plan), (DURABLE, KEYS.assign("b"))}
    share = assignment_of(world, "b")
    assert share is not None
    unheld = set(share[0].splits) - b.owned
    # (and the session, the presence record, of a lease one of them carries)
    others = {k for _, k in keys} - {KEYS.leader, KEYS.plan, KEYS.assign("b")}
    assert {k for k in others if not k.startswith(KEYS.worker(""))} <= {
        key for split in unheld for key in (KEYS.split(split), KEYS.spec(split), lease_of(split))
    }


# -- the leader's reads ------------------------------------------------------------------------


def test_the_leader_reads_a_progress_record_once_per_ownership_change_and_never_on_a_renewal() -> (
    None
):
    world = World()  # ticking: heartbeats renew every session
    a = world.start("a", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: a.leading and len(a.owned) == 4)
    mark = len(a.reads)
    b = world.start("b", planner=planner_of(4), on_event=cooperative)
    world.run_until(lambda: len(b.owned) >= 1 and len(a.owned) + len(b.owned) == 4)
    world.run_for(1.0)
    for split in b.owned:
        # Two lease events ended a's tenancy and began b's: a read for each at most.
        assert 1 <= progress_reads(a, split, mark) <= 2, split
    # Session renewals (the presence records every lease names) change no ownership.
    mark, renewals = len(a.reads), len(world.store_writes(EPHEMERAL, KEYS.worker("")))
    world.run_for(3 * LEASE)
    assert len(world.store_writes(EPHEMERAL, KEYS.worker(""))) > renewals
    assert [op.key for op in a.reads[mark:] if op.key.startswith(KEYS.split(""))] == []
    # A completion ends a tenancy: one read, of that split.
    split = sorted(b.owned)[0]
    mark = len(a.reads)
    world.wait(b.commit(split, Progress(100, completed=True)))
    world.run_for(1.0)
    assert [op.key for op in a.reads[mark:] if op.key.startswith(KEYS.split(""))] == [
        KEYS.split(split)
    ]


def test_the_leaders_backstop_lists_the_job_in_pages_and_never_in_one_listing() -> None:
    world = World(ticking=False)
    a = world.start(
        "a",
        planner=planner_of(7),
        cfg=config(reconcile_interval=3600.0, list_page_size=3),
        on_event=cooperative,
    )
    world.run_until(lambda: a.leading and len(a.owned) == 7)
    world.run_for(1.0)
    records = {
        keyspace: len(world.model.list(keyspace, KEYS.prefix)) for keyspace in (DURABLE, EPHEMERAL)
    }
    mark = len(a.reads)
    a.reconcile()
    world.run_for(1.0)
    reads = a.reads[mark:]
    assert [op for op in reads if op.method == "list"] == []
    for keyspace, count in records.items():
        pages = [op for op in reads if op.method == "list-page" and op.keyspace is keyspace]
        assert {op.page_size for op in pages} == {3}
        assert {op.key for op in pages} == {KEYS.prefix}
        # One listing: it starts once (no cursor), then follows its cursor page after page
        # (a full last page is followed by one empty page, which ends it).
        assert [op.cursor is None for op in pages] == [True] + [False] * (len(pages) - 1)
        assert len(pages) == count // 3 + 1


def test_a_dead_worker_seen_only_by_the_leaders_paged_backstop_loses_its_splits() -> None:
    # The leader never hears of expiries (as on NATS before 2.11): only its backstop can
    # notice that c's session (its presence record) is gone. The listing comes in pages of
    # one record, so the presence record is missed by every page rather than deleted by any:
    # the end of the listing must decide that what no page brought is gone.
    world = World()
    quiet = FaultRates(silent_expiry=True)
    cfg = config(list_page_size=1, reconcile_interval=5.0, rebalance_delay=0.0)
    a = world.start("a", planner=planner_of(6), cfg=cfg, rates=quiet, on_event=cooperative)
    world.run_until(lambda: a.leading)
    b = world.start("b", planner=planner_of(6), cfg=cfg, rates=quiet, on_event=cooperative)
    c = world.start("c", planner=planner_of(6), cfg=cfg, rates=quiet, on_event=cooperative)
    world.run_until(lambda: all(len(w.owned) == 2 for w in (a, b, c)), within=6 * LEASE)
    held = set(c.owned)
    c.kill()
    world.run_until(lambda: a.owned | b.owned >= held, within=4 * LEASE)
    assert a.link.injected["silent_expiry"] > 0
    assert a.leading


def test_only_the_leader_quarantines() -> None:
    # b dies holding a split it never moved; with max_attempts=1 the takeover would exhaust it,
    # so it is to be quarantined. The leader's quarantine write is held in the network, and
    # the split goes to c (the one free lane), which reads it and sees a quarantine due: c
    # must leave it to the leader.
    world = World()
    cfg = {"max_attempts": 1}
    a = world.start("a", planner=planner_of(3), cfg=config(max_in_flight=1, **cfg))
    world.run_until(lambda: a.leading and len(a.owned) == 1)
    b = world.start("b", planner=planner_of(3), cfg=config(max_in_flight=1, **cfg))
    world.run_until(lambda: len(b.owned) == 1)
    c = world.start("c", planner=planner_of(3), cfg=config(max_in_flight=2, **cfg))
    world.run_until(lambda: len(c.owned) == 1)
    (dead,) = b.owned
    held = a.hold_next("update", DURABLE, KEYS.split(dead))
    b.kill()
    world.run_until(lambda: held.arrived, within=3 * LEASE)
    world.run_until(
        lambda: (share := assignment_of(world, "c")) is not None and dead in share[0].splits
    )
    world.run_for(LEASE)
    assert progress_reads(c, dead) >= 1  # c did read it
    assert [op for op in c.ops if op.operation == "quarantine"] == []
    assert world.record(dead)[0].status is Status.RUNNABLE
    held.release()
    world.run_until(lambda: bool(c.of(Quarantined, dead)) or bool(a.of(Quarantined, dead)))
    assert world.record(dead)[0].status is Status.QUARANTINED
    assert [op.operation for op in a.ops if op.key == KEYS.split(dead)].count("quarantine") == 1


def test_an_assignment_record_of_a_newer_generation_deposes_a_leader() -> None:
    world, a, _ = leader_and_follower()
    entry = world.get(DURABLE, KEYS.assign("a"))
    assert entry is not None
    record = decode(AssignmentRecord, entry.key, entry.value)
    # A successor (whose plan record this leader has not heard of) writes a's assignment.
    newer = attrs.evolve(record, generation=record.generation + 1)
    assert isinstance(world.write("update", DURABLE, entry.key, encode(newer), entry.revision), Won)
    world.run_until(lambda: not a.leading, within=1.0)


def test_a_new_leader_withholds_the_splits_of_workers_it_did_not_see_leave() -> None:
    # c dies while a leads; then a leaves and b, a follower that never watched presence,
    # leads. b withholds c's splits for rebalance_delay, as a would have (c may be restarting).
    world = World()
    cfg = config(rebalance_delay=30.0)
    a = world.start("a", planner=planner_of(6), cfg=cfg, on_event=cooperative)
    world.run_until(lambda: a.leading and len(a.owned) == 6)
    b = world.start("b", planner=planner_of(6), cfg=cfg, on_event=cooperative)
    c = world.start("c", planner=planner_of(6), cfg=cfg, on_event=cooperative)
    world.run_until(lambda: len(b.owned) == 2 and len(c.owned) == 2)
    world.run_for(1.0)
    theirs = set(c.owned)
    c.kill()
    world.run_until(lambda: world.get(EPHEMERAL, KEYS.worker("c")) is None, within=2 * LEASE)
    world.wait(a.depart())
    world.run_until(lambda: b.leading, within=2 * LEASE)
    led_at = world.now
    world.run_until(lambda: len(b.owned) == 4, within=10.0)
    world.run_for(20.0)
    assert not (b.owned & theirs)
    share = assignment_of(world, "b")
    assert share is not None
    assert not (set(share[0].splits) & theirs)
    world.run_until(lambda: b.owned >= theirs, within=30.0)
    assert world.now >= led_at + 30.0 - 1.0


def test_a_requeue_that_reopens_the_job_makes_the_leader_list_it_again() -> None:
    # The operator's requeue moves records back (here: s01, quarantined, made runnable) and
    # clears the published verdict. No lease event tells the leader of the records it moved:
    # the plan record's cleared verdict makes it list the job again.
    world = World(ticking=False)
    a = world.start("a", planner=planner_of(2), cfg=config(max_attempts=1), on_event=cooperative)
    world.run_until(lambda: a.leading and len(a.owned) == 2)
    world.wait(a.fail("s01", "poison"))  # at the cap: quarantined
    assert world.record("s01")[0].status is Status.QUARANTINED
    world.wait(a.commit("s00", Progress(5, b"x")))  # the job is not finished
    world.run_for(1.0)  # (the leader's read of s01 after its lease went is in)
    a.deafen(DURABLE, KEYS.plan)  # its plan watch is slow: the two writes arrive together
    plan_entry = world.get(DURABLE, KEYS.plan)
    assert plan_entry is not None
    plan = decode(PlanRecord, plan_entry.key, plan_entry.value)
    stalled = attrs.evolve(
        plan, verdict=VerdictRecord(all_complete=False, completed=0, quarantined=1)
    )
    world.write("update", DURABLE, KEYS.plan, encode(stalled), plan_entry.revision)
    with_verdict = world.get(DURABLE, KEYS.plan)
    assert with_verdict is not None
    # spate requeue: the quarantined split runnable again, then the verdict cleared.
    record, revision = world.record("s01")
    runnable = attrs.evolve(record, status=Status.RUNNABLE, attempts=0)
    world.write("update", DURABLE, KEYS.split("s01"), encode(runnable), revision)
    world.write("update", DURABLE, KEYS.plan, encode(plan), with_verdict.revision)
    reopened = world.get(DURABLE, KEYS.plan)
    assert reopened is not None
    listed = a.listings(KEYS.prefix)
    a.watch_batch(DURABLE, [with_verdict, reopened])
    a.hear(DURABLE)
    world.run_until(lambda: "s01" in a.owned, within=5.0)
    assert a.listings(KEYS.prefix) == listed + 1


def test_a_new_leader_places_nothing_until_it_has_listed_the_job() -> None:
    world, a, b = leader_and_follower(count=4, reconcile_interval=3600.0)
    listing = b.hold_next_read("list", DURABLE, KEYS.prefix)
    world.wait(a.depart())
    world.run_until(lambda: b.leading and listing.arrived, within=2 * LEASE)
    mark = len(b.ops)
    world.run_for(5.0)
    assert [op for op in b.ops[mark:] if op.operation == "assign"] == []
    assert len(b.owned) < 4  # a's hand-backs wait for b's first placement
    listing.release()
    world.run_until(lambda: len(b.owned) == 4, within=5.0)
    assert [op for op in b.ops[mark:] if op.operation == "assign"]


def test_a_leaving_follower_reads_its_splits_and_the_workers_and_never_lists_the_job() -> None:
    world, a, b = leader_and_follower(count=4, reconcile_interval=3600.0)
    handed = sorted(b.owned)
    mark = len(b.reads)
    world.wait(b.depart())
    world.run_until(lambda: b.handed_over(handed), within=10.0)
    reads = {(op.method, op.keyspace, op.key) for op in b.reads[mark:]}
    workers = {("list", EPHEMERAL, KEYS.worker("")), ("list", DURABLE, KEYS.assign(""))}
    ours = {("get", DURABLE, KEYS.split(s)) for s in handed}
    assert workers <= reads
    assert reads - workers <= ours | {("get", DURABLE, KEYS.assign("b"))}, reads
    assert a.owned >= set(handed)


def test_placement_withholds_a_departed_workers_split_by_its_lease_owner_first() -> None:
    # d dies holding its splits; rebalance_delay withholds them. Then e's lease appears on one
    # of them (a claim whose record write has not landed: the record still names d). The
    # leader places that split by the lease's owner, e, which is live: e keeps it.
    world = World()
    cfg = config(rebalance_delay=60.0)
    a = world.start("a", planner=planner_of(4), cfg=config(max_in_flight=1, rebalance_delay=60.0))
    world.run_until(lambda: a.leading and len(a.owned) == 1)
    d = world.start("d", planner=planner_of(4), cfg=config(max_in_flight=3, rebalance_delay=60.0))
    world.run_until(lambda: len(d.owned) == 3)
    e = world.start("e", planner=planner_of(4), cfg=cfg)
    world.run_for(1.0)
    assert not e.owned
    theirs = sorted(d.owned)
    d.kill()
    world.run_until(
        lambda: (
            world.get(EPHEMERAL, KEYS.worker("d")) is None  # d's session, and its leases
        ),
        within=2 * LEASE,
    )
    world.run_for(1.0)
    assert not e.owned  # withheld: d may be restarting
    taken = theirs[0]
    record, _ = world.record(taken)
    lease = LeaseRecord(owner="e", nonce=e.nonce, epoch=record.epoch + 1)
    stale = world.get(LEASES, lease_of(taken))
    assert stale is not None  # d's lease key, expired with its session
    world.write("update", LEASES, lease_of(taken), encode(lease), stale.revision)
    world.run_until(lambda: taken in e.owned, within=5.0)
    share = assignment_of(world, "e")
    assert share is not None
    assert set(share[0].splits) & set(theirs) == {taken}
