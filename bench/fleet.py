"""Fleet scale: what one commit, one join, one ownership change and one takeover cost a fleet.

Every worker is a :func:`spate.run_worker` in this one process, on one shared memory store,
under Trio's ``MockClock``: virtual time drives leases and timers, and the CPU is real
(``time.process_time`` of the process, which is the whole fleet's CPU, since the fleet is this
one process). Each worker reaches the store through its own :class:`Tally`, a wrapper that
counts, for that worker alone, the entries its watches deliver (snapshot entries apart from
live Put/Delete events), the records ``list`` and ``get`` return, and its calls and writes;
its metrics hooks count its reconciles. The counts are exact and per worker; only the CPU
figures are noisy, and they are the fleet's.

* **Fleets of 8, 64, 256 and 1,024 workers** (``--quick``: 8 and 64; ``BENCH_FLEET_SIZES``
  picks others), 4 lanes each, a job of 4 splits per worker plus a few waiting ones. Once
  every lane is full and the fleet has settled, every held split commits (20 times at 8
  workers, 4 at 64, 2 at 256, once at 1,024), the commits spread evenly over virtual time so
  each is seen on its own. Reported: live watch events delivered to all workers per commit,
  and fleet CPU per commit (the commit phase's CPU minus the mean of an equally long idle
  phase before and after it, over the commits), with its ratio to 8 workers; and how long
  the fleet's start took. Then a split held by a follower completes, one at a time, and its
  lane takes a waiting split: per such ownership change, the calls and records of the
  *leader's* own wrapper, those of all the followers' wrappers together, and the fleet's CPU
  (less what the idle fleet spends in the same virtual time).
* **A large job** (100,000 splits; ``--quick``: 10,000), 8 lanes per worker: a fleet of 4
  workers holds its lanes, then a fifth, not leading, joins: the records its watches'
  snapshots, listings and reads returned until its first split was handed to its handler.
  Then the fleet runs three and a half reconcile intervals: every record the late joiner
  read meanwhile (point reads and listings), per reconcile it ran, against its own keys.
  Then the leader is killed (no hand-back): the records its successor reads to take over the
  job, and the process CPU from its listing of the job until the fleet is quiet again with
  the job placed.
* **A steady fleet's writes**: 4 workers, each with a store client of its own, holding 8
  splits each, for 10 leases once settled: every store write of the fleet per third of a
  lease, by kind. On the memory store in virtual time (lease 9 s); with ``--stores`` naming
  etcd or NATS, also on a real server of each in real time (lease 3 s). This is the one part
  of the suite that runs on etcd and NATS.

Nothing is asserted; the figures are reported beside their targets. Run alone with
``python -m bench --only fleet --stores memory`` (the steady fleet alone on NATS:
``--only fleet --stores nats``; the large job alone: :func:`takeover_alone`).
"""

from __future__ import annotations

import builtins
import collections
import gc
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs
import trio
import trio.testing

from bench._fleet import JOB, RecordingStore, planner_of
from bench._harness import Backend, Options, Row, backends, fmt_seconds, memory_backend, namespace
from spate import Config, MetricsHooks, SplitHandle, run_worker
from spate._core.records import AssignmentRecord, Keys, LeaderRecord, decode
from spate.store import Entry, EphemeralSemantics, Keyspace, SnapshotDone, Store, WatchEvent
from spate_stores.memory import MemoryStore

SIZES = (8, 64, 256, 1_024)
QUICK_SIZES = (8, 64)
LANES = 4
"""Splits per worker (its ``max_in_flight``), the same at every fleet size."""
ROUNDS = {8: 20, 64: 4, 256: 2, 1_024: 1}
"""Commits per split at each fleet size (20 at 8 workers; fewer above, where
there are more splits: at least 640 commits at every size, every held split committing)."""
QUICK_ROUNDS = 5
CHANGES = 16
"""Ownership changes measured per fleet (splits that complete, a waiting one taking the lane)."""
TTL = 600.0
"""A long lease: renewals are few during the measured phases (they are counted all the same)."""
PERIOD = 2.0
"""Virtual seconds between two commits of one split; the fleet's commits are spread over it."""
LARGE_JOB = 100_000
QUICK_LARGE_JOB = 10_000
LARGE_FLEET = 4
"""Workers already running the large job when the late joiner comes."""
LARGE_LANES = 8
RECONCILES = 3
SETTLE = 10.0
"""Virtual seconds a takeover is given after its listing (debounce and rebalance included)."""
STEADY_WORKERS = 4
STEADY_LANES = 8
STEADY_TTL = 9.0
STEADY_LEASES = 10
STEADY_REAL_TTL = 3.0
"""The lease on a real server (etcd, NATS), in real time: a short one keeps the run short."""
STEADY_REAL_LEASES = 10
QUICK_STEADY_LEASES = 3
KEYSPACES = (Keyspace.DURABLE, Keyspace.EPHEMERAL)

Order = Callable[[SplitHandle], Awaitable[None]]
"""Something a split's handler is told to do (commit, wait, complete)."""


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


