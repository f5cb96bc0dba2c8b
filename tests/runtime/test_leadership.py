"""Election, the generation fence, deposition, and planning."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from spate import Lost, Plan, PlanContext, PlanError, RevokeRequested, SplitSpec, open_coordinator
from spate._core.records import AssignmentRecord, Finality, LeaderRecord, PlanRecord, decode, encode
from spate.store import Keyspace, Put, Won
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultyStore

from .harness import JOB, KEYS, TTL, HookStore, client, config, planner_of, spawn


async def plan_record(store: MemoryStore) -> tuple[PlanRecord, int]:
    entry = await store.get(Keyspace.DURABLE, KEYS.plan)
    assert entry is not None
    return decode(PlanRecord, entry.key, entry.value), entry.revision


async def test_single_leader(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        workers = [await spawn(nursery, client(server), f"w{i}") for i in range(3)]
        await trio.sleep(3 * TTL)
        leaders = [w for w in workers if w.c.is_leader]
        assert len(leaders) == 1
        entry = await client(server).get(Keyspace.EPHEMERAL, KEYS.leader)
        assert entry is not None
        assert decode(LeaderRecord, entry.key, entry.value).owner == leaders[0].instance
        plan, _ = await plan_record(client(server))
        assert plan.generation == 1
        nursery.cancel_scope.cancel()


async def test_leader_failover_bumps_generation(autojump_clock: trio.abc.Clock) -> None:
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        workers = [await spawn(nursery, client(server), f"w{i}") for i in range(3)]
        await trio.sleep(TTL)
        (leader,) = [w for w in workers if w.c.is_leader]
        before, _ = await plan_record(client(server))
        leader.kill()
        survivors = [w for w in workers if w is not leader]
        await survivors[0].until(lambda: any(w.c.is_leader for w in survivors), within=2 * TTL)
        after, _ = await plan_record(client(server))
        assert after.generation == before.generation + 1
        nursery.cancel_scope.cancel()


async def test_deposed_leader_steps_down_and_a_stale_generation_assignment_is_ignored(
    autojump_clock: trio.abc.Clock,
) -> None:
    server = MemoryServer()
    a_store = FaultyStore(client(server), name="a")
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, a_store, "a")
        await a.until(lambda: a.c.is_leader)
        b = await spawn(nursery, client(server), "b")
        await trio.sleep(TTL)
        a_store.freeze()  # a stops: its leader key expires, b is elected
        await b.until(lambda: b.c.is_leader, within=3 * TTL)
        plan, _ = await plan_record(client(server))
        assert plan.generation == 2
        a_store.thaw()
        await a.until(lambda: not a.c.is_leader, within=TTL)
        await trio.sleep(TTL)
        assert b.c.is_leader
        assert not a.c.is_leader
        # A deposed leader's late assignment (older generation) must not move b.
        store = client(server)
        entry = await store.get(Keyspace.DURABLE, KEYS.assign("b"))
        assert entry is not None
        held = set(b.c.owned)
        events_before = len(b.events)
        stale = AssignmentRecord(generation=1, splits=())
        assert isinstance(
            await store.update(Keyspace.DURABLE, KEYS.assign("b"), encode(stale), entry.revision),
            Won,
        )
        await trio.sleep(TTL)
        assert not [e for e in b.events[events_before:] if isinstance(e, RevokeRequested | Lost)]
        assert set(b.c.owned) >= held
        nursery.cancel_scope.cancel()


async def test_deposed_leaders_plan_publish_is_fenced(autojump_clock: trio.abc.Clock) -> None:
    release = trio.Event()
    calls = 0

    async def planner(ctx: PlanContext) -> Plan:
        nonlocal calls
        calls += 1
        if calls > 1:
            await release.wait()
        return Plan([SplitSpec(f"s{calls}")], final=False)

    store = MemoryStore(ephemeral_ttl=TTL)
    async with trio.open_nursery() as nursery:
        a = await spawn(nursery, store, "a", planner=planner, cfg=config(replan_interval=TTL))
        await a.until(lambda: calls == 2, within=3 * TTL)  # the replan is now in flight
        # Another writer moves the plan record under the run (as a successor's bump would).
        plan, revision = await plan_record(store)
        moved = attrs.evolve(plan, updated_at_ms=plan.updated_at_ms + 1)
        assert isinstance(
            await store.update(Keyspace.DURABLE, KEYS.plan, encode(moved), revision), Won
        )
        landed: list[PlanRecord] = []

        async def record_plans(*, task_status: trio.TaskStatus[None]) -> None:
            async with store.watch(Keyspace.DURABLE, KEYS.plan) as events:
                task_status.started()  # watching (from the moved record) before the release
                async for event in events:
                    if isinstance(event, Put) and event.entry.key == KEYS.plan:
                        landed.append(decode(PlanRecord, event.entry.key, event.entry.value))

        await nursery.start(record_plans)
        release.set()

        def stepped_down() -> bool:
            # The publish lost its compare-and-swap, then the leader gave its key back. (The
            # only worker, it may be elected again at once, so "not leading" can last no
            # time at all: the writes say what happened.)
            done = [(op, outcome) for _, op, outcome in a.metrics.writes]
            lost = ("plan-publish", "lost")
            return lost in done and ("resign", "won") in done[done.index(lost) :]

        await a.until(stepped_down, within=TTL)
        # The fenced publish wrote nothing: no plan of the deposed generation moved past the
        # record the other writer left (a new election's own records come at generation 2).
        assert [p for p in landed if p.generation == moved.generation] == [moved]
        nursery.cancel_scope.cancel()


async def test_slow_async_planner_does_not_stop_renewals(autojump_clock: trio.abc.Clock) -> None:
    release = trio.Event()
    calls = 0

    async def planner(ctx: PlanContext) -> Plan:
        nonlocal calls
        calls += 1
        if calls > 1:
            await release.wait()
        return Plan([SplitSpec(f"s{i}") for i in range(calls * 2)], final=False)

    store = MemoryStore(ephemeral_ttl=TTL)
    async with trio.open_nursery() as nursery:
        w = await spawn(nursery, store, "w", planner=planner, cfg=config(replan_interval=TTL))
        await w.until(lambda: calls == 2 and len(w.c.owned) == 2, within=3 * TTL)
        await trio.sleep(5 * TTL)  # the replan takes five leases
        assert not w.of(Lost)
        assert w.c.owned == {"s0", "s1"}
        release.set()
        await w.until(lambda: len(w.c.owned) == 4, within=TTL)
        nursery.cancel_scope.cancel()


async def busy_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait in real time (the mock clock stands still) for thread work to come back."""
    give_up = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < give_up, "thread work did not come back"
        await trio.lowlevel.checkpoint()


