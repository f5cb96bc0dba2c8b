"""Assignment, revocation (drained, forced, cancelled, declined), departure, reconcile."""

from __future__ import annotations

import trio

from spate import AllComplete, Event, Gained, Lost, Progress, RevokeRequested
from spate._core.records import AssignmentRecord, decode
from spate.store import Keyspace, Won
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultRates, FaultyStore

from .harness import (
    KEYS,
    TTL,
    Worker,
    client,
    config,
    cooperative,
    planner_of,
    record_of,
    spawn,
)

D, E = Keyspace.DURABLE, Keyspace.EPHEMERAL


async def test_revocation_drained(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(4), on_event=cooperative)
        await a.until(lambda: len(a.c.owned) == 4)
        b = await spawn(nursery, client(server), "b", planner=planner_of(4))
        await b.until(lambda: len(b.c.owned) == 2)
        assert len(a.of(RevokeRequested)) == 2
        assert not a.of(Lost)
        assert a.metrics.counts["revocation:requested"] == 2
        assert a.metrics.counts["revocation:drained"] == 2
        for gained in b.of(Gained):
            assert gained.progress.watermark == 7  # the drain's final commit: nothing replays
        nursery.cancel_scope.cancel()


async def test_revocation_forced_at_deadline(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(2))
        await a.until(lambda: len(a.c.owned) == 2)
        b = await spawn(nursery, client(server), "b", planner=planner_of(2))
        request = await a.wait_for(RevokeRequested)
        lost = await a.wait_for(Lost, request.split)
        assert lost.reason == "revoked"
        assert a.time_of(lost) - a.time_of(request) == 3.0  # drain_deadline
        await b.wait_for(Gained, request.split, within=1)
        record, _ = await record_of(client(server), request.split)
        assert record.attempts == 0  # forcing is a release: being revoked is not poison
        assert a.metrics.counts["revocation:forced"] == 1
        assert a.metrics.counts["lost:revoked"] == 1
        nursery.cancel_scope.cancel()


async def test_revocation_cancelled_and_then_bounded_by_silence(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(2))
        await a.until(lambda: len(a.c.owned) == 2)
        b = await spawn(nursery, client(server), "b", planner=planner_of(2))
        request = await a.wait_for(RevokeRequested)
        await b.c.depart()  # the move is no longer wanted: the leader names the split for a again
        await a.until(lambda: a.metrics.counts["revocation:cancelled"] == 1, within=1)
        # A drain that keeps committing is not forced, however long it takes.
        for step in range(1, 5):
            await trio.sleep(2.0)
            await a.c.commit(request.split, Progress(step))
        assert not a.of(Lost)
        # Silence for a whole drain deadline releases it, and a claims it back afresh.
        lost = await a.wait_for(Lost, request.split, within=4)
        assert lost.reason == "revoked"
        await a.until(lambda: len(a.of(Gained, request.split)) == 2, within=1)
        assert a.of(Gained, request.split)[1].progress.watermark == 4
        assert a.metrics.counts["revocation:requested"] == 1
        assert a.metrics.counts["revocation:forced"] == 0  # it ended as "cancelled"
        nursery.cancel_scope.cancel()


async def decline(worker: Worker, event: Event) -> None:
    if isinstance(event, RevokeRequested):
        await worker.c.decline_revoke(event.split)


async def test_revocation_declined_is_forced_at_once(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(2), on_event=decline)
        await a.until(lambda: len(a.c.owned) == 2)
        b = await spawn(nursery, client(server), "b", planner=planner_of(2))
        request = await a.wait_for(RevokeRequested)
        lost = await a.wait_for(Lost, request.split, within=1)
        assert lost.reason == "revoked"
        assert a.time_of(lost) == a.time_of(request)
        await b.wait_for(Gained, request.split, within=1)
        nursery.cancel_scope.cancel()


async def test_departure_retires_the_worker_and_it_claims_nothing_more(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(4), on_event=cooperative)
        await a.until(lambda: len(a.c.owned) == 4 and a.c.is_leader)
        b = await spawn(nursery, client(server), "b", planner=planner_of(4), on_event=cooperative)
        await b.until(lambda: len(b.c.owned) == 2)
        gained_before = len(a.of(Gained))
        await a.c.depart()
        assert not a.c.owned
        assert not a.c.is_leader
        assert await client(server).get(E, KEYS.worker("a")) is None
        await b.until(lambda: len(b.c.owned) == 4, within=TTL)
        await trio.sleep(3 * TTL)
        assert not a.c.owned
        assert len(a.of(Gained)) == gained_before
        assert not a.of(Lost)
        for split in b.c.owned:
            record, _ = await record_of(client(server), split)
            assert record.attempts == 0
        nursery.cancel_scope.cancel()


