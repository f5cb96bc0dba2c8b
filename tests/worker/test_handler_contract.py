"""What a handler's end means, and what a handle is good for.

- A handle is good for one handler run of one tenancy: a call through it after that run ended
  raises Fenced and writes nothing, whoever holds the split now (this worker included); the
  coordinator's own calls take the tenancy's fence for the same check.
- A handler that returns without completing, with no revocation pending, is run again only
  after a backoff (1 s doubling to 60 s, reset by progress), with no store write per retry.
- A commit over the store's value size raises ValueTooLarge to the handler and writes nothing;
  escaping the handler, it fails the split like any other error.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
import trio
import trio.testing

import spate
from spate._core.records import EPOCH_BITS, PlanRecord, Status, decode, fence_of
from spate.store import Keyspace
from spate_stores.memory import MemoryServer
from spate_testing.faults import FaultyStore
from tests.runtime.harness import HookStore, spawn
from tests.worker.test_worker import JOB, KEYS, client, config, planner, progress_of

BIG = b"x" * (10 << 20)
"""A progress state far over the memory store's 1 MiB value limit."""


# -- one handle, one run of one tenancy --------------------------------------------------------


async def test_a_handle_from_an_earlier_tenancy_writes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = client(server)
    handles: list[spate.SplitHandle] = []
    stale_done = trio.Event()

    async def handle(split: spate.SplitHandle) -> None:
        handles.append(split)
        if len(handles) == 1:
            await split.commit(1, state=b"one")
            raise RuntimeError("fail it: this worker gains it again at epoch 2")
        await stale_done.wait()
        await split.commit(2, state=b"two", completed=True)

    async def stale_task() -> None:
        with trio.fail_after(60):
            while len(handles) < 2:  # noqa: ASYNC110
                await trio.sleep(0.1)
        old, new = handles
        assert (old.epoch, new.epoch) == (1, 2)
        assert new.fence > old.fence
        with pytest.raises(spate.Fenced):
            await old.commit(999, state=b"STALE", completed=True)
        with pytest.raises(spate.Fenced):
            await old.split(b"p", b"r")
        with pytest.raises(spate.Fenced):
            await old.decline_revoke()
        record = await progress_of(store, "s00")
        assert (record.watermark, record.state, record.completed) == (1, b"one", False)
        assert record.epoch == 2
        stale_done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stale_task)
        with trio.fail_after(120):
            verdict = await spate.run_worker(
                store, job=JOB, instance="a", planner=planner(1), handler=handle,
                config=config(failure_backoff=0),  # a raise hands the split back at once
            )  # fmt: skip
    assert verdict == spate.AllComplete()  # the real owner's commit was not fenced
    record = await progress_of(store, "s00")
    assert (record.watermark, record.state, record.completed) == (2, b"two", True)


async def test_a_handle_from_an_earlier_run_of_the_same_tenancy_writes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = client(server)
    handles: list[spate.SplitHandle] = []

    async def handle(split: spate.SplitHandle) -> None:
        handles.append(split)
        if len(handles) == 1:
            await split.commit(1, state=b"one")
            return  # not done: the split stays here and the handler runs again
        old = handles[0]
        assert old is not split
        assert (old.epoch, old.fence) == (split.epoch, split.fence)  # one tenancy
        assert split.progress == spate.Progress(1, b"one")
        with pytest.raises(spate.Fenced):
            await old.commit(999, state=b"STALE", completed=True)
        with pytest.raises(spate.Fenced):
            await old.split(b"p", b"r")
        with pytest.raises(spate.Fenced):
            await old.decline_revoke()
        record = await progress_of(store, "s00")
        assert (record.watermark, record.state, record.completed) == (1, b"one", False)
        await split.commit(2, state=b"two", completed=True)

    with trio.fail_after(120):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config(),
        )  # fmt: skip
    assert verdict == spate.AllComplete()
    assert len(handles) == 2


async def test_a_fenced_from_an_earlier_runs_handle_fails_the_split_not_strands_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())
    handles: list[spate.SplitHandle] = []

    async def handle(split: spate.SplitHandle) -> None:
        handles.append(split)
        if len(handles) == 1:
            return  # not done: runs again
        if len(handles) == 2:
            await handles[0].commit(1)  # the earlier run's handle: Fenced, and it escapes
        await split.commit(1, completed=True)

    with trio.fail_after(120):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config()
        )
    # The split was still held: a Fenced of a stale handle is the handler's error, so the
    # split failed (an attempt charged) and ran again after the failure backoff, in the same
    # tenancy, instead of sitting held with no handler.
    assert verdict == spate.AllComplete()
    assert [h.epoch for h in handles] == [1, 1, 1]
    assert (await progress_of(store, "s00")).attempts == 1


