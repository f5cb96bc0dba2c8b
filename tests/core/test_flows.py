"""The flow driver's Fork: sub-flows run side by side and the parent gets every outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import outcome
import pytest
import trio
import trio.testing

from spate._core.flows import Flow, Fork, Hold, Op
from spate._runtime import fenced
from spate._runtime.driver import Driver
from spate.store import Keyspace
from spate_stores.memory import MemoryServer

from .harness import HookStore, client

D = Keyspace.DURABLE


def _driver(store: HookStore, nursery: trio.Nursery) -> Driver:
    def post(fn: Callable[[], None]) -> None:
        fn()  # no loop here: resume at once, in the I/O task that finished

    scope = fenced.Scope("job", "w", store.capabilities.system)
    return Driver(store, scope, nursery=nursery, post=post, op_timeout=1.0)


def _create(key: str) -> Flow[str]:
    yield Hold(D, key)
    yield Op("create", D, key, b"v")
    return key


def _boom() -> Flow[None]:
    yield Hold(D, "k-boom")
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
        yield Hold(D, "k0")
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
    assert peak == 3
    *forked, empty = results[0].unwrap()
    assert [o.unwrap() for o in (forked[0], forked[1], forked[3])] == ["k0", "k1", "k2"]
    with pytest.raises(ValueError, match="boom"):
        forked[2].unwrap()
    assert empty == []
    assert not driver.busy(D, "k0")
