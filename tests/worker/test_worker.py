"""run_worker and SplitHandle under MockClock: what a handler sees when the fleet moves."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import spate
from spate._core.records import Keys, ProgressRecord, decode
from spate.store import Entry, Keyspace, Store
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultyStore

TTL = 9.0
JOB = "job"
KEYS = Keys(JOB)


def config(**overrides: Any) -> spate.Config:
    base: dict[str, Any] = {
        "op_timeout": 1.0,
        "reconcile_interval": 5.0,
        "rebalance_delay": 0.0,
        # No join window or debounce: a lone test worker's job is placed at once (the join
        # window and the debounce have tests of their own that set them).
        "membership_debounce": 0.0,
        "drain_deadline": 3.0,
        "planner_thread": False,
        # No split requests (see tests/common.py: the splitting tests turn them on).
        "split_requests": False,
    }
    base.update(overrides)
    return spate.Config(**base)


def planner(count: int) -> Callable[[spate.PlanContext], spate.Plan]:
    def plan(ctx: spate.PlanContext) -> spate.Plan:
        return spate.Plan([spate.SplitSpec(f"s{i:02d}", b"", 1) for i in range(count)], final=True)

    return plan


def client(server: MemoryServer) -> MemoryStore:
    return MemoryStore(server=server, ephemeral_ttl=TTL)


async def progress_of(store: Store, split: str) -> ProgressRecord:
    entry = await store.get(Keyspace.DURABLE, KEYS.split(split))
    assert entry is not None
    return decode(ProgressRecord, entry.key, entry.value)


async def wait_until(condition: Callable[[], bool], within: float = 120.0) -> None:
    # Polling reads best for ad-hoc conditions over several workers' state.
    with trio.fail_after(within):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.05)


Handler = Callable[[spate.SplitHandle], Awaitable[None]]


async def test_a_lost_splits_handler_is_cancelled_and_a_later_commit_raises_fenced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    store = FaultyStore(client(server))
    handles: list[spate.SplitHandle] = []
    cancelled: list[str] = []

    async def handle(split: spate.SplitHandle) -> None:
        handles.append(split)
        await split.commit(5, state=b"five")
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(split.id)
            raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                store,
                job=JOB,
                instance="a",
                planner=planner(1),
                handler=handle,
                config=config(),
                leave_deadline=0,
            )
        )
        await wait_until(lambda: bool(handles))
        await trio.sleep(1)
        store.partition()  # no renewal lands any more: the worker must fence itself
        await wait_until(lambda: cancelled == ["s00"], within=2 * TTL)
        store.heal()
        with pytest.raises(spate.Fenced):
            await handles[0].commit(9, state=b"nine")
        nursery.cancel_scope.cancel()
    record = await progress_of(server_client := client(server), "s00")
    assert (record.watermark, record.state) == (5, b"five")  # the later commit wrote nothing
    await server_client.aclose()


async def test_a_handler_that_returns_on_revoke_hands_back_and_nothing_replays(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    resumed_at: dict[str, int | None] = {}
    returned: list[str] = []

    def make_handler(name: str) -> Handler:
        async def handle(split: spate.SplitHandle) -> None:
            if name == "b":
                resumed_at[split.id] = split.progress.watermark
            position = split.progress.watermark or 0
            while position < 1000:
                await trio.sleep(0.1)
                position += 1
                await split.commit(position, completed=position == 1000)
                if split.revoke_requested.is_set():
                    returned.append(split.id)
                    return

        return handle

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server),
                job=JOB,
                instance="a",
                planner=planner(4),
                handler=make_handler("a"),
                config=config(),
            )
        )
        await trio.sleep(5)
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server),
                job=JOB,
                instance="b",
                planner=planner(4),
                handler=make_handler("b"),
                config=config(),
            )
        )
        await wait_until(lambda: len(resumed_at) == 2)
        nursery.cancel_scope.cancel()
    assert sorted(returned) == sorted(resumed_at)
    observer = client(server)
    for split, watermark in resumed_at.items():
        assert watermark is not None
        assert watermark > 0
        record = await progress_of(observer, split)
        assert record.attempts == 0  # a hand-back consumes no attempt


async def test_a_handler_that_ignores_a_revocation_is_cancelled_at_the_drain_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    revoked_at: dict[str, float] = {}
    cancelled_at: dict[str, float] = {}

    async def stubborn(split: spate.SplitHandle) -> None:
        async def note_revoke() -> None:
            await split.revoke_requested.wait()
            revoked_at[split.id] = trio.current_time()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(note_revoke)
                await trio.sleep_forever()
        finally:
            cancelled_at[split.id] = trio.current_time()

    async def idle(split: spate.SplitHandle) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server),
                job=JOB,
                instance="a",
                planner=planner(4),
                handler=stubborn,
                config=config(),
            )
        )
        await trio.sleep(5)
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server),
                job=JOB,
                instance="b",
                planner=planner(4),
                handler=idle,
                config=config(),
            )
        )
        await wait_until(lambda: len(cancelled_at) == 2 and len(revoked_at) == 2)
        nursery.cancel_scope.cancel()
    for split, revoked in revoked_at.items():
        waited = cancelled_at[split] - revoked
        assert 3.0 <= waited <= 3.0 + TTL / 3 + 1.0  # the drain deadline, plus a heartbeat


async def test_a_raising_handler_fails_its_split_and_the_worker_keeps_going(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    server = MemoryServer()

    async def handle(split: spate.SplitHandle) -> None:
        if split.id == "s01":
            raise ValueError("bad record 17")
        await split.commit(10, completed=True)

    verdict = await spate.run_worker(
        client(server),
        job=JOB,
        instance="a",
        planner=planner(4),
        handler=handle,
        config=config(max_attempts=2),
    )
    assert verdict == spate.Stalled(completed=3, quarantined=1)
    record = await progress_of(client(server), "s01")
    assert record.attempts == 2
    assert any("s01" in r.getMessage() and r.exc_info for r in caplog.records)


@attrs.frozen
class Leave:
    """What one graceful leave looked like, beside a worker that stays."""

    handed_over: float | None
    """Seconds from the cancellation until the other worker's handlers held every split."""
    left: float
    """Seconds from the cancellation until the leaving ``run_worker`` returned."""
    owners_when_left: dict[str, str | None]
    """Each split's progress-record owner the moment it returned."""
    running_when_left: dict[str, str]
    """Which worker's handler was running each split the moment it returned."""


