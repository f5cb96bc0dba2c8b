"""Every guarded write a fleet makes happens inside its own spate span.

A fleet of run_worker workers on one memory server, each with its own store client wrapped
in a FaultyStore (its process's trouble) and a RecordingStore (which notes the span current
at every write the store receives), goes through what fleets meet: a worker joins (the
leader revokes splits to balance), one is killed (failover after its leases expire), one is
frozen past its lease and wakes as a zombie (its late writes are fenced), one leaves
gracefully (hand-back, resignation, presence deleted), and a poison split fails until it is
quarantined, then the operator requeues it. Every write the store received is checked.
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from spate import (
    AllComplete,
    Config,
    Plan,
    PlanContext,
    SplitHandle,
    SplitSpec,
    Stalled,
    run_worker,
)
from spate import _write_spans as write_spans
from spate._core.records import Keys
from spate.ops import requeue
from spate.store import Keyspace, Store, Won, WriteResult
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultyStore

from ._coverage import Noted, RecordingStore, uncovered
from .conftest import Spans

LEASE = 3.0
JOB = "cov"
POISON = "s05"
SPLITS = 16
STEPS = 40


def config() -> Config:
    return Config(
        lease_duration=LEASE,
        op_timeout=0.5,
        # Three workers hold every split (6 + 5 + 5), so the fourth's join must take owned
        # splits away: revocations, whatever the timing (with 4 lanes each, the joiner could
        # be given just the 4 queued splits and nothing would be revoked).
        max_in_flight=6,
        max_attempts=3,
        # The poison split fails at once, each failure one fail write (counted below).
        failure_backoff=0,
        rebalance_delay=0.0,
        # No join window: the fourth worker must join a running job (placed by the others).
        membership_debounce=0.0,
        drain_deadline=LEASE,
        reconcile_interval=LEASE,
        replan_interval=60.0,
        planner_thread=False,
    )


def plan(ctx: PlanContext) -> Plan:
    return Plan([SplitSpec(f"s{i:02d}", weight=1) for i in range(SPLITS)], final=True)


@attrs.define
class Seen:
    revoked: int = 0
    poison_runs: int = 0


def handler_for(seen: Seen):  # type: ignore[no-untyped-def]
    async def handle(split: SplitHandle) -> None:
        if split.id == POISON:
            seen.poison_runs += 1
            await trio.sleep(0.2)
            raise RuntimeError("poison record")
        pos = split.progress.watermark or 0
        while pos < STEPS:
            await trio.sleep(0.5)
            pos += 1
            await split.commit(pos)
            if split.revoke_requested.is_set():
                seen.revoked += 1
                return
        await split.commit(pos, completed=True)

    return handle


@attrs.define(eq=False)
class Worker:
    name: str
    faulty: FaultyStore
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    verdict: AllComplete | Stalled | None = None
    done: trio.Event = attrs.field(factory=trio.Event)


async def run_fleet(noted: list[Noted], seen: Seen) -> dict[str, Worker]:
    server = MemoryServer()
    workers: dict[str, Worker] = {}

    async def run(worker: Worker, client: MemoryStore) -> None:
        async with client:
            try:
                with worker.scope:
                    worker.verdict = await run_worker(
                        RecordingStore(worker.faulty, noted, worker.name),
                        job=JOB,
                        instance=worker.name,
                        planner=plan,
                        handler=handler_for(seen),
                        config=config(),
                        leave_deadline=LEASE * 2,
                    )
            finally:
                worker.done.set()

    def add(nursery: trio.Nursery, name: str) -> Worker:
        client = MemoryStore(server=server, ephemeral_ttl=LEASE)
        worker = Worker(name, FaultyStore(client, rng=random.Random(len(workers)), name=name))
        workers[name] = worker
        nursery.start_soon(run, worker, client)
        return worker

    async with trio.open_nursery() as nursery:
        for i in range(3):
            add(nursery, f"w{i + 1}")
        await trio.sleep(2.0)
        add(nursery, "w4")  # joins: the leader moves splits to it (revocations)
        await trio.sleep(2.0)
        killed = workers["w2"]  # crashes: nothing handed back, its leases must expire
        killed.faulty.partition()
        killed.scope.cancel()
        await trio.sleep(1.0)
        zombie = workers["w3"]  # stops past its lease, then wakes with stale writes in flight
        zombie.faulty.freeze()
        await trio.sleep(LEASE * 2.5)
        zombie.faulty.thaw()
        await trio.sleep(1.0)
        workers["w1"].scope.cancel()  # leaves gracefully
        with trio.fail_after(300):
            for worker in workers.values():
                await worker.done.wait()
        async with MemoryStore(server=server, ephemeral_ttl=LEASE) as operator:
            # The operator's requeue is a fenced write too.
            await requeue(RecordingStore(operator, noted, "operator"), JOB, [POISON])
    return workers


async def test_every_write_of_a_troubled_fleet_is_inside_its_spate_span(
    spans: Spans, autojump_clock: trio.testing.MockClock
) -> None:
    noted: list[Noted] = []
    seen = Seen()
    workers = await run_fleet(noted, seen)
    finished = spans.all()

    # The trouble really happened, or the coverage would prove little.
    verdicts = {w.verdict for w in workers.values() if w.verdict is not None}
    assert verdicts == {Stalled(completed=SPLITS - 1, quarantined=1)}
    assert seen.revoked >= 1
    assert seen.poison_runs >= 1
    by_name: dict[str, list[dict[str, object]]] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(dict(span.attributes or {}))

    def count(name: str, **where: object) -> int:
        return sum(
            all(a.get(f"spate.{k}") == v for k, v in where.items()) for a in by_name.get(name, [])
        )

    # The poison split's last failure quarantines it (one write: attempts and status).
    assert count("spate.fail", outcome="won", split=POISON) == 3
    assert count("spate.requeue", outcome="won", split=POISON) == 1
    assert count("spate.commit", outcome="won") >= SPLITS
    assert count("spate.lease-release", outcome="won") >= 1
    assert count("spate.presence-delete", outcome="won") >= 1
    assert count("spate.resign") + count("spate.elect", outcome="won") >= 1
    zombie_lost = [
        a
        for name in ("spate.renew", "spate.commit", "spate.presence-renew", "spate.leader-renew")
        for a in by_name.get(name, [])
        if a["spate.instance"] == "w3" and a["spate.outcome"] == "lost"
    ]
    assert zombie_lost, "the zombie's late writes should have been fenced"
    w2_keys = {
        a["spate.key"]
        for a in by_name.get("spate.claim", [])
        if a["spate.instance"] == "w2" and a["spate.outcome"] == "won"
    }
    taken_over = [
        a
        for a in by_name.get("spate.claim", [])
        if a["spate.key"] in w2_keys and a["spate.instance"] != "w2" and a["spate.outcome"] == "won"
    ]
    assert taken_over, "another worker should have claimed the killed worker's splits"

    writes = len(noted)
    assert writes > 100
    problems = uncovered(noted, finished)
    import collections

    print(
        collections.Counter(
            p.split(": ", 1)[1].split(" wrote")[0] if "epoch" in p else p.split(": ", 1)[1]
            for p in problems
        )
    )
    assert problems == []


async def test_a_write_around_fenced_write_is_caught(spans: Spans) -> None:
    noted: list[Noted] = []
    keys = Keys(JOB)
    scope = write_spans.Scope(JOB, "w1", "memory")
    async with MemoryStore() as inner:
        store = RecordingStore(inner, noted, "w1")
        await write_spans.write(
            store,
            scope,
            "seed-split",
            "create",
            Keyspace.DURABLE,
            keys.split("a"),
            b"",
            split="a",
            epoch=0,
        )
        assert uncovered(noted, spans.all()) == []
        # A write site that forgot write_spans.write:
        await store.create(Keyspace.EPHEMERAL, keys.worker("w1"), b"")
        problems = uncovered(noted, spans.all())
        assert problems == [f"create ephemeral:{keys.worker('w1')} (store w1): no span was current"]


async def test_a_write_inside_a_foreign_or_wrong_span_is_caught(spans: Spans) -> None:
    from opentelemetry import trace

    noted: list[Noted] = []
    keys = Keys(JOB)
    scope = write_spans.Scope(JOB, "w1", "memory")
    async with MemoryStore() as inner:
        store = RecordingStore(inner, noted, "w1")
        with trace.get_tracer("app").start_as_current_span("handler"):
            # Inside the user's span, but around spate's door.
            await store.create(Keyspace.DURABLE, keys.split("a"), b"")
        with write_spans.span(scope, "commit"):
            # Inside a spate span that is not the write's own (no key, no outcome).
            await store.create(Keyspace.DURABLE, keys.split("b"), b"")
        with write_spans.span(scope, "probe"):
            await store.create(Keyspace.DURABLE, keys.split("c"), b"")
    problems = uncovered(noted, spans.all())
    a = [p for p in problems if "split.a" in p]
    b = [p.split(": ", 1)[1] for p in problems if "split.b" in p]
    c = [p for p in problems if "split.c" in p]
    assert len(a) == 1
    assert "inside 'handler', not a spate span" in a[0]
    assert b == [
        "spate.commit says keyspace None",
        "spate.commit says key None",
        "spate.commit has no outcome (None)",
        "spate.commit says split None",
        "spate.commit wrote split b without an epoch",
    ]
    assert len(c) == 1
    assert "a non-probe write inside spate.probe" in c[0]


async def test_a_write_missing_its_attributes_is_caught(spans: Spans) -> None:
    noted: list[Noted] = []
    keys = Keys(JOB)
    scope = write_spans.Scope(JOB, "w1", "memory")
    async with MemoryStore() as inner:
        store = RecordingStore(inner, noted, "w1")
        won = await write_spans.write(
            store, scope, "claim", "create", Keyspace.DURABLE, keys.split("a"), b""
        )
        assert isinstance(won, Won)
        # The epoch and split are what let a person find a fenced commit by split id.
    assert uncovered(noted, spans.all()) == [
        f"create durable:{keys.split('a')} (store w1): spate.claim says split None",
        f"create durable:{keys.split('a')} (store w1): spate.claim wrote split a without an epoch",
    ]


async def test_the_fleet_check_fails_when_a_write_site_bypasses_fenced_write(
    spans: Spans, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = write_spans.write

    async def renewals_bypass(
        store: Store, scope: write_spans.Scope, operation: str, kind: str, *args: Any, **kw: Any
    ) -> WriteResult:
        if operation == "presence-renew":
            # What a write site that called the store directly would do.
            keyspace, key, value = args
            return await store.update(keyspace, key, value, kw["expected"])
        return await real_write(store, scope, operation, kind, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(write_spans, "write", renewals_bypass)
    noted: list[Noted] = []
    await run_fleet(noted, Seen())
    problems = uncovered(noted, spans.all())
    renewals = [w for w in noted if w.kind == "update" and w.keyspace is Keyspace.EPHEMERAL]
    assert problems
    assert all("no span was current" in p and "ephemeral:cov.worker." in p for p in problems)
    assert len(problems) <= len(renewals)


async def test_a_quarantine_by_expiry_is_covered_too(
    spans: Spans, autojump_clock: trio.testing.MockClock
) -> None:
    # With one attempt allowed, a dead owner's splits are quarantined by the survivor (the
    # claim-time quarantine write) instead of claimed.
    server = MemoryServer()
    noted: list[Noted] = []
    one_try = attrs.evolve(config(), max_attempts=1)

    async def handle(split: SplitHandle) -> None:
        await trio.sleep_forever()

    async def worker(name: str, scope: trio.CancelScope, faulty: list[FaultyStore]) -> None:
        async with MemoryStore(server=server, ephemeral_ttl=LEASE) as client:
            store = FaultyStore(client, name=name)
            faulty.append(store)
            with scope:
                await run_worker(
                    RecordingStore(store, noted, name), job="q", instance=name, planner=plan,
                    handler=handle, config=one_try, leave_deadline=LEASE,
                )  # fmt: skip

    doomed, survivor = trio.CancelScope(), trio.CancelScope()
    doomed_store: list[FaultyStore] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker, "d1", doomed, doomed_store)
        await trio.sleep(2.0)
        nursery.start_soon(worker, "s1", survivor, [])
        await trio.sleep(2.0)
        doomed_store[0].partition()
        doomed.cancel()
        await trio.sleep(LEASE * 4)
        survivor.cancel()
    quarantines = [
        dict(s.attributes or {})
        for s in spans.named("spate.quarantine")
        if (s.attributes or {}).get("spate.outcome") == "won"
    ]
    assert quarantines  # (whoever wrote it: the heartbeat jitter is seeded per process)
    assert uncovered(noted, spans.all()) == []
