"""The cost of a graceful move of one split by load, in store round trips (docs/balancing.md).

Two workers share 8 splits, 4 each (started a second apart, so ``a`` leads, and within the
join window, which places each split once). Each split's handler reports a load fixed by the
worker that first ran it: 2.0 a second on ``a``, 1.0 on ``b``, so ``a`` carries 8 and ``b``
4, and one balance round moves exactly one split of ``a``'s to ``b`` (the mean is 6: both end
at 6). The handler commits on
``revoke_requested`` and returns: the graceful way, nothing replayed. The leader is the
source, so the target learns that its split came free from the leader's nudge (a rewrite of
its assignment record): the longer of the two ways (a leading target sees the lease go).

Two figures per store, from one run, over the window from the leader's round (its
``MetricsHooks.balance`` report naming the move) until ``b``'s handler starts on the split:

- **round trips counted**: each worker's store is wrapped to time every call; the move's calls
  (writes of assignment records and of the split's records; the target's reads once the
  lease is gone) that lie end to end in the window, at most, are the sequential round trips
  the move waited for (calls in flight together count once; see :func:`round_trips`).
- **end to end ÷ one CAS**: the window's length against one store round trip (a CAS, measured
  just after on the same store). On the memory store with 1 ms injected on every call, in
  virtual time, it equals the count; on etcd and NATS, in real time (over a minute each: loads
  are trusted after one), it adds the CPU of both coordinators (which run in this one process)
  and of the watches: the note gives the process's CPU time over the window as a share of it.

Run alone with ``python -m bench --only balance-move``. Target: at most 10 round trips.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager

import attrs
import trio
import trio.testing

from bench._fleet import JOB, RecordingStore, planner_of
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
from spate import (
    BalanceReport,
    Config,
    Handler,
    MetricsHooks,
    SplitHandle,
    StoreError,
    run_worker,
)
from spate.store import Entry, Keyspace, Revision, Session, Store, Write, WriteResult, batched
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultRates, FaultyStore

__all__ = ["TARGET", "Move", "TimedStore", "move_one", "round_trips", "run"]

LEASE = 3.0
SPLITS = 8
TARGET = 10.0
"""A graceful move of one split costs at most this many store round trips, end to end."""
MEMORY_RTT = 0.001
"""The round trip injected on every memory-store call."""


@attrs.frozen
class Timed:
    """One store call of a worker, timed."""

    began: float
    ended: float
    op: str
    key: str
    who: str
    """The worker that made it."""


@attrs.frozen
class Move:
    """One graceful move, measured."""

    took: float
    """Seconds from the leader's round to the target's handler starting on the split."""
    rtt: float
    """One CAS round trip on the same store, measured just after."""
    round_trips: int
    """The move's store calls laid end to end in that window (see :func:`round_trips`)."""
    calls: int
    """The move's store calls in that window, in all."""
    cpu: float
    """This process's CPU seconds over the window (both coordinators run in it)."""
    led: str
    """Who led the round: the source, the target (one nudge less), or a third worker."""


class TimedStore(RecordingStore):
    """A worker's store that also notes when each point call began and ended."""

    def __init__(self, inner: Store, who: str, timed: list[Timed]) -> None:
        super().__init__(inner)
        self.who = who
        self.timed = timed
        """Every get, create, update and delete (a group's writes, each)."""

    async def _timed(self, calls: Sequence[tuple[str, str]], call: object) -> object:
        began = trio.current_time()
        try:
            return await call  # type: ignore[misc]
        finally:
            ended = trio.current_time()
            self.timed.extend(Timed(began, ended, op, key, self.who) for op, key in calls)

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        result = await self._timed([("get", key)], super().get(keyspace, key))
        return result  # type: ignore[return-value]

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        result = await self._timed(
            [("create", key)], super().create(keyspace, key, value, session=session)
        )
        return result  # type: ignore[return-value]

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        result = await self._timed(
            [("update", key)], super().update(keyspace, key, value, expected, session=session)
        )
        return result  # type: ignore[return-value]

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        result = await self._timed([("delete", key)], super().delete(keyspace, key, expected))
        return result  # type: ignore[return-value]

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        calls = [(write.kind, write.key) for write in writes]
        result = await self._timed(calls, batched(self.inner).write_many(writes, session=session))
        return result  # type: ignore[return-value]