class _Counted:
    """A watch's events, passed through, each counted on its tally as snapshot or live."""

    def __init__(self, events: AsyncIterator[WatchEvent], tally: Tally, keyspace: Keyspace):
        self._events = events
        self._tally = tally
        self._index = KEYSPACES.index(keyspace)
        self._live = False

    def __aiter__(self) -> _Counted:
        return self

    async def __anext__(self) -> WatchEvent:
        event = await self._events.__anext__()
        if self._live:
            self._tally.live[self._index] += 1
        elif isinstance(event, SnapshotDone):
            self._live = True
        else:
            self._tally.snapshot[self._index] += 1
        return event


class Tally(RecordingStore):
    """One worker's view of the store, counted: watch deliveries, records read, writes.

    Counts per keyspace (durable, ephemeral) with a list index and an add, so what it adds to
    the fleet's CPU per delivered event is small beside the coordinator's own work.
    """

    def __init__(self, inner: Store, job: str = JOB) -> None:
        super().__init__(inner, job)
        self.snapshot = [0, 0]
        """Entries delivered by watch snapshots (durable, ephemeral)."""
        self.live = [0, 0]
        """Put/Delete events delivered after the snapshots (durable, ephemeral)."""
        self.listed = [0, 0]
        """Records returned by ``list`` (durable, ephemeral)."""
        self.lists = [0, 0]
        """``list`` calls (durable, ephemeral)."""
        self.got = 0
        """Records returned by ``get`` (a miss returns none)."""
        self.listing_began: float | None = None
        """Process CPU time when its first durable listing since the reset began."""
        self.listing_returned: float | None = None
        """Process CPU time when that listing returned."""
        self.listed_by: collections.Counter[str] = collections.Counter()
        """Records listed, by keyspace and prefix (``durable bench.split.``)."""
        self.pages = 0
        """Pages of paged listings (the leader's backstop)."""
        self.largest_page = 0
        """The most records one page held."""
        self.paged_began: float | None = None
        """Process CPU time when its first paged listing since the reset began."""

    def reset(self) -> None:
        """Zero every counter (the recorder's calls too)."""
        self.calls.clear()
        self.snapshot = [0, 0]
        self.live = [0, 0]
        self.listed = [0, 0]
        self.lists = [0, 0]
        self.got = 0
        self.listing_began = self.listing_returned = None
        self.listed_by.clear()
        self.pages = self.largest_page = 0
        self.paged_began = None

    @property
    def records_read(self) -> int:
        """Every record this worker was handed: snapshot entries, live events, lists, gets."""
        return sum(self.snapshot) + sum(self.live) + sum(self.listed) + self.got

    @property
    def write_count(self) -> int:
        """Writes (create, update, delete; each write of a group counts once)."""
        return sum(self.writes().values())

    @property
    def reads(self) -> int:
        """``get`` and ``list`` calls."""
        return sum(n for (op, _), n in self.calls.items() if op in ("get", "list"))

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        entry = await super().get(keyspace, key)
        if entry is not None:
            self.got += 1
        return entry

    @property
    def gets(self) -> int:
        """``get`` calls (hits and misses)."""
        return sum(n for (op, _), n in self.calls.items() if op == "get")

    def ops(self) -> dict[str, int]:
        """Calls by operation (each write of a group counts as the write it is)."""
        found: collections.Counter[str] = collections.Counter()
        for (op, _), count in self.calls.items():
            found[op] += count
        return dict(found)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        first = keyspace is Keyspace.DURABLE and self.listing_began is None
        if first:
            self.listing_began = time.process_time()
        entries = await super().list(keyspace, prefix)
        if first:
            self.listing_returned = time.process_time()
        index = KEYSPACES.index(keyspace)
        self.lists[index] += 1
        self.listed[index] += len(entries)
        self.listed_by[f"{keyspace.value} {prefix}"] += len(entries)
        return entries

    def listing_started(self, keyspace: Keyspace, prefix: str) -> None:
        self.lists[KEYSPACES.index(keyspace)] += 1
        if self.paged_began is None:
            self.paged_began = time.process_time()

    def listed_page(self, keyspace: Keyspace, prefix: str, page: builtins.list[Entry]) -> None:
        self.pages += 1
        self.largest_page = max(self.largest_page, len(page))
        self.listed[KEYSPACES.index(keyspace)] += len(page)
        self.listed_by[f"{keyspace.value} {prefix}"] += len(page)

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        return self._counted_watch(keyspace, prefix, exact)

    @asynccontextmanager
    async def _counted_watch(
        self, keyspace: Keyspace, prefix: str, exact: bool
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        async with super().watch(keyspace, prefix, exact=exact) as events:
            yield _Counted(events, self, keyspace)


class _Counts(MetricsHooks):
    """One worker's metrics hooks, counting its reconciles."""

    def __init__(self) -> None:
        self.reconciles = 0
        self.reconciled_cpu = 0.0
        """Process CPU time when its last reconcile ended."""
        self.reconciled = trio.Event()
        """Set when a reconcile ends (a new one is made for the next)."""
        self.placements = 0
        """Placements published while leading."""

    def reconcile_duration(self, seconds: float) -> None:
        self.reconciles += 1
        self.reconciled_cpu = time.process_time()
        self.reconciled.set()
        self.reconciled = trio.Event()

    def placement(self, report: object) -> None:
        if report is not None:
            self.placements += 1


@attrs.define(eq=False)
class _Fleet:
    """Workers of one job sharing a store, each through its own tally, and what they hold."""

    store: Store
    config: Config
    planner: Callable[..., Any]
    nursery: trio.Nursery
    tallies: dict[str, Tally] = attrs.field(factory=dict)
    counts: dict[str, _Counts] = attrs.field(factory=dict)
    scopes: dict[str, trio.CancelScope] = attrs.field(factory=dict)
    held: dict[str, dict[str, SplitHandle]] = attrs.field(factory=dict)
    """Instance -> its handlers' splits."""
    orders: dict[str, trio.MemorySendChannel[Order]] = attrs.field(factory=dict)
    """Split -> where to send its handler the next thing to do."""
    changed: trio.Event = attrs.field(factory=trio.Event)
    gains: int = 0
    """Handlers started (splits gained) so far."""
    done: int = 0
    """Orders carried out so far."""

    def start(self, instance: str, store: Store | None = None) -> Tally:
        """Start one worker (in the background) on ``store`` (the fleet's own unless given: a
        client of its own, as a process would have); returns its tally."""
        tally = Tally(self.store if store is None else store)
        self.tallies[instance] = tally
        self.counts[instance] = _Counts()
        self.scopes[instance] = trio.CancelScope()
        self.held[instance] = {}
        self.nursery.start_soon(self._run, instance, tally)
        return tally

    async def _run(self, instance: str, tally: Tally) -> None:
        async def handler(split: SplitHandle) -> None:
            send, receive = trio.open_memory_channel[Order](math.inf)
            self.orders[split.id] = send
            self.held[instance][split.id] = split
            self.gains += 1
            self._poke()
            try:
                async with trio.open_nursery() as nursery, receive:
                    nursery.start_soon(_cancel_on, split.revoke_requested, nursery.cancel_scope)
                    async for order in receive:
                        await order(split)
                        self.done += 1
                        self._poke()
                        if split.completed:
                            break
                    nursery.cancel_scope.cancel()
            finally:
                self.held[instance].pop(split.id, None)
                if self.orders.get(split.id) is send:
                    del self.orders[split.id]
                self._poke()

        with self.scopes[instance]:
            await run_worker(
                tally,
                job=JOB,
                instance=instance,
                planner=self.planner,
                handler=handler,
                config=self.config,
                metrics=self.counts[instance],
                # The fleet is torn down by cancellation: no graceful leave (at 1,024 workers
                # the hand-backs alone would cost more than the measurement).
                leave_deadline=0.0,
            )

    def kill(self, instance: str) -> None:
        """Stop one worker at once: no hand-back; its ephemeral keys lapse after the TTL."""
        self.scopes[instance].cancel()

    def _poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait (in virtual time) until ``condition()`` holds and the fleet is quiet."""
        while True:
            while not condition():
                await self.changed.wait()
            await trio.testing.wait_all_tasks_blocked()
            if condition():
                return

    def holding(self) -> int:
        """Splits held by handlers now."""
        return sum(len(h) for h in self.held.values())

    async def leader(self) -> str:
        """The instance the leader key names (read past the tallies: it is not counted)."""
        found = await self.leader_now()
        assert found is not None, "the fleet has no leader"
        return found

    async def leader_now(self) -> str | None:
        """The instance the leader key names, if any (not counted)."""
        entry = await self.store.get(Keyspace.EPHEMERAL, Keys(JOB).leader)
        return None if entry is None else decode(LeaderRecord, entry.key, entry.value).owner

    async def assigned(self, instance: str) -> tuple[str, ...]:
        """The splits ``instance``'s assignment record names (not counted)."""
        entry = await self.store.get(Keyspace.DURABLE, Keys(JOB).assign(instance))
        if entry is None:
            return ()
        return decode(AssignmentRecord, entry.key, entry.value).splits

    def reset(self) -> None:
        """Zero every worker's counters."""
        for tally in self.tallies.values():
            tally.reset()

    def live_events(self) -> tuple[int, int]:
        """Live watch events delivered to all workers since the reset (durable, ephemeral)."""
        return (
            sum(t.live[0] for t in self.tallies.values()),
            sum(t.live[1] for t in self.tallies.values()),
        )


def _config(lanes: int) -> Config:
    # No backstop listing or replan inside the measured phases: the backstop is measured on
    # its own (the large job), and the plan is final.
    return Config(
        max_in_flight=lanes,
        reconcile_interval=100_000.0,
        replan_interval=100_000.0,
        rebalance_delay=0.0,
        # Workers that join together cause one rebalance, not one each (at 1,024 workers
        # a rebalance per join would cost more than the whole measurement).
        membership_debounce=2.0,
    )


def _commits(count: int, offset: float) -> Order:
    """Commit ``count`` times, ``PERIOD`` apart, the first ``offset`` seconds from now."""

    async def order(split: SplitHandle) -> None:
        await trio.sleep(offset)
        for n in range(count):
            if n:
                await trio.sleep(PERIOD)
            mark = split.progress.watermark
            await split.commit(0 if mark is None else mark + 1)

    return order


def _waits(count: int, offset: float) -> Order:
    """What :func:`_commits` does without committing: the idle baseline of a commit phase."""

    async def order(split: SplitHandle) -> None:
        # The same sleeps as the commits, so the baseline takes away their timers' cost too.
        await trio.sleep(offset)
        for _ in range(count - 1):
            await trio.sleep(PERIOD)

    return order


async def _complete(split: SplitHandle) -> None:
    mark = split.progress.watermark
    await split.commit(0 if mark is None else mark + 1, completed=True)


async def _phase(fleet: _Fleet, orders: dict[str, Order]) -> float:
    """Send ``orders`` to their splits; the process CPU until all are carried out, quiet."""
    target = fleet.done + len(orders)
    gc.collect()  # a collection owed by the last phase is not this one's
    started = time.process_time()
    for split, order in orders.items():
        fleet.orders[split].send_nowait(order)
    await fleet.until(lambda: fleet.done >= target)
    return time.process_time() - started


@attrs.frozen
class _Traffic:
    """Store calls and records read by some workers over some ownership changes."""

    calls: dict[str, int]
    records: int
    live: int
    writes: int

    @classmethod
    def of(cls, tallies: list[Tally]) -> _Traffic:
        calls: collections.Counter[str] = collections.Counter()
        for tally in tallies:
            calls.update(tally.ops())
        return cls(
            calls=dict(calls),
            records=sum(t.records_read for t in tallies),
            live=sum(sum(t.live) for t in tallies),
            writes=sum(t.write_count for t in tallies),
        )

    def per(self, changes: int) -> str:
        """Its calls per change by operation, then its records."""
        calls = ", ".join(f"{op} {n / changes:.1f}" for op, n in sorted(self.calls.items()))
        return (
            f"{sum(self.calls.values()) / changes:.1f} calls ({calls or 'none'}), "
            f"{self.records / changes:.1f} records read ({self.live / changes:.1f} of them live "
            f"watch events), {self.writes / changes:.1f} writes"
        )


@attrs.frozen
class _Point:
    workers: int
    rounds: int
    committing: int
    commits: int
    live: tuple[int, int]
    cpu_commits: float
    cpu_idle: tuple[float, float]
    """The idle phases' CPU (before and after the commit phase)."""
    idle_virtual: float
    """Virtual seconds of one idle phase."""
    changes: int
    leader: _Traffic
    followers: _Traffic
    cpu_changes: float
    changes_virtual: float
    """Virtual seconds the changes took, in all."""
    cpu_plain: float
    start_records: int
    start_wall: float
    start_cpu: float
    wall: float

    @property
    def deliveries(self) -> float:
        return sum(self.live) / self.commits

    @property
    def cpu_per_commit(self) -> float:
        return max(0.0, self.cpu_commits - sum(self.cpu_idle) / 2) / self.commits

    @property
    def idle_rate(self) -> float:
        """The idle fleet's CPU per virtual second."""
        return sum(self.cpu_idle) / 2 / self.idle_virtual if self.idle_virtual else 0.0

    @property
    def cpu_per_change(self) -> float:
        """The fleet's CPU per change, less the idle fleet's over the same virtual time."""
        net = self.cpu_changes - self.idle_rate * self.changes_virtual
        return max(0.0, net) / self.changes


async def _fleet_point(workers: int, rounds: int) -> _Point:
    began = time.monotonic()
    began_cpu = time.process_time()
    total = workers * LANES
    async with (
        MemoryStore(namespace=namespace("fleet"), ephemeral_ttl=TTL) as store,
        trio.open_nursery() as nursery,
    ):
        fleet = _Fleet(store, _config(LANES), planner_of(total + CHANGES), nursery)
        for number in range(workers):
            fleet.start(f"w{number:04d}")
        await fleet.until(lambda: fleet.holding() == total)
        start_records = sum(t.records_read for t in fleet.tallies.values())
        start_wall = time.monotonic() - began
        start_cpu = time.process_time() - began_cpu
        await trio.sleep(PERIOD)  # settle: any rebalancing done
        await fleet.until(lambda: fleet.holding() == total)
        chosen = sorted(split for h in fleet.held.values() for split in h)
        spread = PERIOD / len(chosen)
        idle = {s: _waits(rounds, i * spread) for i, s in enumerate(chosen)}
        at = trio.current_time()
        cpu_before = await _phase(fleet, idle)
        idle_virtual = trio.current_time() - at
        fleet.reset()
        work = {s: _commits(rounds, i * spread) for i, s in enumerate(chosen)}
        cpu_commits = await _phase(fleet, work)
        live = fleet.live_events()
        commits = rounds * len(chosen)
        cpu_after = await _phase(fleet, idle)

        # Ownership changes: a follower's split completes, a waiting split takes its lane.
        leader = await fleet.leader()
        followers = [i for i in sorted(fleet.held) if i != leader]
        plain = 0.0
        for n in range(CHANGES):
            split = sorted(fleet.held[followers[n % len(followers)]])[0]
            plain += await _phase(fleet, {split: _commits(1, 0.0)})
        fleet.reset()
        cpu_changes = 0.0
        at = trio.current_time()
        for n in range(CHANGES):
            split = sorted(fleet.held[followers[n % len(followers)]])[0]
            gains = fleet.gains

            def replaced(before: int = gains) -> bool:
                return fleet.gains > before and fleet.holding() == total

            gc.collect()
            started = time.process_time()
            fleet.orders[split].send_nowait(_complete)
            await fleet.until(replaced)
            cpu_changes += time.process_time() - started
        changes_virtual = trio.current_time() - at
        point = _Point(
            workers=workers,
            rounds=rounds,
            committing=len(chosen),
            commits=commits,
            live=live,
            cpu_commits=cpu_commits,
            cpu_idle=(cpu_before, cpu_after),
            idle_virtual=idle_virtual,
            changes=CHANGES,
            leader=_Traffic.of([fleet.tallies[leader]]),
            followers=_Traffic.of([fleet.tallies[i] for i in followers]),
            cpu_changes=cpu_changes,
            changes_virtual=changes_virtual,
            cpu_plain=plain,
            start_records=start_records,
            start_wall=start_wall,
            start_cpu=start_cpu,
            wall=0.0,
        )
        nursery.cancel_scope.cancel()
    return attrs.evolve(point, wall=time.monotonic() - began)


def _run_point(workers: int, rounds: int) -> _Point:
    clock = trio.testing.MockClock(autojump_threshold=0)
    return trio.run(_fleet_point, workers, rounds, clock=clock)


@attrs.frozen
class _Large:
    splits: int
    joined: dict[str, int]
    """Records the late joiner read before its first split, by where they came from."""
    join_cpu: float
    backstop: dict[str, int]
    """What the late joiner read over the backstop's window: gets, records got, listed."""
    reconciles: int
    assigned: int
    unheld: int
    """Splits its assignment names that it does not hold (each a progress record and lease)."""
    successor: str
    takeover: dict[str, int]
    """Records the new leader read from the kill until the job was placed again, by source."""
    takeover_calls: dict[str, int]
    takeover_cpu: float
    listing_cpu: float
    """Of which the store's listing call (the memory store building 200,000 entries)."""
    placements: int
    leader_backstop: dict[str, int]
    """The new leader's next backstop: listings, pages, records listed, the largest page."""
    leader_backstop_cpu: float
    wall: float


async def _large_job(splits: int) -> _Large:
    began = time.monotonic()
    config = Config(max_in_flight=LARGE_LANES, rebalance_delay=0.0)
    async with (
        MemoryStore(namespace=namespace("fleetjoin")) as store,
        trio.open_nursery() as nursery,
    ):
        fleet = _Fleet(store, config, planner_of(splits), nursery)
        # The leader plans alone first, so the job exists before the others join.
        fleet.start("w0")
        await fleet.until(lambda: fleet.holding() == LARGE_LANES)
        for number in range(1, LARGE_FLEET):
            fleet.start(f"w{number}")
        await fleet.until(lambda: fleet.holding() == LARGE_FLEET * LARGE_LANES)
        joiner = "late"
        started = time.process_time()
        tally = fleet.start(joiner)
        await fleet.until(lambda: bool(fleet.held[joiner]))
        join_cpu = time.process_time() - started
        joined = {
            "snapshot durable": tally.snapshot[0],
            "snapshot ephemeral": tally.snapshot[1],
            "live events": sum(tally.live),
            "list": sum(tally.listed),
            "get": tally.got,
        }
        await fleet.until(lambda: len(fleet.held[joiner]) == LARGE_LANES)

        # The follower's backstop: everything it reads over a little more than RECONCILES
        # reconcile intervals (they are jittered), per reconcile it ran.
        tally.reset()
        counted = fleet.counts[joiner].reconciles
        await trio.sleep((RECONCILES + 0.5) * config.reconcile_interval)
        reconciles = fleet.counts[joiner].reconciles - counted
        backstop = {
            "get calls": tally.gets,
            "records got": tally.got,
            "records listed": sum(tally.listed),
            "live events": sum(tally.live),
        }
        assigned = await fleet.assigned(joiner)
        unheld = sum(1 for s in assigned if s not in fleet.held[joiner])

        # The leader dies; a follower takes the job over: lists it once and places it again.
        leader = await fleet.leader()
        fleet.reset()
        placed = {i: c.placements for i, c in fleet.counts.items()}
        fleet.kill(leader)
        # The dead leader's heap (its view of the whole job, 400,000 objects held in cycles)
        # is this one process's garbage, not the successor's work: a leader that dies is
        # another process. Collected here, once its tasks have unwound and before the
        # successor lists (its leader key expires in virtual time, which waits for this), so
        # the takeover's CPU does not pay that full collection (as the ownership changes
        # above collect before each measured change).
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        successor = None
        while True:
            await trio.sleep(0.1)
            now = await fleet.leader_now()
            if now is not None and now != leader and fleet.tallies[now].lists[0]:
                successor = now
                break
        await trio.sleep(SETTLE)
        await trio.testing.wait_all_tasks_blocked()
        ended = time.process_time()
        new = fleet.tallies[successor]
        assert new.listing_began is not None
        takeover = {
            "snapshot ephemeral": new.snapshot[1],
            "snapshot durable": new.snapshot[0],
            **{f"list {where}": n for where, n in sorted(new.listed_by.items())},
            "got": new.got,
            "live events": sum(new.live),
        }
        placements = fleet.counts[successor].placements - placed[successor]
        takeover_calls = new.ops()
        takeover_cpu = ended - new.listing_began
        listing_cpu = (new.listing_returned or new.listing_began) - new.listing_began

        # The new leader's next backstop: both keyspaces listed in pages, each folded as it
        # comes (its CPU: from its first page request until the reconcile ended).
        new.reset()
        counts = fleet.counts[successor]
        await counts.reconciled.wait()
        leader_backstop = {
            "listings": sum(new.lists),
            "pages": new.pages,
            "records listed": sum(new.listed),
            "largest page": new.largest_page,
        }
        paged_from = new.paged_began if new.paged_began is not None else counts.reconciled_cpu
        leader_backstop_cpu = counts.reconciled_cpu - paged_from
        nursery.cancel_scope.cancel()
    return _Large(
        splits=splits,
        joined=joined,
        join_cpu=join_cpu,
        backstop=backstop,
        reconciles=reconciles,
        assigned=len(assigned),
        unheld=unheld,
        successor=successor,
        takeover=takeover,
        takeover_calls=takeover_calls,
        takeover_cpu=takeover_cpu,
        listing_cpu=listing_cpu,
        placements=placements,
        leader_backstop=leader_backstop,
        leader_backstop_cpu=leader_backstop_cpu,
        wall=time.monotonic() - began,
    )


def _run_large(splits: int) -> _Large:
    clock = trio.testing.MockClock(autojump_threshold=0)
    return trio.run(_large_job, splits, clock=clock)


@attrs.frozen
class _Steady:
    store: str
    clock: str
    """"virtual" (memory, under the mock clock) or "real" (a real server)."""
    ttl: float
    writes: dict[str, int]
    thirds: float
    """Thirds of a lease the measurement lasted."""
    reads: dict[str, int]
    lost: int
    """Splits lost (their handlers ended) during the measurement."""
    session_store: bool


async def _steady_fleet(backend: Backend, ttl: float, leases: int) -> _Steady:
    """4 workers, each with a store client of its own, holding 8 splits each: every write of
    the fleet over ``leases`` leases once settled."""
    splits = STEADY_WORKERS * STEADY_LANES
    config = Config(
        max_in_flight=STEADY_LANES,
        rebalance_delay=0.0,
        planner_thread=backend.name != "memory",
    )
    ns = namespace("fleetsteady")
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(backend.open(ns, ttl)) for _ in range(STEADY_WORKERS)
        ]
        nursery = await stack.enter_async_context(trio.open_nursery())
        fleet = _Fleet(clients[0], config, planner_of(splits), nursery)
        for number, client in enumerate(clients):
            fleet.start(f"w{number}", client)
        with trio.fail_after(100 * ttl):
            await fleet.until(lambda: fleet.holding() == splits)
        await trio.sleep(3 * ttl)  # settle: rebalancing done, every session renewed since
        fleet.reset()
        gains = fleet.gains
        started = trio.current_time()
        await trio.sleep(leases * ttl)
        elapsed = trio.current_time() - started
        # A split lost and claimed again shows as a gain; one lost for good as a hole.
        lost = (fleet.gains - gains) + (splits - fleet.holding())
        writes: collections.Counter[str] = collections.Counter()
        reads: collections.Counter[str] = collections.Counter()
        for tally in fleet.tallies.values():
            writes.update(tally.writes())
            for (op, what), count in tally.calls.items():
                if op in ("get", "list"):
                    reads[f"{op} {what}"] += count
        session_store = clients[0].capabilities.ephemeral is EphemeralSemantics.SESSION
        nursery.cancel_scope.cancel()
    return _Steady(
        store=backend.name,
        clock="virtual" if backend.name == "memory" else "real",
        ttl=ttl,
        writes=dict(writes),
        thirds=elapsed / (ttl / 3),
        reads=dict(reads),
        lost=lost,
        session_store=session_store,
    )