async def test_a_handle_kept_past_its_cancelled_run_writes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = client(server)
    handles: list[spate.SplitHandle] = []

    async def handle(split: spate.SplitHandle) -> None:
        handles.append(split)
        await split.commit(1)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config()
            )
        )
        with trio.fail_after(60):
            while not handles:  # noqa: ASYNC110
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()  # the worker leaves: the handler is cancelled
    with pytest.raises(spate.Fenced):
        await handles[0].commit(2)
    assert (await progress_of(store, "s00")).watermark == 1


async def test_coordinator_calls_with_an_ended_tenancys_fence_write_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = client(server)
    async with trio.open_nursery() as nursery:
        worker = await spawn(nursery, store, "a", planner=lambda ctx: planner(1)(ctx))
        first = await worker.wait_for(spate.Gained, "s00")
        plan = await store.get(Keyspace.DURABLE, KEYS.plan)
        assert plan is not None
        incarnation = decode(PlanRecord, plan.key, plan.value).incarnation_ms
        assert incarnation > 0
        assert first.fence == fence_of(incarnation, first.epoch)
        assert first.fence & (2**EPOCH_BITS - 1) == first.epoch
        c = worker.c
        await c.commit("s00", spate.Progress(1, b"one"), fence=first.fence)
        await c.release(["s00"])
        await worker.until(lambda: len(worker.of(spate.Gained, "s00")) == 2)
        second = worker.of(spate.Gained, "s00")[1]
        assert second.fence > first.fence
        with pytest.raises(spate.Fenced):
            await c.commit("s00", spate.Progress(999, b"STALE", completed=True), fence=first.fence)
        with pytest.raises(spate.Fenced):
            await c.split("s00", b"p", b"r", fence=first.fence)
        with pytest.raises(spate.Fenced):
            await c.decline_revoke("s00", fence=first.fence)
        record = await progress_of(store, "s00")
        assert (record.watermark, record.state, record.completed) == (1, b"one", False)
        with pytest.raises(spate.ConfigError):
            await c.commit("s00", spate.Progress(2), fence="1")  # type: ignore[arg-type]
        await c.commit("s00", spate.Progress(2, b"two", completed=True), fence=second.fence)
        assert (await progress_of(store, "s00")).completed
        nursery.cancel_scope.cancel()


# -- returning without completing: a backoff, not a busy loop ---------------------------------


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def run_for(seconds: float, handler: Any, store: Any, **cfg: Any) -> None:
    """Run one worker with ``handler`` for ``seconds`` of (virtual) time, then leave."""
    with trio.move_on_after(seconds):
        await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handler,
            config=config(**cfg),
        )  # fmt: skip


async def test_an_empty_handler_backs_off_doubling_to_a_cap(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[float] = []

    async def empty(split: spate.SplitHandle) -> None:
        calls.append(trio.current_time())

    caplog.set_level(logging.WARNING, logger="spate.worker")
    await run_for(400, empty, client(MemoryServer()))
    waited = gaps(calls)
    assert len(calls) < 14  # 1 + 2 + 4 + ... + 60 + 60 ...: a handful in 400 s, not thousands
    assert [round(g) for g in waited[:8]] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert all(round(g) == 60 for g in waited[6:])
    told = [r for r in caplog.records if "returned without completing" in r.getMessage()]
    assert len(told) == 1  # once per backoff episode, saying what happens next
    assert "runs again in 1 s" in told[0].getMessage()


async def test_a_commit_that_advances_resets_the_backoff(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[float] = []

    async def sometimes(split: spate.SplitHandle) -> None:
        calls.append(trio.current_time())
        if len(calls) == 5:
            await split.commit(5)  # progress: the next wait is short again
        if len(calls) == 6:
            await split.commit(5, state=b"same watermark")  # not progress

    caplog.set_level(logging.WARNING, logger="spate.worker")
    await run_for(120, sometimes, client(MemoryServer()))
    assert [round(g) for g in gaps(calls)[:7]] == [1, 2, 4, 8, 1, 2, 4]
    told = [r for r in caplog.records if "returned without completing" in r.getMessage()]
    assert len(told) == 2  # a new episode after the reset


async def test_a_backoff_writes_nothing_to_the_store(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HookStore(client(MemoryServer()))
    durable_writes_at_call: list[int] = []

    async def empty(split: spate.SplitHandle) -> None:
        durable_writes_at_call.append(sum(1 for w in store.writes if w[1] is Keyspace.DURABLE))

    await run_for(300, empty, store)
    assert len(durable_writes_at_call) >= 8
    # Between the retries nothing durable was written: no hand-back, no claim, no commit.
    assert len(set(durable_writes_at_call)) == 1, durable_writes_at_call


async def test_a_revocation_during_a_backoff_hands_the_split_back_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    gained_by_b: dict[str, float] = {}
    a_calls: dict[str, list[float]] = {}

    async def empty(split: spate.SplitHandle) -> None:
        a_calls.setdefault(split.id, []).append(trio.current_time())

    async def b_handler(split: spate.SplitHandle) -> None:
        gained_by_b[split.id] = trio.current_time()
        await split.commit(1, completed=True)

    cfg = {"drain_deadline": 120.0}  # a forced revocation would take two minutes
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server), job=JOB, instance="a", planner=planner(2), handler=empty,
                config=config(**cfg),
            )
        )  # fmt: skip
        await trio.sleep(200)  # a's splits are deep in their backoff (60 s waits)
        assert all(len(c) >= 6 for c in a_calls.values())
        joined = trio.current_time()
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server), job=JOB, instance="b", planner=planner(2), handler=b_handler,
                config=config(**cfg),
            )
        )  # fmt: skip
        with trio.fail_after(60):
            while not gained_by_b:  # noqa: ASYNC110
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    (moved_at,) = gained_by_b.values()
    assert moved_at - joined < 5.0


