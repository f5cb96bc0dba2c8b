"""The flow driver's Fork: sub-flows run side by side and the parent gets every outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import outcome
import pytest
import trio
import trio.testing

from spate import StoreUnavailable
from spate import _write_spans as write_spans
from spate._core.flow_engine import BATCH_CONCURRENCY
from spate._core.flows import Batch, Flow, Fork, Hold, Op
from spate._runtime.driver import Driver
from spate.store import Delete, Entry, Keyspace, Put, Won
from spate_stores.memory import MemoryServer

from .harness import HookStore, client

DURABLE = Keyspace.DURABLE


def _driver(store: HookStore, nursery: trio.Nursery) -> Driver:
    def post(fn: Callable[[], None]) -> None:
        fn()  # no loop here: resume at once, in the I/O task that finished

    scope = write_spans.Scope("job", "w", store.capabilities.system)
    return Driver(store, scope, nursery=nursery, post=post, op_timeout=1.0)


def _create(key: str) -> Flow[str]:
    yield Hold(DURABLE, key)
    yield Op("create", DURABLE, key, b"v")
    return key


def _boom() -> Flow[None]:
    yield Hold(DURABLE, "k-boom")
    raise ValueError("boom")


async def test_a_fork_runs_its_flows_together_and_resumes_with_every_outcome(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HookStore(client(MemoryServer()))
    in_flight = peak = 0

    async def slow(kind: str, keyspace: Keyspace, key: str) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await trio.sleep(0.5)
        in_flight -= 1

    store.before = slow
    results: list[outcome.Outcome[Any]] = []

    def parent() -> Flow[list[Any]]:
        # The parent holds a key a sub-flow needs: forking gives it up, or this would hang.
        yield Hold(DURABLE, "k0")
        outcomes = yield Fork((_create("k0"), _create("k1"), _boom(), _create("k2")))
        empty = yield Fork(())
        return [*outcomes, empty]

    async with trio.open_nursery() as nursery:
        driver = _driver(store, nursery)
        began = trio.current_time()
        driver.start(parent(), results.append)
        with trio.fail_after(5):
            while not results:  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert trio.current_time() - began <= 0.6  # one write's time, not three
        driver.close()
    assert peak == 3
    *forked, empty = results[0].unwrap()
    assert [o.unwrap() for o in (forked[0], forked[1], forked[3])] == ["k0", "k1", "k2"]
    with pytest.raises(ValueError, match="boom"):
        forked[2].unwrap()
    assert empty == []
    assert not driver.busy(DURABLE, "k0")


async def test_an_inline_flow_waits_its_turn_for_a_key_and_writes_after_the_holder(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HookStore(client(MemoryServer()))

    async def slow(kind: str, keyspace: Keyspace, key: str) -> None:
        await trio.sleep(0.5)

    store.before = slow
    order: list[str] = []

    def loop_flow() -> Flow[None]:
        yield Hold(DURABLE, "k")
        yield Op("create", DURABLE, "k", b"loop")
        order.append("loop")

    def api_flow() -> Flow[str]:
        yield Hold(DURABLE, "k")
        entry = yield Op("get", DURABLE, "k")
        order.append("inline")
        return bytes(entry.value).decode()

    async with trio.open_nursery() as nursery:
        driver = _driver(store, nursery)
        driver.start(loop_flow(), lambda result: result.unwrap())
        assert driver.busy(DURABLE, "k")
        # In this task, no hop through any other: it waits for the holder, then reads.
        assert await driver.run_inline(api_flow()) == "loop"
        driver.close()
    assert order == ["loop", "inline"]
    assert not driver.busy(DURABLE, "k")


async def test_a_cancelled_caller_leaves_the_queue_of_a_key_whose_holder_never_lets_go(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The holder's write never ends (a loop that stopped never resumes its flows): the
    # caller's cancellation must still get through, or its worker could never exit
    # (simulator seed 888 hung exactly so before this was fixed).
    store = HookStore(client(MemoryServer()))

    async def forever(kind: str, keyspace: Keyspace, key: str) -> None:
        if kind == "create":
            await trio.sleep_forever()

    store.before = forever
    cleaned = trio.Event()

    def holder() -> Flow[None]:
        yield Hold(DURABLE, "k")
        yield Op("create", DURABLE, "k", b"never")

    def api_flow() -> Flow[None]:
        try:
            yield Hold(DURABLE, "k")
            yield Op("get", DURABLE, "k")
        finally:
            cleaned.set()

    async with trio.open_nursery() as nursery:
        driver = _driver(store, nursery)
        driver._timeout = 1e9  # the holder's write outlives the test
        driver.start(holder(), lambda result: result.unwrap())
        with trio.move_on_after(5) as waited:
            await driver.run_inline(api_flow())
        assert waited.cancelled_caught
        assert cleaned.is_set()  # the flow was closed where it stood
        nursery.cancel_scope.cancel()


async def test_background_store_calls_reuse_their_tasks_and_never_wait_for_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HookStore(client(MemoryServer()))

    async def slow(kind: str, keyspace: Keyspace, key: str) -> None:
        await trio.sleep(0.5)

    store.before = slow
    async with trio.open_nursery() as nursery:
        driver = _driver(store, nursery)
        for round_ in range(3):
            results: list[outcome.Outcome[Any]] = []
            began = trio.current_time()
            for i in range(8):
                driver.start(_create(f"r{round_}-k{i}"), results.append)
            with trio.fail_after(5):
                while len(results) < 8:  # noqa: ASYNC110
                    await trio.sleep(0.1)
            # All eight at once (a call never waits for a free task)...
            assert trio.current_time() - began <= 0.6
        # ...and the later rounds ran on the first round's tasks.
        assert driver.io_tasks == 8
        driver.close()


async def test_a_batch_runs_its_ops_on_a_bounded_pool_and_reports_each_as_it_lands(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HookStore(client(MemoryServer()))
    in_flight = peak = 0

    async def slow(kind: str, keyspace: Keyspace, key: str) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await trio.sleep(0.1)
        in_flight -= 1

    store.before = slow
    keys = [f"k{n:03d}" for n in range(100)]
    landed: list[int] = []
    results: list[outcome.Outcome[Any]] = []

    def seed() -> Flow[list[Any]]:
        ops = tuple(Op("create", DURABLE, key, b"v") for key in keys)
        done = yield Batch(ops, lambda i, result: landed.append(i))
        assert len(landed) == len(keys)  # every result was reported before the resumption
        return list(done)

    async with trio.open_nursery() as nursery:
        driver = _driver(store, nursery)
        driver.start(seed(), results.append)
        with trio.fail_after(5):
            while not results:  # noqa: ASYNC110
                await trio.sleep(0.1)
    assert peak == BATCH_CONCURRENCY
    assert sorted(landed) == list(range(len(keys)))
    assert all(isinstance(r, Won) for r in results[0].unwrap())
    assert [e.key for e in await store.list(DURABLE, "k")] == keys


async def test_a_batch_op_that_hangs_fails_after_the_op_timeout_and_the_rest_go_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = HookStore(client(MemoryServer()))

    async def hang_one(kind: str, keyspace: Keyspace, key: str) -> None:
        if key == "k1":
            await trio.sleep_forever()

    store.before = hang_one
    results: list[outcome.Outcome[Any]] = []

    def seed() -> Flow[list[Any]]:
        ops = tuple(Op("create", DURABLE, f"k{n}", b"v") for n in range(3))
        return list((yield Batch(ops)))

    async with trio.open_nursery() as nursery:
        driver = _driver(store, nursery)  # op_timeout=1.0
        began = trio.current_time()
        driver.start(seed(), results.append)
        with trio.fail_after(5):
            while not results:  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert trio.current_time() - began <= 1.1
    first, second, third = results[0].unwrap()
    assert isinstance(first, Won)
    assert isinstance(third, Won)
    assert isinstance(second, StoreUnavailable)
    assert "op_timeout" in str(second)


async def test_watch_events_of_a_key_an_api_call_writes_wait_until_it_lets_go(
    autojump_clock: trio.abc.Clock,
) -> None:
    """An event of a key an API call holds is kept, in order, and handed on when the call lets
    go: by then its own write has landed and is folded, so its echo is known by revision."""
    store = HookStore(client(MemoryServer()))
    redelivered: list[Any] = []
    reply = trio.Event()

    async def slow_reply(kind: str, ks: Keyspace, key: str, result: object) -> None:
        await reply.wait()  # the store's watchers hear of the write before its writer does

    store.after = slow_reply
    async with trio.open_nursery() as nursery:
        scope = write_spans.Scope("job", "w", store.capabilities.system)
        driver = Driver(
            store, scope, nursery=nursery, post=lambda fn: fn(), op_timeout=1.0,
            redeliver=lambda keyspace, event: redelivered.append((keyspace, event)),
        )  # fmt: skip
        nursery.start_soon(driver.run_inline, _create("k1"))
        await trio.testing.wait_all_tasks_blocked()
        echo = Put(Entry("k1", b"v", 7))
        foreign = Delete("k1", 8)
        assert driver.hold_back(DURABLE, "k1", echo)
        assert driver.hold_back(DURABLE, "k1", foreign)
        assert not driver.hold_back(DURABLE, "k2", Delete("k2", 9))  # no flow of ours writes k2
        assert not driver.hold_back(Keyspace.EPHEMERAL, "k1", Delete("k1", 9))
        assert redelivered == []
        reply.set()
        await trio.testing.wait_all_tasks_blocked()
        assert redelivered == [(DURABLE, echo), (DURABLE, foreign)]
        assert not driver.hold_back(DURABLE, "k1", foreign)  # let go: nothing more is held
        # The loop's own flows (an election, a renewal, a claim) see their keys' events as
        # they come: only API calls hold them back.
        reply = trio.Event()
        driver.start(_create("k3"), lambda result: None)
        await trio.testing.wait_all_tasks_blocked()
        assert driver.busy(DURABLE, "k3")
        assert not driver.hold_back(DURABLE, "k3", Delete("k3", 10))
        reply.set()
        driver.close()
