"""Issue 35: the cost of a graceful move of one split by load, in store round trips.

Two workers share 8 splits, 4 each (started together: the join window places each split
once). Each split's handler reports a load fixed by the worker that first ran it: 2.0 a
second on ``a``, 1.0 on ``b``, so ``a`` carries 8 and ``b`` 4, and one balance round moves
exactly one split of ``a``'s to ``b`` (the mean is 6: both end at 6). The handler commits on
``revoke_requested`` and returns: the graceful way, nothing replayed.

The figure is the time from the leader's round (its ``MetricsHooks.balance`` report naming
the move) until ``b`` owns the split, against one store round trip (a CAS, measured just
before on the same store). On the memory store with 1 ms injected on every call, in virtual
time, the ratio is exactly the round trips the move waits for; on etcd and NATS, in real time
(over a minute each: loads are trusted after one), it adds the CPU of both coordinators.

Run alone with ``python -m bench --only balance-move``. Target: at most 10 round trips.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from bench._fleet import JOB, planner_of
from bench._harness import (
    Backend,
    Options,
    Row,
    backends,
    fmt_seconds,
    median,
    namespace,
    raw_cas_latencies,
)
from spate import BalanceReport, Config, MetricsHooks, SplitHandle, run_worker
from spate.store import Store
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultRates, FaultyStore

__all__ = ["TARGET", "move_one", "run"]

LEASE = 3.0
SPLITS = 8
TARGET = 10.0
"""A graceful move of one split costs at most this many store round trips, end to end."""
MEMORY_RTT = 0.001
"""The round trip injected on every memory-store call."""


class _Rounds(MetricsHooks):
    def __init__(self) -> None:
        self.moved: list[tuple[float, str, str]] = []
        """(when, split, target) of each move the leader's rounds made."""
        self.made = trio.Event()

    def balance(self, report: BalanceReport | None) -> None:
        if report is not None:
            for split, _, target, _ in report.moves:
                self.moved.append((trio.current_time(), split, target))
                self.made.set()


async def move_one(backend: Backend) -> tuple[float, float]:
    """(seconds from the round to the target owning the split, one CAS round trip)."""
    ns = namespace("bm")
    config = Config(
        max_in_flight=SPLITS,
        rebalance_delay=0.0,
        balance_interval=5.0,
        max_moved_load=0.2,
        split_requests=False,
    )
    rounds = _Rounds()
    owner: dict[str, str] = {}
    gained: dict[tuple[str, str], float] = {}
    """(split, instance) -> when that instance's handler last began on the split."""
    load_of: dict[str, float] = {}
    changed = trio.Event()

    def handler(instance: str, load: float) -> object:
        async def handle(split: SplitHandle) -> None:
            nonlocal changed
            per_second = load_of.setdefault(split.id, load)
            owner[split.id] = instance
            gained[(split.id, instance)] = trio.current_time()
            changed.set()
            changed = trio.Event()
            position = split.progress.watermark or 0
            while not split.revoke_requested.is_set():
                with trio.move_on_after(1.0):
                    await split.revoke_requested.wait()
                split.report_load(per_second)
                position += 1
                await split.commit(position)  # drain-then-commit: nothing replays

        return handle

    async with (
        backend.open(ns, LEASE) as a_store,
        backend.open(ns, LEASE) as b_store,
        trio.open_nursery() as nursery,
    ):
        for instance, store, load in (("a", a_store, 2.0), ("b", b_store, 1.0)):
            nursery.start_soon(
                lambda i=instance, s=store, ld=load: run_worker(
                    s, job=JOB, instance=i, planner=planner_of(SPLITS),
                    handler=handler(i, ld), config=config, metrics=rounds,
                )
            )  # fmt: skip
        with trio.fail_after(300):
            await rounds.made.wait()
        at, split, target = rounds.moved[0]
        with trio.fail_after(60):
            while owner.get(split) != target:
                await changed.wait()
        took = gained[(split, target)] - at  # the round, to the target's handler starting
        value = b"x" * 160  # about a progress record
        rtt = median(await raw_cas_latencies(a_store, "raw.rtt", value, 100))
        nursery.cancel_scope.cancel()
    return took, rtt


async def _memory_move() -> tuple[float, float]:
    server = MemoryServer()

    @asynccontextmanager
    async def open_store(ns: str, ttl: float) -> AsyncIterator[Store]:
        async with MemoryStore(server=server, namespace=ns, ephemeral_ttl=ttl) as inner:
            yield FaultyStore(inner, rates=FaultRates(latency=MEMORY_RTT))

    return await move_one(Backend("memory", open=open_store))


def _row(store: str, results: list[tuple[float, float]], how: str) -> Row:
    took = median(t for t, _ in results)
    rtt = median(r for _, r in results)
    return Row(
        bench="balance: graceful move of one split",
        store=store,
        measured=fmt_seconds(took),
        baseline=f"{fmt_seconds(rtt)} (one CAS round trip)",
        ratio=took / rtt if rtt > 0 else math.nan,
        target=f"≤ {TARGET:g}x",
        met=rtt > 0 and took / rtt <= TARGET,
        note=f"the leader's round → the target owns the split; {how}; median of {len(results)}",
    )


def run(options: Options) -> list[Row]:
    """One graceful move by load: memory (virtual time, injected round trip), etcd, NATS."""
    rows: list[Row] = []
    if options.wants("memory"):
        clock = trio.testing.MockClock(autojump_threshold=0)
        result = trio.run(_memory_move, clock=clock)
        rows.append(_row("memory", [result], f"{MEMORY_RTT * 1000:g} ms per call, virtual time"))
        print(rows[-1].line(), flush=True)
    real = [name for name in ("etcd", "nats") if options.wants(name)]
    if real:
        rows += trio.run(_run_real, real, options)
    return rows


async def _run_real(names: list[str], options: Options) -> list[Row]:
    rows: list[Row] = []
    reps = 1 if options.quick else 2
    async with backends(names) as found:
        for name in names:
            results = [await move_one(found[name]) for _ in range(reps)]
            rows.append(_row(name, results, "real time"))
            print(rows[-1].line(), flush=True)
    return rows
