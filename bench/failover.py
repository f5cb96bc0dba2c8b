"""Benchmarks 3 and 4: how long a split goes unowned when its worker dies, or leaves politely.

3. **Failover** — two workers share 8 splits (4 each, 3 s lease, no ``rebalance_delay`` grace
   window); one is killed without handing anything back; the figure is the time from the
   kill until the survivor owns all 8, against the lease. A kill is what the store sees of
   a crash: on memory a partitioned, cancelled coordinator (under Trio's MockClock: exact
   and deterministic); on etcd and NATS a worker *process* ended with SIGKILL (an etcd
   session's keepalives stop without a revoke; NATS renewals stop). Also measured on a
   memory store whose expiry events are silent (``FaultRates(silent_expiry=True)``: the
   NATS-before-2.11 case), where only the periodic reconcile listing can notice the expiry.
   Each case is repeated with the kill at several points of the renewal cycle.
4. **Graceful hand-over** — the same fleet, but the leaving worker's ``run_worker`` is
   cancelled (hand-back, presence deleted); the figure is the time from the cancellation
   until the survivor owns every split, against one store round trip (a CAS, measured just
   before on the same store). On etcd and NATS (real time), and on the memory store with a
   1 ms round trip injected on every call (``FaultRates(latency=...)``) in virtual time: there
   the ratio is exactly the number of round trips the hand-over waits for. Each etcd and
   NATS row also names the hand-over's CPU: the same hand-over on a memory store that
   answers every call at once, in real time, as a multiple of that row's round trip. No
   saving of round trips can take a store's ratio below it.

Run alone with ``python -m bench --only failover`` (3) or ``--only handover`` (4).
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio
import trio.testing

from bench._fleet import (
    JOB,
    Worker,
    failover_config,
    idle,
    planner_of,
    split_id,
    start_worker,
)
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
from spate import Config, SplitHandle, run_worker
from spate.store import Store
from spate_stores.memory import MemoryServer, MemoryStore
from spate_testing.faults import FaultRates, FaultyStore

LEASE = 3.0
PER_WORKER = 4
ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Case:
    """One failover scenario."""

    victim_leads: bool
    silent: bool = False
    reconcile: float | None = None
    """Config.reconcile_interval (None: the default)."""

    @property
    def label(self) -> str:
        role = "leader killed" if self.victim_leads else "follower killed"
        if not self.silent:
            return role
        every = Config().reconcile_interval if self.reconcile is None else self.reconcile
        return f"{role}, silent expiry, reconcile every {every:g} s"


def _config(case: Case, **overrides: object) -> Config:
    extra: dict[str, object] = dict(overrides)
    if case.reconcile is not None:
        extra["reconcile_interval"] = case.reconcile
    return failover_config(2 * PER_WORKER, **extra)


def _offsets(count: int) -> list[float]:
    """Kill points spread over one renewal cycle (a third of the lease)."""
    return [0.1 + (LEASE / 3) * k / count for k in range(count)]


# -- memory, under MockClock ---------------------------------------------------------------


async def _memory_failover(case: Case, offset: float) -> float:
    server = MemoryServer()
    rates = FaultRates(silent_expiry=case.silent)

    def client(name: str) -> FaultyStore:
        inner = MemoryStore(server=server, namespace="failover", ephemeral_ttl=LEASE)
        return FaultyStore(inner, rates=rates, owns_inner=True, name=name)

    # Threads race a MockClock: run the planner on the loop.
    config = _config(case, planner_thread=False)
    async with (
        client("survivor") as survivor_store,
        client("victim") as victim_store,
        trio.open_nursery() as nursery,
    ):
        stores = {"victim": victim_store, "survivor": survivor_store}

        async def join(name: str) -> Worker:
            return await start_worker(
                nursery, stores[name], name, planner=planner_of(2 * PER_WORKER), config=config
            )

        first = await join("victim" if case.victim_leads else "survivor")
        await first.until(lambda: first.c.is_leader, 60, "lead")
        second = await join("survivor" if case.victim_leads else "victim")
        survivor, victim = (second, first) if case.victim_leads else (first, second)
        await survivor.until(lambda: len(survivor.owned) == PER_WORKER, 120, "balance")
        await victim.until(lambda: len(victim.owned) == PER_WORKER, 120, "balance")
        await trio.sleep(offset)
        taken = set(victim.owned)
        killed = trio.current_time()
        victim_store.partition()
        victim.kill()
        await survivor.until(lambda: taken <= survivor.owned, 100 * LEASE, "take over")
        took = trio.current_time() - killed
        nursery.cancel_scope.cancel()
    return took


def memory_failover(case: Case, offset: float) -> float:
    """One failover on the memory store, in virtual time (exact)."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    return trio.run(_memory_failover, case, offset, clock=clock)


