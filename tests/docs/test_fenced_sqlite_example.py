"""examples/fenced_sqlite.py: a zombie's late rows are refused by the database itself.

Worker A owns the only split, writes its first batch, and then freezes mid-handler (its store
calls block, and its next write to the database waits) until long past its lease. Worker B
takes the split over with a larger fence, finishes it, and the job completes. Then A wakes
and sends its late batch: the database refuses it, and every record is in the output once.
Without the fence guard the same run duplicates A's batch, so the test can tell.
"""

from __future__ import annotations

import importlib.util
import math
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import closing
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

import spate
from spate._core.records import Keys
from spate.store import Keyspace
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultyStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "fenced_sqlite.py"
TTL = 6.0
RECORDS = 50


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fenced_sqlite_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import examples.fenced_sqlite as example  # what the file loaded below is, for mypy
else:
    example = load_example()


def paused_autojump(clock: trio.testing.MockClock) -> Callable[..., Awaitable[Any]]:
    """trio.to_thread.run_sync with the autojump clock paused while any thread works.

    The autojump clock advances whenever every task waits, including on a thread, and
    would otherwise expire leases while SQLite is busy.
    """
    busy = 0

    async def run_sync(fn: Callable[..., Any], *args: Any) -> Any:
        nonlocal busy
        busy += 1
        clock.autojump_threshold = math.inf
        try:
            return await trio.to_thread.run_sync(fn, *args)
        finally:
            busy -= 1
            if busy == 0:
                clock.autojump_threshold = 0

    return run_sync


class Unfenced(example.FencedSink):
    """The same sink without its guard: what the fence protects against."""

    def _raise_fence(self, db: Any, split: str, fence: int, watermark: int | None) -> bool:
        super()._raise_fence(db, split, -1, watermark)  # keeps the watermark, checks nothing
        return True


class FreezingSink:
    """Worker A's view of the sink: its second write is where the process stops."""

    def __init__(self, sink: Any, store: FaultyStore) -> None:
        self.sink = sink
        self.store = store
        self.writes = 0
        self.frozen = trio.Event()
        self.wake = trio.Event()
        self.refused: list[int] = []
        self.landed_late = False

    async def take_over(self, split: str, fence: int) -> int | None:
        result: int | None = await self.sink.take_over(split, fence)
        return result

    async def write(self, split: str, fence: int, rows: Sequence[Any], watermark: int) -> None:
        self.writes += 1
        if self.writes != 2:
            await self.sink.write(split, fence, rows, watermark)
            return
        self.store.freeze()  # no renewal reaches the store any more
        self.frozen.set()
        # A stopped process notices nothing, its own split's loss included: the write it was
        # about to send goes out when it wakes.
        with trio.CancelScope(shield=True):
            await self.wake.wait()
            try:
                await self.sink.write(split, fence, rows, watermark)
            except example.StaleFence:
                self.refused = [record for _, record, _ in rows]
                raise
            self.landed_late = True


def output(path: Path) -> list[tuple[int, int]]:
    with closing(sqlite3.connect(path)) as db:
        return list(db.execute("SELECT record, fence FROM output ORDER BY record, fence"))