def _run_steady(options: Options) -> list[_Steady]:
    """The steady fleet on each store asked for: memory in virtual time, etcd and NATS real."""
    found: list[_Steady] = []
    if options.wants("memory"):
        clock = trio.testing.MockClock(autojump_threshold=0)
        leases = QUICK_STEADY_LEASES if options.quick else STEADY_LEASES
        found.append(trio.run(_steady_fleet, memory_backend(), STEADY_TTL, leases, clock=clock))
    real = [name for name in ("etcd", "nats") if options.wants(name)]
    if real:
        found += trio.run(_steady_on_servers, real, options.quick)
    return found


async def _steady_on_servers(names: list[str], quick: bool) -> list[_Steady]:
    leases = QUICK_STEADY_LEASES if quick else STEADY_REAL_LEASES
    async with backends(names) as started:
        return [await _steady_fleet(started[n], STEADY_REAL_TTL, leases) for n in names]


def _sizes(options: Options) -> tuple[int, ...]:
    """The fleet sizes measured in this run."""
    if options.quick:
        return QUICK_SIZES
    wanted = os.environ.get("BENCH_FLEET_SIZES", "")
    if wanted:
        return tuple(int(w) for w in wanted.split(",") if w.strip())
    return SIZES


def _rounds(workers: int, quick: bool) -> int:
    """Commits per split at ``workers``."""
    if quick:
        return QUICK_ROUNDS if workers <= 8 else 1
    return ROUNDS.get(workers, 1)