async def test_missed_watch_events_recovered_by_reconcile(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    # b never hears of expiries (like NATS before 2.11): only its reconcile listing can.
    deaf = FaultyStore(client(server), rates=FaultRates(silent_expiry=True), name="b")
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        b = await spawn(nursery, deaf, "b", planner=planner_of(1))
        a.kill()
        killed_at = trio.current_time()
        gained = await b.wait_for(Gained, "s00", within=4 * TTL)
        assert deaf.injected["silent_expiry"] > 0
        # At most: the lease runs out, then the next reconcile (every 5 s) sees it gone.
        assert b.time_of(gained) - killed_at <= TTL + 5.0 + 1.0
        nursery.cancel_scope.cancel()


async def test_broken_watch_is_rewatched_and_rebuilt(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    cut = FaultyStore(client(server), name="b")
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(1))
        await a.until(lambda: a.c.owned == {"s00"})
        b = await spawn(
            nursery, cut, "b", planner=planner_of(1), cfg=config(reconcile_interval=1000.0)
        )
        cut.partition()
        await trio.sleep(0.5)
        await a.c.commit("s00", Progress(1, completed=True))
        await trio.sleep(0.5)
        cut.heal()
        await b.wait_for(AllComplete, within=10)  # learned from the new watch's snapshot
        nursery.cancel_scope.cancel()


async def test_absent_assignment_never_means_release_everything(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    raw = client(server)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(4), on_event=cooperative)
        await a.until(lambda: a.c.is_leader)
        b = await spawn(nursery, client(server), "b", planner=planner_of(4))
        await b.until(lambda: len(b.c.owned) == 2)
        held = set(b.c.owned)
        entry = await raw.get(D, KEYS.assign("b"))
        assert entry is not None
        assert isinstance(await raw.delete(D, entry.key, entry.revision), Won)
        await trio.sleep(3 * TTL)
        assert not b.of(RevokeRequested)
        assert not b.of(Lost)
        assert b.c.owned == held
        nursery.cancel_scope.cancel()


async def test_steady_fleet_writes_no_assignment(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        workers = [
            await spawn(
                nursery, client(server), f"w{i}", planner=planner_of(12), on_event=cooperative
            )
            for i in range(3)
        ]
        await workers[0].until(lambda: all(len(w.c.owned) == 4 for w in workers), within=3 * TTL)
        await trio.sleep(TTL)
        for w in workers:
            # Every revocation ended in exactly one way (none is in flight any more).
            counts = w.metrics.counts
            assert counts["revocation:requested"] == (
                counts["revocation:drained"]
                + counts["revocation:forced"]
                + counts["revocation:cancelled"]
            )
        assert sum(w.metrics.counts["revocation:requested"] for w in workers) > 0
        mark = [len(w.metrics.writes) for w in workers]
        await trio.sleep(10 * TTL)
        ops = {op for w, m in zip(workers, mark, strict=True) for _, op, _ in w.metrics.writes[m:]}
        assert ops <= {"renew", "presence-renew", "leader-renew"}
        nursery.cancel_scope.cancel()


async def test_assignment_of_a_gone_instance_is_deleted_after_the_grace_window(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    raw = client(server)
    cfg = config(rebalance_delay=10.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(2), cfg=cfg)
        await a.until(lambda: a.c.is_leader)
        b = await spawn(nursery, client(server), "b", planner=planner_of(2), cfg=cfg)
        await trio.sleep(TTL)
        assert await raw.get(D, KEYS.assign("b")) is not None
        b.kill()
        await trio.sleep(TTL + 1.0)  # b's presence has expired: its window is open
        entry = await raw.get(D, KEYS.assign("b"))
        assert entry is not None
        assert decode(AssignmentRecord, entry.key, entry.value).splits
        await trio.sleep(10.0)
        assert await raw.get(D, KEYS.assign("b")) is None
        nursery.cancel_scope.cancel()


async def test_membership_debounce_delays_the_rebalance(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    cfg = config(membership_debounce=5.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(4), cfg=cfg)
        await a.until(lambda: len(a.c.owned) == 4)
        await trio.sleep(TTL)
        joined = trio.current_time()
        await spawn(nursery, client(server), "b", planner=planner_of(4), cfg=cfg)
        request = await a.wait_for(RevokeRequested, within=TTL)
        assert a.time_of(request) - joined >= 5.0
        nursery.cancel_scope.cancel()
