"""Membership debounce: a burst of joins causes one rebalance, not one per join."""

from __future__ import annotations

from collections.abc import Awaitable

import trio
import trio.testing

import spate
from spate._core.records import AssignmentRecord, decode
from spate.store import Keyspace, Put, SnapshotDone
from spate_stores.memory import MemoryServer

from .test_worker import JOB, client, config, planner, wait_until


async def test_membership_debounce_coalesces_a_burst_of_joins_into_one_rebalance(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def rounds_of_assignment_writes(debounce: float) -> int:
        server = MemoryServer()
        writes: list[float] = []
        observer = client(server)

        async def handle(split: spate.SplitHandle) -> None:
            await split.revoke_requested.wait()  # cooperative: hand back when asked

        async def watch_assignments() -> None:
            live = False
            async with observer.watch(Keyspace.DURABLE, f"{JOB}.assign.") as events:
                async for event in events:
                    if isinstance(event, SnapshotDone):
                        live = True  # what came before is the state, not new writes
                    elif live and isinstance(event, Put):
                        writes.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            # Capacity for every split: nothing queues, so the only publish is the rebalance.
            cfg = config(membership_debounce=debounce, max_in_flight=16)

            def start(name: str) -> None:
                nursery.start_soon(
                    lambda: spate.run_worker(
                        client(server),
                        job=JOB,
                        instance=name,
                        planner=planner(12),
                        handler=handle,
                        config=cfg,
                    )
                )

            start("a")
            await trio.sleep(10)
            nursery.start_soon(watch_assignments)
            await trio.sleep(1)
            for name in ("b", "c", "d"):
                start(name)
                await trio.sleep(0.7)
            await trio.sleep(15)
            nursery.cancel_scope.cancel()
        # Writes closer together than a second belong to one publish round.
        rounds = 0
        last = -10.0
        for when in writes:
            if when - last > 0.5:
                rounds += 1
            last = when
        return rounds

    assert await rounds_of_assignment_writes(debounce=3.0) == 1
    assert await rounds_of_assignment_writes(debounce=0.0) > 1


async def test_assignments_do_not_flip_flop_while_moves_are_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Splits handed back but not yet claimed have no owner; the leader must keep them where it
    # already put them instead of placing them afresh (which bounced them between workers).
    server = MemoryServer()
    observer = client(server)
    history: dict[str, list[str]] = {}

    async def handle(split: spate.SplitHandle) -> None:
        await split.revoke_requested.wait()

    async def watch_assignments() -> None:
        async with observer.watch(Keyspace.DURABLE, f"{JOB}.assign.") as events:
            async for event in events:
                if isinstance(event, Put):
                    assignee = event.entry.key.rsplit(".", 1)[1]
                    record = decode(AssignmentRecord, event.entry.key, event.entry.value)
                    for split in record.splits:
                        moves = history.setdefault(split, [])
                        if not moves or moves[-1] != assignee:
                            moves.append(assignee)

    def worker(name: str) -> Awaitable[object]:
        return spate.run_worker(
            client(server),
            job=JOB,
            instance=name,
            planner=planner(12),
            handler=handle,
            config=config(membership_debounce=3.0),
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_assignments)
        for name in ("a", "b", "c", "d"):
            nursery.start_soon(worker, name)
            await trio.sleep(11 if name == "a" else 0.7)
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    # A split moves at most once per rebalance and never returns to a worker it left.
    for split, owners in history.items():
        assert len(owners) == len(set(owners)), (split, owners)


async def test_debounce_never_delays_handing_out_unowned_splits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # a holds 4 of 12 splits (its cap); b joins, which opens a long quiet period. The 8
    # queued splits are unowned, so they go to b at once instead of after the quiet period.
    # (b joins once a's first assignment is out: a new job's waits out the join window, the
    # same 60 s, and would give b its share with a's.)
    server = MemoryServer()
    holders: dict[str, str] = {}

    def handler(name: str) -> spate.Handler:
        async def handle(split: spate.SplitHandle) -> None:
            holders[split.id] = name
            await split.revoke_requested.wait()

        return handle

    def worker(name: str) -> Awaitable[object]:
        return spate.run_worker(
            client(server),
            job=JOB,
            instance=name,
            planner=planner(12),
            handler=handler(name),
            config=config(membership_debounce=60.0, max_in_flight=4),
        )

    async with trio.open_nursery() as nursery:
        for name in ("a", "b"):
            nursery.start_soon(worker, name)
            await trio.sleep(65 if name == "a" else 5)
        await wait_until(lambda: sum(1 for h in holders.values() if h == "b") == 4, within=5)
        nursery.cancel_scope.cancel()