def run(options: Options) -> list[Row]:
    """The fleet sizes and the large job (memory store only), then the steady fleet (on
    memory in virtual time, and on etcd and NATS in real time when they are asked for)."""
    rows: list[Row] = []
    if options.wants("memory"):
        points: list[_Point] = []
        for workers in _sizes(options):
            point = _run_point(workers, _rounds(workers, options.quick))
            points.append(point)
            for row in _fleet_rows(point, points[0]):
                print(row.line(), flush=True)
                rows.append(row)
        large = _run_large(QUICK_LARGE_JOB if options.quick else LARGE_JOB)
        for row in _large_rows(large):
            print(row.line(), flush=True)
            rows.append(row)
    for steady in _run_steady(options):
        row = _steady_row(steady)
        print(row.line(), flush=True)
        rows.append(row)
    return rows


def _fleet_rows(point: _Point, base: _Point) -> list[Row]:
    w = point.workers
    durable, ephemeral = (n / point.commits for n in point.live)
    how = (
        f"{point.commits:,} commits ({point.committing:,} splits x {point.rounds}, spread over "
        f"virtual time); {LANES} splits per worker"
    )
    deliveries = Row(
        bench=f"fleet, watch deliveries per fleet commit, {w:,} workers",
        store="memory",
        measured=f"{point.deliveries:.2f} events",
        baseline="1 event",
        ratio=point.deliveries,
        target="≤ 1 (0 for a plain commit)",
        met=point.deliveries <= 1,
        note=(
            f"live Put/Delete events delivered to all workers' watches / commits (all plain): "
            f"{durable:.2f} durable (progress records, leases on a per-key store, assignments, the "
            f"plan), {ephemeral:.2f} ephemeral (presence and leader renewals, lease "
            f"{TTL:g} s); {how}"
        ),
    )
    cpu_ratio = point.cpu_per_commit / base.cpu_per_commit if base.cpu_per_commit else math.nan
    target, met = "—", None
    if w == 64:
        target, met = "≤ 1.5x of 8 workers", cpu_ratio <= 1.5
    elif w == 1_024:
        target, met = "≤ 2x of 8 workers", cpu_ratio <= 2.0
    idle = " and ".join(fmt_seconds(c) for c in point.cpu_idle)
    cpu = Row(
        bench=f"fleet, CPU per fleet commit, {w:,} workers",
        store="memory",
        measured=fmt_seconds(point.cpu_per_commit),
        baseline=f"{fmt_seconds(base.cpu_per_commit)} at {base.workers} workers",
        ratio=cpu_ratio,
        target=target,
        met=met,
        note=(
            f"process CPU (one process: the whole fleet's) of the commit phase "
            f"({fmt_seconds(point.cpu_commits)}) minus the mean of an equally long idle phase "
            f"before and after it ({idle}), / commits; {how}"
        ),
    )
    start = Row(
        bench=f"fleet, start of {w:,} workers",
        store="memory",
        measured=f"{point.start_wall:.1f} s wall",
        baseline=f"{point.start_records / w:.1f} records read per worker",
        ratio=None,
        note=(
            f"from the first run_worker to every lane full ({w * LANES:,} splits held), in "
            f"one process: {fmt_seconds(point.start_cpu)} of CPU, {point.start_records:,} "
            f"records read by all workers (watch snapshots and events, listings, point reads)"
        ),
    )
    n = point.changes
    leader = Row(
        bench=f"fleet, leader's store traffic per ownership change, {w:,} workers",
        store="memory",
        measured=(
            f"{sum(point.leader.calls.values()) / n:.1f} calls, "
            f"{point.leader.records / n:.1f} records read"
        ),
        baseline=(
            f"followers {sum(point.followers.calls.values()) / n:.1f} calls, "
            f"{point.followers.records / n:.1f} records"
        ),
        ratio=None,
        target="O(1)",
        note=(
            f"{n} changes, one at a time: a follower's split completes and a waiting split "
            f"takes its lane; counted by each worker's own wrapper. Leader: "
            f"{point.leader.per(n)}. All {w - 1:,} followers together: "
            f"{point.followers.per(n)}. Fleet CPU per change "
            f"{fmt_seconds(point.cpu_per_change)} (the process's, less the idle fleet's over "
            f"the {point.changes_virtual / n:.1f} s of virtual time a change took; the leader's "
            f"own share cannot be told apart in one process); per plain commit of the same "
            f"splits {fmt_seconds(point.cpu_plain / n)}"
        ),
    )
    return [deliveries, cpu, start, leader]