async def leave_beside_another(
    server: MemoryServer,
    splits: int,
    cfg: spate.Config,
    *,
    leaving_store: Store | None = None,
    before_leaving: Callable[[], object] = lambda: None,
) -> Leave:
    """Workers "a" and "b" share a job of ``splits``; "a" leaves (its run_worker cancelled).

    "a" leaves once both run handlers and two seconds passed; ``before_leaving`` runs just
    before. Returns once its ``run_worker`` returned (its leave deadline is 60 s).
    """
    ids = [f"s{n:02d}" for n in range(splits)]
    started_by: dict[str, str] = {}  # the worker whose handler started on each split last
    running: dict[str, str] = {}

    def make_handler(name: str) -> Handler:
        async def handle(split: spate.SplitHandle) -> None:
            started_by[split.id] = running[split.id] = name
            try:
                await trio.sleep_forever()
            finally:
                if running.get(split.id) == name:
                    del running[split.id]

        return handle

    leave = trio.CancelScope()
    seen: dict[str, Any] = {}

    async def leaving_worker() -> None:
        with leave:
            await spate.run_worker(
                leaving_store or client(server),
                job=JOB,
                instance="a",
                planner=planner(splits),
                handler=make_handler("a"),
                config=cfg,
                leave_deadline=60.0,
            )
        seen["left"] = trio.current_time()
        seen["running"] = dict(running)
        observer = client(server)
        seen["owners"] = {split: (await progress_of(observer, split)).owner for split in ids}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(leaving_worker)
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server),
                job=JOB,
                instance="b",
                planner=planner(splits),
                handler=make_handler("b"),
                config=cfg,
            )
        )
        await wait_until(lambda: set(running.values()) == {"a", "b"})
        await trio.sleep(2)
        before_leaving()
        started = trio.current_time()
        leave.cancel()
        handed_over = None
        with trio.fail_after(120):
            while True:  # polled: it also notes when "b" held them all
                if handed_over is None and all(started_by.get(i) == "b" for i in ids):
                    handed_over = trio.current_time() - started
                if "owners" in seen:
                    break
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    return Leave(handed_over, seen["left"] - started, seen["owners"], seen["running"])