async def test_slow_sync_planner_in_a_thread_does_not_stop_renewals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The autojump clock would run ahead of the planner thread; stop it while real thread
    # work has to finish, and let it run while the planner is blocked.
    autojump_clock.autojump_threshold = math.inf
    release = threading.Event()
    calls = 0

    def planner(ctx: PlanContext) -> Plan:
        nonlocal calls
        calls += 1
        if calls > 1:
            release.wait(timeout=30)  # real seconds: the test sets it long before
        return Plan([SplitSpec(f"s{i}") for i in range(calls * 2)], final=False)

    store = MemoryStore(ephemeral_ttl=TTL)
    try:
        async with trio.open_nursery() as nursery:
            w = await spawn(
                nursery,
                store,
                "w",
                planner=planner,
                cfg=config(replan_interval=2.0, planner_thread=True),
            )
            await busy_until(lambda: len(w.c.owned) == 2)
            autojump_clock.jump(2.0)  # the replan tick: the planner thread now blocks
            await busy_until(lambda: calls == 2)
            autojump_clock.autojump_threshold = 0
            await trio.sleep(5 * TTL)  # five leases pass while the planner is stuck
            assert not w.of(Lost)
            assert w.c.owned == {"s0", "s1"}
            autojump_clock.autojump_threshold = math.inf
            release.set()
            await busy_until(lambda: len(w.c.owned) == 4)
            nursery.cancel_scope.cancel()
    finally:
        release.set()


