"""Splitting on a real store (etcd, NATS): one body per check, run by each store's suite.

The rules are tested on the memory store under the mock clock (tests/worker/test_splitting.py);
these run the same protocol against a real server on the real clock: the fenced write, the
leader's seeding of residuals and its requests, on the store's own CAS and watches.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable

import attrs
import pytest
import trio

from spate import (
    AllComplete,
    Config,
    Event,
    Fenced,
    Gained,
    Plan,
    PlanContext,
    Progress,
    SplitHandle,
    SplitSpec,
    ValueTooLarge,
    open_coordinator,
    run_worker,
)
from spate._core.records import Keys, ProgressRecord, decode, encode
from spate.store import Keyspace, Won
from spate_stores import open_store

JOB = "split-job"
KEYS = Keys(JOB)
ITEM = 0.02
"""Seconds of real time per item of work."""
COMMIT_EVERY = 5


def _range(start: int, end: int) -> bytes:
    return f"{start}:{end}".encode()


def _bounds(descriptor: bytes) -> tuple[int, int]:
    start, _, end = descriptor.decode().partition(":")
    return int(start), int(end)


def _planner(lengths: list[int]) -> Callable[[PlanContext], Plan]:
    specs, start = [], 0
    for n, items in enumerate(lengths):
        specs.append(SplitSpec(f"s{n}", _range(start, start + items)))
        start += items

    def plan(ctx: PlanContext) -> Plan:
        return Plan([s for s in specs if s.id not in ctx.known], final=True)

    return plan


def _config() -> Config:
    return Config(
        max_in_flight=1,
        op_timeout=1.0,
        membership_debounce=0.3,
        split_request_delay=0.2,
        drain_deadline=3.0,
        rebalance_delay=0.0,
        planner_thread=False,
    )


async def a_straggler_is_split_and_every_item_done_once(url: str) -> None:
    """Three workers of one lane, a job of short splits and one long one: the long one is
    split on the leader's request, every item is done exactly once, the job ends AllComplete."""
    lengths = [10, 10, 10, 200]
    done: collections.Counter[int] = collections.Counter()
    residuals: list[str] = []

    async def handler(handle: SplitHandle) -> None:
        start, end = _bounds(handle.descriptor)
        pos = start if handle.progress.watermark is None else handle.progress.watermark
        while pos < end:
            for _ in range(min(COMMIT_EVERY, end - pos)):
                await trio.sleep(ITEM)
                done[pos] += 1
                pos += 1
            await handle.commit(pos, completed=pos >= end)
            if handle.split_requested.is_set() and end - pos >= 2 * COMMIT_EVERY:
                mid = pos + (end - pos) // 2
                residuals.append(await handle.split(_range(start, mid), _range(mid, end)))
                end = mid

    verdicts: list[object] = []
    started = trio.current_time()

    async def worker(name: str) -> None:
        async with open_store(url) as store:
            verdicts.append(
                await run_worker(
                    store,
                    job=JOB,
                    instance=name,
                    planner=_planner(lengths),
                    handler=handler,
                    config=_config(),
                )
            )

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for name in ("w0", "w1", "w2"):
                nursery.start_soon(worker, name)
    assert verdicts == [AllComplete()] * 3
    assert residuals, "the long split was asked to split, and split"
    assert sorted(done) == list(range(sum(lengths)))
    assert set(done.values()) == {1}
    # Alone, the long split takes 200 items; shared, far less (loose: a shared machine).
    assert trio.current_time() - started < 200 * ITEM + 5


async def a_stale_owner_s_split_is_fenced_and_writes_nothing(url: str) -> None:
    """Another writer moves the progress record past this owner's tenancy: its split raises
    Fenced, and the record names no residual."""
    holding, release = trio.Event(), trio.Event()
    handles: list[SplitHandle] = []

    async def handler(handle: SplitHandle) -> None:
        handles.append(handle)
        holding.set()
        await release.wait()

    async with open_store(url) as store, trio.open_nursery() as nursery:

        async def worker() -> None:
            await run_worker(
                store, job=JOB, instance="w", planner=_planner([100]),
                handler=handler, config=_config(),
            )  # fmt: skip

        nursery.start_soon(worker)
        with trio.fail_after(30):
            await holding.wait()
        entry = await store.get(Keyspace.DURABLE, KEYS.split("s0"))
        assert entry is not None
        record = decode(ProgressRecord, entry.key, entry.value)
        taken = attrs.evolve(record, epoch=record.epoch + 1, owner="thief", owner_nonce="x")
        won = await store.update(
            Keyspace.DURABLE, KEYS.split("s0"), encode(taken), expected=entry.revision
        )
        assert isinstance(won, Won)
        with pytest.raises(Fenced):
            await handles[0].split(_range(0, 50), _range(50, 100))
        after = await store.get(Keyspace.DURABLE, KEYS.split("s0"))
        assert after is not None
        stored = decode(ProgressRecord, after.key, after.value)
        assert stored.residuals == ()
        assert stored.descriptor is None
        release.set()
        nursery.cancel_scope.cancel()


async def a_successor_resumes_the_primary_and_the_residual_runs(url: str) -> None:
    """An owner commits, splits, and hands the split back: the next owner is given the primary
    (and the committed watermark), and the residual is seeded and gained as a split of its own;
    a residual over the store's value size is refused with nothing written."""
    async with open_store(url) as store:
        limit = store.capabilities.max_value_size

        async def gained(events: AsyncIterator[Event], split: str) -> Gained:
            async for event in events:
                if isinstance(event, Gained) and event.split == split:
                    return event
            raise AssertionError(f"{split} was never gained")

        cfg = attrs.evolve(_config(), max_in_flight=4)
        with trio.fail_after(60):
            async with open_coordinator(
                store, job=JOB, instance="a", planner=_planner([100]),
                config=cfg,
            ) as a:  # fmt: skip
                a_events = a.events()
                await gained(a_events, "s0")
                await a.commit("s0", Progress(20))
                before = await store.get(Keyspace.DURABLE, KEYS.split("s0"))
                with pytest.raises(ValueTooLarge):
                    await a.split("s0", _range(0, 60), b"x" * (limit + 1))
                assert await store.get(Keyspace.DURABLE, KEYS.split("s0")) == before
                rid = await a.split("s0", _range(0, 60), _range(60, 100))
                residual = await gained(a_events, rid)
                assert residual.descriptor == _range(60, 100)
                await a.release(["s0"])
                async with open_coordinator(
                    store, job=JOB, instance="b", planner=_planner([100]),
                    config=cfg,
                ) as b:  # fmt: skip
                    await a.depart()
                    successor = await gained(b.events(), "s0")
                    assert successor.descriptor == _range(0, 60)
                    assert successor.progress.watermark == 20