@pytest.mark.parametrize("guarded", [True, False], ids=["fenced", "unfenced"])
async def test_a_zombies_late_rows_are_refused_and_the_output_is_exactly_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, guarded: bool
) -> None:
    path = tmp_path / "out.db"
    sink = (example.FencedSink if guarded else Unfenced)(
        path, run_sync=paused_autojump(autojump_clock)
    )
    await sink.create()
    server = MemoryServer()
    store_a = FaultyStore(MemoryStore(server=server, ephemeral_ttl=TTL), name="a")
    zombie = FreezingSink(sink, store_a)
    config = spate.Config(rebalance_delay=0.0, reconcile_interval=5.0, op_timeout=1.0)
    fences: dict[str, int] = {}

    def recording(name: str, handler: Any) -> Any:
        async def handle(split: spate.SplitHandle) -> None:
            fences[name] = split.fence
            await handler(split)

        return handle

    def worker(name: str, store: Any, handler: Any) -> Callable[[], Awaitable[Any]]:
        return lambda: spate.run_worker(
            store, job="squares", instance=name, planner=example.make_planner(1, RECORDS),
            handler=recording(name, handler), config=config,
        )  # fmt: skip

    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker("a", store_a, example.make_handler(zombie)))
            await zombie.frozen.wait()
            b = MemoryStore(server=server, ephemeral_ttl=TTL)
            verdict = await worker("b", b, example.make_handler(sink))()
            assert verdict == spate.AllComplete()
            zombie.wake.set()  # A wakes long after its lease, B's rows all written
            while not (zombie.refused or zombie.landed_late):  # noqa: ASYNC110
                await trio.sleep(1)
            store_a.thaw()
            nursery.cancel_scope.cancel()

    rows = output(path)
    assert fences["b"] > fences["a"]
    if guarded:
        assert zombie.refused == list(range(10, 20))
        assert [record for record, _ in rows] == list(range(RECORDS))  # each exactly once
        assert {r for r, f in rows if f == fences["a"]} == set(range(10))
        assert {r for r, f in rows if f == fences["b"]} == set(range(10, RECORDS))
        assert example.exactly_once(path, 1, RECORDS)
    else:
        assert zombie.landed_late
        assert not example.exactly_once(path, 1, RECORDS)  # A's late batch landed twice


async def test_the_example_runs_a_fleet_to_exactly_once_output(tmp_path: Path) -> None:
    with trio.fail_after(60):
        assert await example.main(str(tmp_path / "out.db"), splits=4, records=30, workers=2)


def sink_fences(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as db:
        return dict(db.execute("SELECT split, fence FROM fences"))


async def wipe_job(store: MemoryStore, job: str) -> None:
    """Remove every key of ``job`` in both keyspaces, as deleting the job does."""
    prefix = Keys(job).prefix
    for keyspace in Keyspace:
        for entry in await store.list(keyspace, prefix):
            await store.delete(keyspace, entry.key)
        assert await store.list(keyspace, prefix) == []


async def test_a_job_deleted_and_run_again_on_the_same_sink_finishes_exactly_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    path = tmp_path / "out.db"
    sink = example.FencedSink(path, run_sync=paused_autojump(autojump_clock))
    await sink.create()
    store = MemoryStore(server=MemoryServer(), ephemeral_ttl=TTL)
    # failure_backoff=0: a raise hands the split back at once, so its next owner is a new one.
    config = spate.Config(
        rebalance_delay=0.0, reconcile_interval=5.0, op_timeout=1.0, failure_backoff=0
    )
    splits = 2
    work = example.make_handler(sink)

    async def first_owner_fails(split: spate.SplitHandle) -> None:
        if split.epoch == 1:
            # A first owner that takes the split over in the sink and dies: the sink's fence
            # for it is its second owner's, above any first owner's epoch.
            await sink.take_over(split.id, split.fence)
            raise RuntimeError("the first owner dies")
        await work(split)

    async def run(handler: Any) -> Any:
        with trio.fail_after(600):  # no hang
            return await spate.run_worker(
                store, job="squares", instance="a", planner=example.make_planner(splits, RECORDS),
                handler=handler, config=config,
            )  # fmt: skip

    assert await run(first_owner_fails) == spate.AllComplete()
    assert example.exactly_once(path, splits, RECORDS)
    before = sink_fences(path)
    await wipe_job(store, "squares")
    # The job again, from nothing: its fences restart at epoch 1 but carry a later
    # incarnation, so the sink lets the new owners in.
    assert await run(work) == spate.AllComplete()
    after = sink_fences(path)
    assert example.exactly_once(path, splits, RECORDS)  # every record exactly once
    assert min(after.values()) > max(before.values())


async def test_the_example_run_twice_on_one_database_is_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "out.db"
    with trio.fail_after(60):
        assert await example.main(str(path), splits=4, records=30, workers=2)
    first = sink_fences(path)
    with trio.fail_after(60):  # a fresh memory store, the same database: no hang
        assert await example.main(str(path), splits=4, records=30, workers=2)
    second = sink_fences(path)
    assert example.exactly_once(path, 4, 30)
    # Every split was taken over again, by owners the sink let in.
    assert min(second.values()) > max(first.values())