# -- real servers: the victim is a process ---------------------------------------------------


@attrs.define(eq=False)
class Victim:
    """A worker process (bench/_victim.py) and what it has said about itself."""

    process: trio.Process
    leading: bool = False
    owned: set[str] = attrs.field(factory=set)
    changed: trio.Event = attrs.field(factory=trio.Event)

    async def read(self) -> None:
        """Follow the process's stdout until it ends."""
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                word, _, split = line.decode().partition(" ")
                if word == "leader":
                    self.leading = True
                elif word == "gained":
                    self.owned.add(split)
                elif word == "lost":
                    self.owned.discard(split)
            self.changed.set()
            self.changed = trio.Event()

    async def until(self, condition: Callable[[], bool], within: float, what: str) -> None:
        """Wait until ``condition()`` holds (the process said so)."""
        try:
            with trio.fail_after(within):
                while not condition():
                    await self.changed.wait()
        except trio.TooSlowError:
            raise trio.TooSlowError(f"victim process: {what} within {within} s") from None


async def _real_failover(backend: Backend, case: Case, offset: float) -> float:
    assert backend.url is not None
    ns = namespace("fo")
    url = backend.url(ns, LEASE)
    config = _config(case)
    command = [
        sys.executable,
        "-m",
        "bench._victim",
        url,
        "victim",
        str(2 * PER_WORKER),
        str(2 * PER_WORKER),
    ]
    async with backend.open(ns, LEASE) as store, trio.open_nursery() as nursery:
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT
        )
        victim = Victim(process)
        nursery.start_soon(victim.read)
        try:
            if case.victim_leads:
                await victim.until(lambda: victim.leading, 60, "lead")
                survivor = await _join(nursery, store, config, 2 * PER_WORKER)
            else:
                survivor = await _join(nursery, store, config, 2 * PER_WORKER)
                await survivor.until(lambda: survivor.c.is_leader, 60, "lead")
            await victim.until(lambda: len(victim.owned) == PER_WORKER, 60, "balance")
            await survivor.until(lambda: len(survivor.owned) == PER_WORKER, 60, "balance")
            await trio.sleep(offset)
            taken = set(victim.owned)
            killed = trio.current_time()
            process.kill()
            await survivor.until(lambda: taken <= survivor.owned, 20 * LEASE, "take over")
            took = trio.current_time() - killed
        finally:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        nursery.cancel_scope.cancel()
    return took


async def _join(nursery: trio.Nursery, store: Store, config: Config, splits: int) -> Worker:
    return await start_worker(nursery, store, "survivor", planner=planner_of(splits), config=config)


# -- 4. graceful hand-over -------------------------------------------------------------------