def round_trips(
    timed: Sequence[Timed], began: float, ended: float, split: str, target: str
) -> tuple[int, int]:
    """(sequential round trips, calls) of the move of ``split`` to ``target`` in [began, ended].

    The move's calls: every write naming an assignment record or ``split``'s own records,
    and the reads the target makes once the split's lease is gone (it can claim nothing
    before: its earlier reads, and the leader's point reads, feed views, not the move). The
    round trips are the most of those calls that lie end to end (each beginning no sooner
    than the one before ended): calls in flight together count once, a chain of dependent
    calls counts each. Interval scheduling by earliest end finds it.
    """
    window = [c for c in timed if began <= c.began and c.ended <= ended]
    freed = max(
        (c.ended for c in window if c.op == "delete" and c.key.endswith("." + split)),
        default=began,
    )
    mine = sorted(
        (call.ended, call.began) for call in window if _of_move(call, split, target, freed)
    )
    chained, last = 0, began
    for end, start in mine:
        if start >= last:
            chained, last = chained + 1, end
    return chained, len(mine)


def _of_move(call: Timed, split: str, target: str, freed: float) -> bool:
    key = call.key
    if call.op == "get":
        # A session's proof or the split's records, read by the target once it may claim.
        mine = ".worker." in key or key.endswith("." + split)
        return mine and call.who == target and call.began >= freed
    return key.endswith("." + split) or ".assign." in key


class _Rounds(MetricsHooks):
    """One worker's metrics: the moves of the balance rounds it led, in a list shared by all."""

    def __init__(self, instance: str, moved: list[_Moved], made: trio.Event) -> None:
        self.instance = instance
        self.moved = moved
        self.made = made

    def balance(self, report: BalanceReport | None) -> None:
        if report is not None:
            for split, source, target, _ in report.moves:
                now = (trio.current_time(), time.process_time())
                self.moved.append(_Moved(*now, split, source, target, self.instance))
                self.made.set()


@attrs.frozen
class _Moved:
    at: float
    cpu: float
    split: str
    source: str
    target: str
    leader: str


async def move_one(backend: Backend) -> Move:
    """One graceful move on ``backend``, measured (see the module docstring)."""
    ns = namespace("bm")
    config = Config(
        max_in_flight=SPLITS,
        rebalance_delay=0.0,
        balance_interval=5.0,
        max_moved_load=0.2,
        split_requests=False,
    )
    moved: list[_Moved] = []
    made = trio.Event()
    owner: dict[str, str] = {}
    gained: dict[tuple[str, str], tuple[float, float]] = {}
    """(split, instance) -> when (and at what CPU time) its handler last began on the split."""
    timed: list[Timed] = []
    load_of: dict[str, float] = {}
    changed = trio.Event()

    def handler(instance: str, load: float) -> Handler:
        async def handle(split: SplitHandle) -> None:
            nonlocal changed
            per_second = load_of.setdefault(split.id, load)
            owner[split.id] = instance
            gained[(split.id, instance)] = (trio.current_time(), time.process_time())
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

    def worker(instance: str, store: Store, load: float) -> Awaitable[object]:
        return run_worker(
            store, job=JOB, instance=instance, planner=planner_of(SPLITS),
            handler=handler(instance, load), config=config, metrics=_Rounds(instance, moved, made),
        )  # fmt: skip

    async with (
        backend.open(ns, LEASE) as a_inner,
        backend.open(ns, LEASE) as b_inner,
        trio.open_nursery() as nursery,
    ):
        a_store, b_store = TimedStore(a_inner, "a", timed), TimedStore(b_inner, "b", timed)
        for instance, store, load in (("a", a_store, 2.0), ("b", b_store, 1.0)):
            nursery.start_soon(worker, instance, store, load)
            # ``a`` leads (it is the source, so the target learns its split came free from
            # the leader's nudge: the longer way); ``b`` still joins within the join window.
            await trio.sleep(1.0)
        with trio.fail_after(300):
            await made.wait()
        move = moved[0]
        split, target = move.split, move.target
        with trio.fail_after(60):
            while owner.get(split) != target:
                await changed.wait()
        began, cpu_then = gained[(split, target)]  # the round, to the target's handler starting
        chained, calls = round_trips(timed, move.at, began, split, target)
        led = (
            "the source"
            if move.leader == move.source
            else "the target"
            if move.leader == target
            else "a third worker"
        )
        value = b"x" * 160  # about a progress record
        rtt = median(await raw_cas_latencies(a_inner, "raw.rtt", value, 100))
        nursery.cancel_scope.cancel()
    return Move(began - move.at, rtt, chained, calls, cpu_then - move.cpu, led)