def _large_rows(large: _Large) -> list[Row]:
    total = sum(large.joined.values())
    workers = LARGE_FLEET + 1
    allowed = LARGE_LANES + workers + 100
    parts = ", ".join(f"{k} {v:,}" for k, v in large.joined.items())
    read = large.backstop["records got"] + large.backstop["records listed"]
    per = read / large.reconciles if large.reconciles else math.nan
    own = 3 + 2 * large.unheld
    backstop = ", ".join(f"{k} {v:,}" for k, v in large.backstop.items())
    takeover = sum(large.takeover.values())
    sources = ", ".join(f"{k} {v:,}" for k, v in large.takeover.items() if v)
    calls = ", ".join(f"{op} {n:,}" for op, n in sorted(large.takeover_calls.items()))
    return [
        Row(
            bench=f"fleet, records read by a late joiner, {large.splits:,} splits",
            store="memory",
            measured=f"{total:,} records",
            baseline=f"{allowed} (share {LARGE_LANES} + workers {workers} + 100)",
            ratio=total / allowed,
            target="≤ share + workers + 100",
            met=total <= allowed,
            note=(
                f"a fifth worker (not leading) joins {LARGE_FLEET} that hold their lanes "
                f"({LARGE_LANES} each); records handed to it until its first split's handler "
                f"ran: {parts}; its share is its lanes (with share = splits / workers the "
                f"target would be {large.splits // workers + workers + 100:,}); its CPU "
                f"(the whole process's, the fleet quiet) {fmt_seconds(large.join_cpu)}"
            ),
        ),
        Row(
            bench=f"fleet, records read per follower backstop, {large.splits:,} splits",
            store="memory",
            measured=f"{per:,.1f} records",
            baseline=f"{own} (its own keys)",
            ratio=per / own if large.reconciles else None,
            target="its own keys",
            met=large.reconciles > 0 and per <= own,
            note=(
                f"every record the late joiner read over "
                f"{RECONCILES + 0.5:g} reconcile intervals of {Config().reconcile_interval:g} s "
                f"(virtual), holding its {LARGE_LANES} lanes: {backstop}; / the "
                f"{large.reconciles} reconciles it ran; its own keys: its assignment, the plan, "
                f"the leader key, and the progress record and lease of each of the "
                f"{large.unheld} splits its assignment ({large.assigned} splits) names that it "
                f"does not hold"
            ),
        ),
        Row(
            bench=f"fleet, a new leader taking over a {large.splits:,}-split job",
            store="memory",
            measured=f"{fmt_seconds(large.takeover_cpu)} CPU",
            baseline=f"{takeover:,} records read",
            ratio=None,
            target="≤ 1 s of CPU",
            met=large.takeover_cpu <= 1.0,
            note=(
                f"the leader of {workers} workers killed (no hand-back); its successor "
                f"({large.successor}) read, from the kill until the job was placed again: "
                f"{sources} (the list of {JOB}.split. is the planner run a new leader makes, "
                f"recounting the progress records for the plan record); its calls: {calls}; "
                f"{large.placements} placement(s) published. "
                f"CPU: the process's from the start of its listing of the job until the fleet "
                f"was quiet {SETTLE:g} s (virtual) later: the memory store's listing "
                f"({fmt_seconds(large.listing_cpu)} of it), decoding and folding "
                f"{large.splits:,} splits' records, the recount, and placing them"
            ),
        ),
        Row(
            bench=f"fleet, the leader's backstop of a {large.splits:,}-split job",
            store="memory",
            measured=f"{large.leader_backstop['largest page']:,} records per page at most",
            baseline=f"{Config().list_page_size:,} (list_page_size)",
            ratio=None,
            target="in pages",
            met=0 < large.leader_backstop["largest page"] <= Config().list_page_size,
            note=(
                "the new leader's next reconcile after its takeover: "
                + ", ".join(f"{k} {v:,}" for k, v in large.leader_backstop.items())
                + f"; {fmt_seconds(large.leader_backstop_cpu)} of CPU from its first page "
                "request until the reconcile ended (each record already folded is skipped by "
                "its revision)"
            ),
        ),
    ]