async def test_planning_writes_specs_then_progress_then_the_plan(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = HookStore(MemoryStore(ephemeral_ttl=TTL))
    async with open_coordinator(
        store, job=JOB, instance="w", planner=planner_of(3), config=config()
    ) as coord:
        await trio.sleep(1)
        assert len(coord.owned) == 3
    durable = [(kind, key) for kind, ks, key in store.writes if ks is Keyspace.DURABLE]
    specs = [i for i, (_, key) in enumerate(durable) if key.startswith(f"{JOB}.spec.")]
    seeds = [
        i for i, (k, key) in enumerate(durable) if k == "create" and key.startswith(f"{JOB}.split.")
    ]
    publish = [i for i, (k, key) in enumerate(durable) if k == "update" and key == KEYS.plan]
    assert len(specs) == len(seeds) == 3
    assert max(specs) < min(seeds)
    assert max(seeds) < publish[-1]
    plan, _ = await plan_record(store.inner)  # type: ignore[arg-type]
    assert plan.planned == 3
    assert plan.finality is Finality.FINAL


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (Plan([SplitSpec("a"), SplitSpec("a")]), "twice"),
        ("not a plan", "not spate.Plan"),
        (Plan([SplitSpec("big", b"x" * 4000)]), "over this store's limit"),
    ],
)
async def test_invalid_plan_is_a_plan_error_and_nothing_is_written(
    autojump_clock: trio.abc.Clock, result: object, message: str
) -> None:
    store = MemoryStore(ephemeral_ttl=TTL, max_value_size=2048)

    def planner(ctx: PlanContext) -> Plan:
        return result  # type: ignore[return-value]  # deliberately not always a valid Plan

    with pytest.raises(PlanError, match=message):  # noqa: PT012
        async with open_coordinator(store, job=JOB, instance="w", planner=planner, config=config()):
            await trio.sleep(TTL)
            pytest.fail("an invalid plan must stop the planning worker")
    keys = [e.key for e in await store.list(Keyspace.DURABLE, "")]
    assert not [k for k in keys if k.startswith((f"{JOB}.spec.", f"{JOB}.split."))]
    plan, _ = await plan_record(store)
    assert plan.planned == 0


async def test_planner_building_an_invalid_split_is_a_plan_error(
    autojump_clock: trio.abc.Clock,
) -> None:
    def planner(ctx: PlanContext) -> Plan:
        return Plan([SplitSpec("bad id")])

    with pytest.raises(PlanError, match="invalid split id"):
        async with open_coordinator(
            MemoryStore(ephemeral_ttl=TTL), job=JOB, instance="w", planner=planner, config=config()
        ):
            await trio.sleep(TTL)


async def test_planner_that_raises_is_retried_with_backoff_and_logged(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[float] = []

    def planner(ctx: PlanContext) -> Plan:
        calls.append(trio.current_time())
        if len(calls) < 3:
            raise OSError("the source is not ready")
        return Plan([SplitSpec("s")], final=True)

    async with open_coordinator(
        MemoryStore(ephemeral_ttl=TTL), job=JOB, instance="w", planner=planner, config=config()
    ) as coord:
        await trio.sleep(10)
        assert coord.owned == {"s"}
    assert len(calls) == 3
    assert calls[2] - calls[1] > calls[1] - calls[0] > 0  # backing off
    assert "the planner raised" in caplog.text
    assert "the source is not ready" in caplog.text


async def test_open_plan_replans_with_context_and_cursor(autojump_clock: trio.abc.Clock) -> None:
    seen: list[PlanContext] = []

    def planner(ctx: PlanContext) -> Plan:
        seen.append(ctx)
        n = len(seen)
        return Plan([SplitSpec(f"s{i}") for i in range(n)], final=n == 3, cursor=str(n).encode())

    store = MemoryStore(ephemeral_ttl=TTL)
    async with open_coordinator(
        store, job=JOB, instance="w", planner=planner, config=config(replan_interval=TTL)
    ) as coord:
        await trio.sleep(5 * TTL)
        assert coord.owned == {"s0", "s1", "s2"}
    assert len(seen) == 3  # final: no more replans
    assert seen[1].known == {"s0"}
    assert seen[1].cursor == b"1"
    assert seen[2].cursor == b"2"
    plan, _ = await plan_record(store)
    assert plan.cursor == b"3"
    assert plan.planned == 3