async def handover(backend: Backend, *, victim_leads: bool, held: int) -> tuple[float, float]:
    """(seconds until the survivor owns everything, one CAS round trip) for one hand-over."""
    ns = namespace("ho")
    config = failover_config(2 * held)
    async with (
        backend.open(ns, LEASE) as survivor_store,
        backend.open(ns, LEASE) as victim_store,
        trio.open_nursery() as nursery,
    ):
        handlers: set[str] = set()
        victim_scope = trio.CancelScope()
        changed = trio.Event()

        async def handler(split: SplitHandle) -> None:
            nonlocal changed
            handlers.add(split.id)
            changed.set()
            changed = trio.Event()
            try:
                await idle(split)
            finally:
                handlers.discard(split.id)

        async def victim(task_status: trio.TaskStatus[None]) -> None:
            task_status.started()
            with victim_scope:
                await run_worker(
                    victim_store,
                    job=JOB,
                    instance="victim",
                    planner=planner_of(2 * held),
                    handler=handler,
                    config=config,
                )

        async def until_victim_holds(count: int) -> None:
            with trio.fail_after(60):
                while len(handlers) != count:
                    await changed.wait()

        if victim_leads:
            await nursery.start(victim)
            await until_victim_holds(2 * held)  # alone, it leads and holds everything
            survivor = await _join(nursery, survivor_store, config, 2 * held)
        else:
            survivor = await _join(nursery, survivor_store, config, 2 * held)
            await survivor.until(lambda: survivor.c.is_leader, 60, "lead")
            await nursery.start(victim)

        # Settled: every split held by one of the two. The leader balances within a band
        # (32 splits on two workers may settle 17 and 15), so wait for the fleet to stop
        # moving splits rather than for an exact half.
        def settled() -> bool:
            return bool(survivor.owned) and len(survivor.owned) + len(handlers) == 2 * held

        await survivor.until(settled, 60, "balance")
        await trio.sleep(config.drain_deadline)
        await survivor.until(settled, 60, "balance")
        value = b"x" * 160  # about a progress record
        rtt = median(await raw_cas_latencies(survivor_store, "raw.rtt", value, 100))
        everything = {split_id(n) for n in range(2 * held)}
        began = trio.current_time()
        victim_scope.cancel()
        await survivor.until(lambda: survivor.owned == everything, 30, "take over")
        took = trio.current_time() - began
        nursery.cancel_scope.cancel()
    return took, rtt


# -- driver ----------------------------------------------------------------------------------


def _failover_row(store: str, case: Case, times: list[float], how: str) -> Row:
    ratios = [t / LEASE for t in times]
    return Row(
        bench=f"3 failover, {case.label}",
        store=store,
        measured=(
            f"{fmt_seconds(median(times))} ({fmt_seconds(min(times))}-{fmt_seconds(max(times))})"
        ),
        baseline=f"lease {LEASE:g} s",
        ratio=median(ratios),
        note=f"{how}; {len(times)} kills across the renewal cycle; median (min-max)",
    )


def run(options: Options) -> list[Row]:
    """Failover on every store (and silent expiry on memory)."""
    rows: list[Row] = []
    reps = 2 if options.quick else 5
    if options.wants("memory"):
        for case in (
            Case(victim_leads=False),
            Case(victim_leads=True),
            Case(victim_leads=False, silent=True),
            Case(victim_leads=False, silent=True, reconcile=LEASE),
        ):
            times = [memory_failover(case, offset) for offset in _offsets(reps)]
            rows.append(_failover_row("memory", case, times, "virtual time (MockClock)"))
            print(rows[-1].line(), flush=True)
    real = [name for name in ("etcd", "nats") if options.wants(name)]
    if real:
        rows += trio.run(_run_real, real, options)
    return rows


def run_handover(options: Options) -> list[Row]:
    """Graceful hand-over: memory (virtual time, injected round trip), etcd and NATS."""
    rows: list[Row] = []
    if options.wants("memory"):
        for leads, held in HANDOVER_CASES:
            clock = trio.testing.MockClock(autojump_threshold=0)
            took, rtt = trio.run(_memory_handover, leads, held, clock=clock)
            rows.append(
                _handover_row(
                    "memory",
                    leads,
                    held,
                    [(took, rtt)],
                    f"{MEMORY_RTT * 1000:g} ms per call injected, virtual time",
                )
            )
            print(rows[-1].line(), flush=True)
    real = [name for name in ("etcd", "nats") if options.wants(name)]
    if real:
        rows += trio.run(_run_real_handover, real, options)
    return rows


