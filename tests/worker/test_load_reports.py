"""The load signal (report_load, measure_load; docs/balancing.md) and where it goes."""

from __future__ import annotations

import math
import time

import pytest
import trio
import trio.testing

import spate
from spate._core.records import PresenceRecord, decode
from spate.store import Keyspace, Store
from spate_stores.memory import MemoryServer
from tests.worker.test_worker import JOB, KEYS, client, config, planner


async def presence_of(store: Store, instance: str) -> PresenceRecord:
    entry = await store.get(Keyspace.EPHEMERAL, KEYS.worker(instance))
    assert entry is not None
    return decode(PresenceRecord, entry.key, entry.value)


@pytest.mark.parametrize("amount", [-1, -0.5, math.nan, math.inf, -math.inf, "3", None, True])
async def test_a_bad_amount_is_a_config_error_and_counts_nothing(
    autojump_clock: trio.testing.MockClock, amount: object
) -> None:
    errors: list[BaseException] = []

    async def handle(split: spate.SplitHandle) -> None:
        with pytest.raises(spate.ConfigError, match="load report") as caught:
            split.report_load(amount)  # type: ignore[arg-type]
        errors.append(caught.value)
        await split.commit(1, completed=True)

    with trio.fail_after(60):
        await spate.run_worker(
            client(MemoryServer()), job=JOB, instance="a", planner=planner(1), handler=handle,
            config=config(),
        )  # fmt: skip
    assert len(errors) == 1


async def test_a_handle_whose_run_ended_refuses_a_report_with_fenced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    kept: list[spate.SplitHandle] = []

    async def handle(split: spate.SplitHandle) -> None:
        split.report_load(0)  # 0 is a valid amount
        kept.append(split)
        await split.commit(1, completed=True)

    with trio.fail_after(60):
        await spate.run_worker(
            client(MemoryServer()), job=JOB, instance="a", planner=planner(1), handler=handle,
            config=config(),
        )  # fmt: skip
    with pytest.raises(spate.Fenced):
        kept[0].report_load(1.0)


async def test_reported_loads_ride_on_the_presence_renewal_with_the_capacity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = client(server)

    async def handle(split: spate.SplitHandle) -> None:
        per_second = {"s00": 10.0, "s01": 30.0}[split.id]
        while True:
            await trio.sleep(1)
            split.report_load(per_second)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                store, job=JOB, instance="a", planner=planner(2), handler=handle,
                config=config(capacity=2.0),
            )
        )  # fmt: skip
        await trio.sleep(30)
        early = await presence_of(store, "a")
        assert early.capacity == 2.0
        assert early.untrusted == 2
        assert early.loads == ()
        await trio.sleep(60)
        later = await presence_of(store, "a")
        nursery.cancel_scope.cancel()
    assert [(s.split, round(s.rate)) for s in later.loads] == [("s01", 30), ("s00", 10)]
    assert later.untrusted == 0
    assert later.other_splits == 0


async def test_a_worker_that_reports_nothing_writes_the_presence_record_of_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())

    async def handle(split: spate.SplitHandle) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                store, job=JOB, instance="a", planner=planner(2), handler=handle, config=config()
            )
        )
        await trio.sleep(90)
        entry = await store.get(Keyspace.EPHEMERAL, KEYS.worker("a"))
        nursery.cancel_scope.cancel()
    assert entry is not None
    assert set(entry.value.decode().strip("{}").replace('"', "").split(",")) >= {
        "schema:1", "max_in_flight:8",
    }  # fmt: skip
    assert b"load" not in entry.value
    assert b"capacity" not in entry.value
    assert b"untrusted" not in entry.value


async def test_measure_load_counts_a_handlers_busy_time_and_its_childrens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())

    def spin(seconds: float) -> None:
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            pass

    async def child() -> None:
        while True:
            spin(0.004)
            await trio.sleep(1)

    async def handle(split: spate.SplitHandle) -> None:
        if split.id == "s01":
            await trio.sleep_forever()  # idle: no busy time
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)  # only a child works

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                store, job=JOB, instance="a", planner=planner(2), handler=handle,
                config=config(measure_load=True),
            )
        )  # fmt: skip
        await trio.sleep(90)
        record = await presence_of(store, "a")
        nursery.cancel_scope.cancel()
    rates = {s.split: s.rate for s in record.loads}
    # s00's child is busy about 4 ms per (virtual) second; s01 took no step worth timing.
    assert 0.003 < rates["s00"] < 0.05
    assert rates.get("s01", 0.0) < rates["s00"] / 10
