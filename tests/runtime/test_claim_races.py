"""Regression scenarios found by the demo: a claim that lands late must not undo newer history."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import trio

from spate import Gained
from spate._core.records import ProgressRecord, Status, encode
from spate.store import Keyspace, WriteResult
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultRates, FaultyStore

from .harness import KEYS, TTL, HookStore, client, config, planner_of, record_of, spawn

D, E = Keyspace.DURABLE, Keyspace.EPHEMERAL


class LateLeaseStore(HookStore):
    """Holds the first lease create of ``split`` until ``release`` is set, then lets it land.

    The wait ignores cancellation, as a stopped process cannot time out its own request.
    """

    def __init__(self, inner: object, split: str) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.key = KEYS.split(split)
        self.arrived = trio.Event()
        self.release = trio.Event()

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        if keyspace is E and key == self.key and not self.release.is_set():
            self.arrived.set()
            with trio.CancelScope(shield=True):
                await self.release.wait()
                return await self.inner.create(keyspace, key, value, **named)
        return await super().create(keyspace, key, value, **named)


async def test_a_claim_whose_lease_lands_after_another_owner_finished_writes_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Found by `spate demo`: a frozen worker's claim decided its epoch before the freeze, its
    # lease create landed after the thaw (the key was free again: the other owner had
    # finished), and it then wrote that stale epoch over the finished record with a fresh
    # revision, un-finishing the split at a lower epoch.
    server = MemoryServer()
    store = LateLeaseStore(client(server), "s00")
    observer = client(server)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(1))
        await store.arrived.wait()
        record, revision = await record_of(observer, "s00")
        finished = attrs.evolve(
            record,
            epoch=record.epoch + 3,
            owner="b",
            status=Status.COMPLETED,
            completed=True,
            watermark=100,
        )
        await observer.update(D, KEYS.split("s00"), encode(finished), revision)
        await trio.sleep(1)  # a's watch brings the finished record into its view
        store.release.set()
        await trio.sleep(5)
        final, _ = await record_of(observer, "s00")
        assert final == finished
        assert not a.of(Gained)
        assert await observer.get(E, KEYS.split("s00")) is None  # the stray lease is removed
        nursery.cancel_scope.cancel()


async def test_a_claim_whose_lease_lands_after_another_claim_never_lowers_the_epoch(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Another worker claims the split (epoch + 1) while a's lease write is held; it has no
    # lease (it died at once), so a may take the split over — but only at a newer epoch.
    server = MemoryServer()
    store = LateLeaseStore(client(server), "s00")
    observer = client(server)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner_of(1))
        await store.arrived.wait()
        record, revision = await record_of(observer, "s00")
        taken: ProgressRecord = attrs.evolve(record, epoch=record.epoch + 1, owner="b")
        await observer.update(D, KEYS.split("s00"), encode(taken), revision)
        await trio.sleep(1)
        store.release.set()
        await trio.sleep(5)
        final, _ = await record_of(observer, "s00")
        assert final.epoch > taken.epoch
        assert all(gained.epoch > taken.epoch for gained in a.of(Gained))
        nursery.cancel_scope.cancel()


async def test_renewals_leave_slack_a_held_lease_is_renewed_on_every_heartbeat(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Found by the benchmarks: renewing only once a full third of the lease had passed skipped
    # every early (jittered) heartbeat, so leases went two thirds of their life unrenewed.
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, client(server), "a", planner=planner_of(2))
        await a.wait_for(Gained)
        start = trio.current_time()
        await trio.sleep(20 * TTL)
        nursery.cancel_scope.cancel()
    renewals = [t for t, op, outcome in a.metrics.writes if op == "renew" and t >= start]
    per_split = len(renewals) / 2
    assert per_split >= 20 * 3 * 0.8  # about one renewal per heartbeat, three per lease
    times = sorted({round(t, 6) for t in renewals})
    assert max(b - a for a, b in itertools.pairwise(times)) <= 0.45 * TTL


async def test_failover_on_a_store_with_silent_expiry_takes_about_a_lease_not_a_reconcile(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Found by the benchmarks: where expiry never reaches watchers, only the reconcile listing
    # notices a dead worker's leases, so with the default 30 s interval failover took 30 s.
    server = MemoryServer()
    quiet = FaultRates(silent_expiry=True)
    a_store = FaultyStore(client(server), rates=quiet)
    cfg = config(reconcile_interval=30.0, rebalance_delay=0.0)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, a_store, "a", planner=planner_of(4), cfg=cfg)
        await a.until(lambda: len(a.of(Gained)) == 4)
        b = await spawn(
            nursery, FaultyStore(client(server), rates=quiet), "b", planner=planner_of(4), cfg=cfg
        )
        await b.until(lambda: len(b.of(Gained)) >= 1)
        a_store.partition()
        a.kill()
        died = trio.current_time()
        await b.until(lambda: len({g.split for g in b.of(Gained)}) == 4, within=60)
        assert trio.current_time() - died <= 2 * TTL
        nursery.cancel_scope.cancel()