async def test_cancelling_run_worker_hands_its_splits_over_without_waiting_for_expiry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    leave = await leave_beside_another(server, 6, config())
    assert leave.handed_over is not None
    assert leave.handed_over < TTL / 3  # well before any lease could have expired
    # run_worker returned only once the splits were held elsewhere
    assert leave.left >= leave.handed_over - 0.1
    assert leave.owners_when_left == {f"s{n:02d}": "b" for n in range(6)}
    observer = client(server)
    for n in range(6):
        assert (await progress_of(observer, f"s{n:02d}")).attempts == 0


class _CountingReads(MemoryStore):
    """A memory store client that notes every watch it opens and every read it makes."""

    def __init__(self, server: MemoryServer) -> None:
        super().__init__(server=server, ephemeral_ttl=TTL)
        self.reads: list[str] = []

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        self.reads.append(f"watch {keyspace.value} {prefix}")
        return super().watch(keyspace, prefix, exact=exact)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        self.reads.append(f"list {keyspace.value} {prefix}")
        return await super().list(keyspace, prefix)

    def list_pages(self, keyspace: Keyspace, prefix: str, *, page_size: int) -> Any:
        self.reads.append(f"list {keyspace.value} {prefix}")
        return super().list_pages(keyspace, prefix, page_size=page_size)

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        self.reads.append(f"get {keyspace.value} {key}")
        return await super().get(keyspace, key)


async def test_a_leaving_worker_waits_for_new_owners_from_its_own_keys(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A leaving worker learns where its splits went by reading their progress records, and
    # whether anyone can take the rest from the workers' presence and assignment records: it
    # never lists or watches the job (it used to list every key of it, however large).
    server = MemoryServer()
    store = _CountingReads(server)
    reads_before: list[int] = []
    leave = await leave_beside_another(
        server,
        6,
        config(reconcile_interval=3600.0),
        leaving_store=store,
        before_leaving=lambda: reads_before.append(len(store.reads)),
    )
    held = {f"get durable job.split.s{n:02d}" for n in range(6)}
    workers = {"list ephemeral job.worker.", "list durable job.assign."}
    exact = {"watch ephemeral job.leader", "watch durable job.plan", "watch durable job.assign.a"}
    after = set(store.reads[reads_before[0] :])
    assert after <= held | workers | exact, after - (held | workers | exact)
    assert held & after
    # it returned only once every split it had was owned by the other worker
    assert leave.owners_when_left == {f"s{n:02d}": "b" for n in range(6)}
    assert leave.left < 10.0  # long before its leave deadline


async def test_a_worker_leaving_a_job_larger_than_the_fleet_does_not_wait_out_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # 12 splits, 2 workers of 3 lanes: the splits handed back go back to the pool, and the
    # other worker, its lanes full, will not take them. Nothing to wait for.
    leave = await leave_beside_another(MemoryServer(), 12, config(max_in_flight=3))
    assert leave.left < 5.0  # not its 60 s leave deadline
    assert sorted(leave.running_when_left.values()) == ["b"] * 3


async def test_a_worker_leaving_alone_returns_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Nobody else is present to take its splits: there is nothing to wait for.
    server = MemoryServer()
    held: list[str] = []

    async def handle(split: spate.SplitHandle) -> None:
        held.append(split.id)
        await trio.sleep_forever()

    leave = trio.CancelScope()
    took: list[float] = []

    async def worker() -> None:
        with leave:
            await spate.run_worker(
                client(server),
                job=JOB,
                instance="a",
                planner=planner(3),
                handler=handle,
                config=config(),
                leave_deadline=60.0,
            )
        took.append(trio.current_time() - started)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        await wait_until(lambda: len(held) == 3)
        started = trio.current_time()
        leave.cancel()
        await wait_until(lambda: bool(took))
    assert took[0] < 5.0  # not its 60 s leave deadline


async def test_handlers_finish_after_their_final_commit_before_run_worker_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A verdict used to cancel every handler at once, cutting off the code after a final
    # commit (an audit record, a clean-up): found by `spate worker --history` losing its last line.
    cleaned: list[str] = []

    async def handle(split: spate.SplitHandle) -> None:
        await split.commit(1, completed=True)
        await trio.sleep(0.5)
        cleaned.append(split.id)

    verdict = await spate.run_worker(
        client(MemoryServer()),
        job=JOB,
        instance="a",
        planner=planner(3),
        handler=handle,
        config=config(),
    )
    assert verdict == spate.AllComplete()
    assert sorted(cleaned) == ["s00", "s01", "s02"]