HANDOVER_CASES = ((False, 4), (True, 4), (False, 16), (True, 16))
"""(the leaving worker leads, splits it holds) of each hand-over measured."""
HANDOVER_TARGET = 10.0
"""A hand-over waits for at most this many round trips, whatever the splits held."""
MEMORY_RTT = 0.001
"""The round trip injected on every memory-store call of the hand-over benchmark."""


async def _memory_handover(
    victim_leads: bool, held: int, latency: float | None = MEMORY_RTT
) -> tuple[float, float]:
    """One hand-over on a memory store with ``latency`` injected on every call (None: none)."""
    server = MemoryServer()

    @asynccontextmanager
    async def open_store(ns: str, ttl: float) -> AsyncIterator[Store]:
        async with MemoryStore(server=server, namespace=ns, ephemeral_ttl=ttl) as inner:
            if latency is None:
                yield inner
            else:
                yield FaultyStore(inner, rates=FaultRates(latency=latency))

    return await handover(Backend("memory", open=open_store), victim_leads=victim_leads, held=held)


async def _cpu_of_handover(victim_leads: bool, held: int, reps: int) -> float:
    """The median time of a hand-over whose store answers at once (memory, real clock).

    With no round trip to wait for, what is left is the CPU both coordinators spend on
    it (they share this process, as they do in the real-store rows): a floor under every
    store's figure that no round trip saved can lower.
    """
    return median(
        [(await _memory_handover(victim_leads, held, latency=None))[0] for _ in range(reps)]
    )


def _handover_row(
    store: str, leads: bool, held: int, results: list[tuple[float, float]], how: str
) -> Row:
    took = median(t for t, _ in results)
    rtt = median(r for _, r in results)
    role = "leader leaves" if leads else "follower leaves"
    return Row(
        bench=f"4 graceful hand-over, {role}, {held} splits",
        store=store,
        measured=fmt_seconds(took),
        baseline=f"{fmt_seconds(rtt)} (one CAS round trip)",
        ratio=took / rtt if rtt > 0 else math.nan,
        target=f"≤ {HANDOVER_TARGET:g}x",
        met=rtt > 0 and took / rtt <= HANDOVER_TARGET,
        note=(
            f"run_worker cancelled → survivor owns all {2 * held}; {how}; median of {len(results)}"
        ),
    )


async def _run_real(names: list[str], options: Options) -> list[Row]:
    rows: list[Row] = []
    quick = options.quick
    async with backends(names) as found:
        for name in names:
            backend = found[name]
            for leads, reps in ((False, 2 if quick else 4), (True, 1 if quick else 2)):
                case = Case(victim_leads=leads)
                times = [await _real_failover(backend, case, o) for o in _offsets(reps)]
                rows.append(_failover_row(name, case, times, "worker process SIGKILLed"))
                print(rows[-1].line(), flush=True)
    return rows


async def _run_real_handover(names: list[str], options: Options) -> list[Row]:
    rows: list[Row] = []
    reps = 1 if options.quick else 3
    cpu = {
        (leads, held): await _cpu_of_handover(leads, held, 2 * reps + 1)
        for leads, held in HANDOVER_CASES
    }
    async with backends(names) as found:
        for name in names:
            backend = found[name]
            for leads, held in HANDOVER_CASES:
                results = [
                    await handover(backend, victim_leads=leads, held=held) for _ in range(reps)
                ]
                rtt = median(r for _, r in results)
                floor = cpu[(leads, held)]
                how = (
                    f"real time; its CPU alone (the same hand-over on a memory store that "
                    f"answers at once) is {fmt_seconds(floor)} = {floor / rtt:.0f}x this "
                    "round trip"
                )
                rows.append(_handover_row(name, leads, held, results, how))
                print(rows[-1].line(), flush=True)
    return rows