async def _memory_move() -> Move:
    server = MemoryServer()

    @asynccontextmanager
    async def open_store(ns: str, ttl: float) -> AsyncIterator[Store]:
        async with MemoryStore(server=server, namespace=ns, ephemeral_ttl=ttl) as inner:
            yield FaultyStore(inner, rates=FaultRates(latency=MEMORY_RTT))

    return await move_one(Backend("memory", open=open_store))


def _rows(store: str, results: list[Move], how: str, *, real: bool = True) -> list[Row]:
    """Two rows of one run: the round trips counted, and the time against one round trip."""
    took = median(m.took for m in results)
    rtt = median(m.rtt for m in results)
    chained = max(m.round_trips for m in results)
    calls = max(m.calls for m in results)
    cpu = median(m.cpu / m.took for m in results if m.took > 0)
    ratio = took / rtt if rtt > 0 else math.nan
    bench = "balance: graceful move of one split"
    counted = Row(
        bench=f"{bench}, round trips",
        store=store,
        measured=f"{chained} sequential ({calls} calls)",
        baseline="1 round trip",
        ratio=float(chained),
        target=f"≤ {TARGET:g}",
        met=chained <= TARGET,
        note=(
            "the move's store calls laid end to end, the leader's round → the target's "
            f"handler ({' and '.join(sorted({m.led for m in results}))} led); the most of "
            f"{len(results)} run(s)"
        ),
    )
    timed = Row(
        bench=f"{bench}, time",
        store=store,
        measured=fmt_seconds(took),
        baseline=f"{fmt_seconds(rtt)} (one CAS round trip)",
        ratio=ratio,
        target=f"≤ {TARGET:g}x",
        met=rtt > 0 and ratio <= TARGET,
        note=(
            f"the same window ÷ one CAS; {how}; median of {len(results)}"
            + (
                f"; this process on CPU {cpu:.0%} of the window (both coordinators run in it), "
                f"so the window is {ratio / max(chained, 1):.1f} CAS times per round trip "
                f"counted ({chained})"
                + (": missed on CPU, not on round trips" if chained <= TARGET < ratio else "")
                if real
                else ""
            )
        ),
    )
    return [counted, timed]


def run(options: Options) -> list[Row]:
    """One graceful move by load: memory (virtual time, injected round trip), etcd, NATS."""
    rows: list[Row] = []
    if options.wants("memory"):
        clock = trio.testing.MockClock(autojump_threshold=0)
        result = trio.run(_memory_move, clock=clock)
        for row in _rows(
            "memory", [result], f"{MEMORY_RTT * 1000:g} ms per call, virtual time", real=False
        ):
            rows.append(row)
            print(row.line(), flush=True)
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
            for row in _rows(name, results, "real time"):
                rows.append(row)
                print(row.line(), flush=True)
    return rows