def _steady_row(steady: _Steady) -> Row:
    total = sum(steady.writes.values())
    per = total / steady.thirds
    allowed = STEADY_WORKERS + 1
    # Renewals come every jittered third ([0.8, 1.2) of it): a window that is not a whole
    # number of each key's periods counts up to one renewal more per key at its edges.
    slack = allowed / steady.thirds
    kinds = ", ".join(f"{k} {n / steady.thirds:.2f}" for k, n in sorted(steady.writes.items()))
    reads = ", ".join(f"{k} {n:,}" for k, n in sorted(steady.reads.items())) or "none"
    lease_writes = steady.writes.get("lease", 0)
    kept = (
        "the session keepalive (not a store write) keeps every lease key"
        if steady.session_store
        else "each lease is a durable key naming its owner's session (presence record), renewed "
        "by nobody"
    )
    return Row(
        bench=(
            f"fleet, steady store writes per third of a lease, {STEADY_WORKERS} workers x "
            f"{STEADY_LANES} held splits"
        ),
        store=steady.store,
        measured=f"{per:.2f} writes",
        baseline=f"{allowed} (workers + 1)",
        ratio=per / allowed,
        target="≤ workers + 1",
        met=per <= allowed + slack and steady.lost == 0,
        note=(
            f"lease {steady.ttl:g} s, {steady.thirds / 3:.1f} leases of {steady.clock} time once "
            f"settled, a store client per worker; every write of the fleet by kind, per third: "
            f"{kinds or 'none'}; lease writes {lease_writes} ({kept}); the minimum is "
            f"{STEADY_WORKERS} presence + 1 leader key, on average (a window of jittered "
            f"renewals counts up to one more per key at its edges: judged against "
            f"{allowed + slack:.2f}); splits lost {steady.lost}; reads over "
            f"the window: {reads}"
        ),
    )


def takeover_alone(splits: int = LARGE_JOB) -> str:
    """The large job alone, and the line the takeover row quotes (its CPU, the records read).

    ``python -c "from bench.fleet import takeover_alone; print(takeover_alone())"`` from the
    repository root: the whole large job runs (the late joiner and the backstop too, about
    15 s of wall time), without the fleet sizes around it.
    """
    large = _run_large(splits)
    return (
        f"a new leader taking over a {large.splits:,}-split job: "
        f"{fmt_seconds(large.takeover_cpu)} CPU, {sum(large.takeover.values()):,} records read "
        f"(the store's listing {fmt_seconds(large.listing_cpu)} of it)"
    )