async def test_a_return_during_a_revocation_hands_back_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    gained_by_b: list[float] = []
    revoked_at: list[float] = []

    async def a_handler(split: spate.SplitHandle) -> None:
        await split.revoke_requested.wait()
        revoked_at.append(trio.current_time())
        await split.commit(1)
        # returns with the revocation pending: no backoff

    async def b_handler(split: spate.SplitHandle) -> None:
        gained_by_b.append(trio.current_time())
        await split.commit(2, completed=True)

    cfg = {"drain_deadline": 120.0}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server), job=JOB, instance="a", planner=planner(2), handler=a_handler,
                config=config(**cfg),
            )
        )  # fmt: skip
        await trio.sleep(10)
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server), job=JOB, instance="b", planner=planner(2), handler=b_handler,
                config=config(**cfg),
            )
        )  # fmt: skip
        with trio.fail_after(60):
            while not gained_by_b:  # noqa: ASYNC110
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    assert gained_by_b[0] - revoked_at[0] < 1.0


async def test_a_loss_during_a_backoff_ends_that_tenancy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FaultyStore(client(MemoryServer()))
    calls: list[tuple[float, int]] = []

    async def empty(split: spate.SplitHandle) -> None:
        calls.append((trio.current_time(), split.epoch))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_for, 250, empty, store)
        await trio.sleep(70)  # runs at about 0, 1, 3, 7, 15, 31, 63; the next is due at 123
        store.partition()  # no renewal lands: the worker fences itself (Lost) within a lease
        await trio.sleep(30)
        store.heal()  # it claims the split again: a new tenancy, a new run at once
    assert {epoch for _, epoch in calls if _ < 70} == {1}
    assert [epoch for at, epoch in calls if at > 70][:1] == [2]
    assert not [at for at, epoch in calls if epoch == 1 and at > 70]  # the backoff ended


async def test_leaving_during_a_backoff_hands_the_split_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())

    async def empty(split: spate.SplitHandle) -> None:
        pass

    await run_for(100, empty, store)
    record = await progress_of(store, "s00")
    assert record.owner is None  # handed back by the graceful leave, not left to expire
    assert record.attempts == 0
    assert record.status is Status.RUNNABLE


async def test_an_empty_handler_on_the_real_clock_runs_a_handful_of_times() -> None:
    calls: list[float] = []

    async def empty(split: spate.SplitHandle) -> None:
        calls.append(trio.current_time())

    # A busy loop never lets an autojump clock advance, so this one runs on real time.
    await run_for(5, empty, client(MemoryServer()))
    assert 1 <= len(calls) <= 5, calls  # at about 0, 1 and 3 s (then 7): not thousands


# -- oversize progress -------------------------------------------------------------------------


async def test_an_oversize_commit_raises_to_the_handler_and_writes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())
    refused: list[spate.ValueTooLarge] = []

    async def handle(split: spate.SplitHandle) -> None:
        await split.commit(1, state=b"small")
        try:
            await split.commit(2, state=BIG)
        except spate.ValueTooLarge as exc:
            refused.append(exc)
        record = await progress_of(store, split.id)
        assert (record.watermark, record.state) == (1, b"small")
        await split.commit(2, state=b"small again", completed=True)

    with trio.fail_after(120):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config()
        )
    assert verdict == spate.AllComplete()
    assert len(refused) == 1
    assert "nothing was written" in str(refused[0])


async def test_an_oversize_commit_that_escapes_fails_the_split_and_the_worker_keeps_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())
    steps: list[float] = []

    async def handle(split: spate.SplitHandle) -> None:
        if split.id == "s00":
            await trio.sleep(1)
            await split.commit(1, state=BIG)  # escapes: fails the split
        for step in range(1, 21):
            await trio.sleep(1)
            await split.commit(step, completed=step == 20)
            steps.append(trio.current_time())

    with trio.fail_after(300):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(2), handler=handle,
            config=config(max_attempts=3),
        )  # fmt: skip
    assert verdict == spate.Stalled(completed=1, quarantined=1)
    poisoned = await progress_of(store, "s00")
    assert poisoned.status is Status.QUARANTINED
    assert poisoned.attempts == 3
    assert poisoned.watermark is None  # nothing of the oversize commits was written
    assert (await progress_of(store, "s01")).completed
    assert len(steps) == 20
