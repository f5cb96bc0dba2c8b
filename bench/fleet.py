"""Fleet scale: what one commit, one join and one ownership change cost a fleet of W workers.

The "before" figures of the fleet-scale issue. Every worker is a :func:`spate.run_worker` in
this one process, on one shared memory store, under Trio's ``MockClock``: virtual time drives
leases and timers, and the CPU is real (``time.process_time`` of the process, which is the
whole fleet's CPU, since the fleet is this one process). Each worker reaches the store through
its own :class:`Tally`, a wrapper that counts, for that worker, the entries its watches deliver
(snapshot entries apart from live Put/Delete events), the records ``list`` and ``get`` return,
and its writes. The counts are exact; only the CPU figures are noisy.

* **Fleets of 8, 64 and 256 workers** (``--quick``: 8 and 64), 4 lanes each, a job of 4
  splits per worker plus a few waiting ones. Once every lane is full and the fleet has
  settled, the held splits commit (each split 20 times at 8 workers, 4 at 64; one split per
  worker once at 256, to keep the suite to minutes: each row says how many), the commits
  spread evenly over virtual time so each is seen on its own. Reported: live watch events
  delivered to all workers per commit, and fleet CPU per commit (the commit phase's CPU minus
  that of an equally long idle phase of the same fleet, over the commits), with its ratio to
  8 workers. 1,024 workers are not run by default: every write of the fleet's start reaches
  every worker, so the start alone grows as W² (tens of minutes at 1,024); its row says so,
  with the start's cost at the sizes that ran, and ``BENCH_FLEET_SIZES=8,1024`` runs it.
  Then a split held by a follower completes, one at a time, and its lane takes a waiting
  split: per such ownership change, the calls and records the *leader's* wrapper sees, and the
  fleet's CPU (the leader's own share cannot be told apart in one process; a plain commit's
  fleet CPU is beside it).
* **A late joiner of a large job** (100,000 splits; ``--quick``: 10,000): a fleet of 4 workers
  holds its lanes, then a fifth, not leading, joins: the records its watches' snapshots,
  listings and reads returned until its first split was handed to its handler. Then the
  fleet runs three reconcile intervals: the records one follower's backstop listings return,
  per reconcile.

Nothing is asserted; the figures are reported beside the issue's targets. Run alone with
``python -m bench --only fleet --stores memory``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import trio.testing

from bench._fleet import JOB, RecordingStore, planner_of
from bench._harness import Options, Row, fmt_seconds, namespace
from spate import Config, SplitHandle, run_worker
from spate._core.records import Keys, LeaderRecord, decode
from spate.store import Entry, Keyspace, SnapshotDone, Store, WatchEvent
from spate_stores.memory import MemoryStore

SIZES = (8, 64, 256, 1_024)
QUICK_SIZES = (8, 64)
LANES = 4
"""Splits per worker (its ``max_in_flight``), as in the issue's measurement."""
ROUNDS = {8: 20, 64: 4}
"""Commits per split at each fleet size (the issue's 20 where the suite can afford it; 1 above)."""
EVERY = {8: 1, 64: 1}
"""At each fleet size one split in this many commits (every split up to 64 workers; above,
one split per worker: the figures are per commit, and a commit costs the fleet O(workers))."""
QUICK_ROUNDS = 5
MAX_SIZE = 256
"""The largest fleet of a full run (see :func:`_skipped_row`; BENCH_FLEET_SIZES overrides)."""
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

    def reset(self) -> None:
        """Zero every counter (the recorder's calls too)."""
        self.calls.clear()
        self.snapshot = [0, 0]
        self.live = [0, 0]
        self.listed = [0, 0]
        self.lists = [0, 0]
        self.got = 0

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

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        entries = await super().list(keyspace, prefix)
        index = KEYSPACES.index(keyspace)
        self.lists[index] += 1
        self.listed[index] += len(entries)
        return entries

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        return self._counted_watch(keyspace, prefix, exact)

    @asynccontextmanager
    async def _counted_watch(
        self, keyspace: Keyspace, prefix: str, exact: bool
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        async with super().watch(keyspace, prefix, exact=exact) as events:
            yield _Counted(events, self, keyspace)


@attrs.define(eq=False)
class _Fleet:
    """Workers of one job sharing a store, each through its own tally, and what they hold."""

    store: Store
    config: Config
    planner: Callable[..., Any]
    nursery: trio.Nursery
    tallies: dict[str, Tally] = attrs.field(factory=dict)
    held: dict[str, dict[str, SplitHandle]] = attrs.field(factory=dict)
    """Instance -> its handlers' splits."""
    orders: dict[str, trio.MemorySendChannel[Order]] = attrs.field(factory=dict)
    """Split -> where to send its handler the next thing to do."""
    changed: trio.Event = attrs.field(factory=trio.Event)
    gains: int = 0
    """Handlers started (splits gained) so far."""
    done: int = 0
    """Orders carried out so far."""

    def start(self, instance: str) -> Tally:
        """Start one worker (in the background); returns its tally."""
        tally = Tally(self.store)
        self.tallies[instance] = tally
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

        await run_worker(
            tally,
            job=JOB,
            instance=instance,
            planner=self.planner,
            handler=handler,
            config=self.config,
            # The fleet is torn down by cancellation: no graceful leave (at 1,024 workers the
            # hand-backs alone would cost more than the measurement).
            leave_deadline=0.0,
        )

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
        entry = await self.store.get(Keyspace.EPHEMERAL, Keys(JOB).leader)
        assert entry is not None, "the fleet has no leader"
        return decode(LeaderRecord, entry.key, entry.value).owner

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
        await trio.sleep(offset + (count - 1) * PERIOD)

    return order


async def _complete(split: SplitHandle) -> None:
    mark = split.progress.watermark
    await split.commit(0 if mark is None else mark + 1, completed=True)


async def _phase(fleet: _Fleet, orders: dict[str, Order]) -> float:
    """Send ``orders`` to their splits; the process CPU until all are carried out, quiet."""
    target = fleet.done + len(orders)
    started = time.process_time()
    for split, order in orders.items():
        fleet.orders[split].send_nowait(order)
    await fleet.until(lambda: fleet.done >= target)
    return time.process_time() - started


@attrs.frozen
class _Point:
    workers: int
    rounds: int
    committing: int
    commits: int
    live: tuple[int, int]
    cpu_commits: float
    cpu_idle: float
    changes: int
    leader_calls: dict[str, int]
    leader_records: int
    leader_live: int
    leader_writes: int
    cpu_changes: float
    cpu_plain: float
    start_deliveries: int
    start_wall: float
    wall: float

    @property
    def deliveries(self) -> float:
        return sum(self.live) / self.commits

    @property
    def cpu_per_commit(self) -> float:
        return max(0.0, self.cpu_commits - self.cpu_idle) / self.commits


async def _fleet_point(workers: int, rounds: int, every: int) -> _Point:
    began = time.monotonic()
    total = workers * LANES
    async with (
        MemoryStore(namespace=namespace("fleet"), ephemeral_ttl=TTL) as store,
        trio.open_nursery() as nursery,
    ):
        fleet = _Fleet(store, _config(LANES), planner_of(total + CHANGES), nursery)
        for number in range(workers):
            fleet.start(f"w{number:04d}")
        await fleet.until(lambda: fleet.holding() == total)
        start_deliveries = sum(t.records_read for t in fleet.tallies.values())
        start_wall = time.monotonic() - began
        await trio.sleep(PERIOD)  # settle: any rebalancing done
        await fleet.until(lambda: fleet.holding() == total)
        held = sorted(split for h in fleet.held.values() for split in h)
        chosen = held[::every]
        spread = PERIOD / len(chosen)
        idle = {s: _waits(rounds, i * spread) for i, s in enumerate(chosen)}
        cpu_idle = await _phase(fleet, idle)
        fleet.reset()
        work = {s: _commits(rounds, i * spread) for i, s in enumerate(chosen)}
        cpu_commits = await _phase(fleet, work)
        live = fleet.live_events()
        commits = rounds * len(chosen)

        # Ownership changes: a follower's split completes, a waiting split takes its lane.
        leader = await fleet.leader()
        followers = [i for i in sorted(fleet.held) if i != leader]
        plain = 0.0
        for n in range(CHANGES):
            split = sorted(fleet.held[followers[n % len(followers)]])[0]
            plain += await _phase(fleet, {split: _commits(1, 0.0)})
        fleet.reset()
        cpu_changes = 0.0
        for n in range(CHANGES):
            split = sorted(fleet.held[followers[n % len(followers)]])[0]
            gains = fleet.gains

            def replaced(before: int = gains) -> bool:
                return fleet.gains > before and fleet.holding() == total

            started = time.process_time()
            fleet.orders[split].send_nowait(_complete)
            await fleet.until(replaced)
            cpu_changes += time.process_time() - started
        tally = fleet.tallies[leader]
        calls: dict[str, int] = {}
        for (op, _), count in tally.calls.items():
            calls[op] = calls.get(op, 0) + count
        point = _Point(
            workers=workers,
            rounds=rounds,
            committing=len(chosen),
            commits=commits,
            live=live,
            cpu_commits=cpu_commits,
            cpu_idle=cpu_idle,
            changes=CHANGES,
            leader_calls=calls,
            leader_records=tally.records_read,
            leader_live=sum(tally.live),
            leader_writes=tally.write_count,
            cpu_changes=cpu_changes,
            cpu_plain=plain,
            start_deliveries=start_deliveries,
            start_wall=start_wall,
            wall=0.0,
        )
        nursery.cancel_scope.cancel()
    return attrs.evolve(point, wall=time.monotonic() - began)


def _run_point(workers: int, rounds: int, every: int) -> _Point:
    clock = trio.testing.MockClock(autojump_threshold=0)
    return trio.run(_fleet_point, workers, rounds, every, clock=clock)


@attrs.frozen
class _Large:
    splits: int
    joined: dict[str, int]
    """Records the late joiner read before its first split, by where they came from."""
    join_cpu: float
    listed: int
    reconciles: int
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
        tally.reset()
        # Jittered intervals: a little more than RECONCILES of them, counted as they come.
        await trio.sleep((RECONCILES + 0.5) * config.reconcile_interval)
        listed, reconciles = tally.listed[0] + tally.listed[1], tally.lists[0]
        nursery.cancel_scope.cancel()
    return _Large(splits, joined, join_cpu, listed, reconciles, time.monotonic() - began)


def _run_large(splits: int) -> _Large:
    clock = trio.testing.MockClock(autojump_threshold=0)
    return trio.run(_large_job, splits, clock=clock)


def _sizes(options: Options) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(sizes measured, sizes skipped) for this run."""
    if options.quick:
        return QUICK_SIZES, ()
    wanted = os.environ.get("BENCH_FLEET_SIZES", "")
    if wanted:
        return tuple(int(w) for w in wanted.split(",") if w.strip()), ()
    return tuple(w for w in SIZES if w <= MAX_SIZE), tuple(w for w in SIZES if w > MAX_SIZE)


def _plan(workers: int, quick: bool) -> tuple[int, int]:
    """(commits per split, one split in how many commits) at ``workers``."""
    if quick:
        return QUICK_ROUNDS if workers <= 8 else 1, 1
    return ROUNDS.get(workers, 1), EVERY.get(workers, LANES)


def run(options: Options) -> list[Row]:
    """The fleet sizes, then the late joiner and backstop of a large job (memory store only)."""
    if not options.wants("memory"):
        return []
    rows: list[Row] = []
    measured, skipped = _sizes(options)
    points: list[_Point] = []
    for workers in measured:
        rounds, every = _plan(workers, options.quick)
        point = _run_point(workers, rounds, every)
        points.append(point)
        base = points[0]
        for row in _fleet_rows(point, base):
            print(row.line(), flush=True)
            rows.append(row)
    for workers in skipped:
        row = _skipped_row(workers, points)
        print(row.line(), flush=True)
        rows.append(row)
    large = _run_large(QUICK_LARGE_JOB if options.quick else LARGE_JOB)
    for row in _large_rows(large):
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
        measured=f"{point.deliveries:.1f} events",
        baseline="1 event",
        ratio=point.deliveries,
        target="≤ 1 (0 for a plain commit)",
        met=point.deliveries <= 1,
        note=(
            f"live Put/Delete events delivered to all workers' watches / commits: {durable:.1f} "
            f"durable (progress), {ephemeral:.2f} ephemeral (renewals, lease {TTL:g} s); {how}"
        ),
    )
    cpu_ratio = point.cpu_per_commit / base.cpu_per_commit if base.cpu_per_commit else math.nan
    target, met = "—", None
    if w == 64:
        target, met = "≤ 1.5x of 8 workers", cpu_ratio <= 1.5
    elif w == 1_024:
        target, met = "≤ 2x of 8 workers", cpu_ratio <= 2.0
    cpu = Row(
        bench=f"fleet, CPU per fleet commit, {w:,} workers",
        store="memory",
        measured=fmt_seconds(point.cpu_per_commit),
        baseline=f"{fmt_seconds(base.cpu_per_commit)} at {base.workers} workers",
        ratio=cpu_ratio,
        target=target,
        met=met,
        note=(
            f"process CPU (one process: the whole fleet's) of the commit phase minus an "
            f"equally long idle phase, / commits; {how}; the fleet's start took "
            f"{point.start_wall:.1f} s and {point.start_deliveries:,} records delivered"
        ),
    )
    calls = ", ".join(
        f"{op} {n / point.changes:.1f}" for op, n in sorted(point.leader_calls.items())
    )
    leader = Row(
        bench=f"fleet, leader's store traffic per ownership change, {w:,} workers",
        store="memory",
        measured=(
            f"{sum(point.leader_calls.values()) / point.changes:.1f} calls, "
            f"{point.leader_records / point.changes:.1f} records read"
        ),
        baseline=f"fleet CPU {fmt_seconds(point.cpu_changes / point.changes)} per change",
        ratio=None,
        note=(
            f"{point.changes} changes, one at a time: a follower's split completes and a "
            f"waiting split takes its lane; leader's calls per change: {calls or 'none'} "
            f"({point.leader_writes / point.changes:.1f} writes; records read: "
            f"{point.leader_live / point.changes:.1f} of them live watch events). The leader's "
            f"own CPU cannot be told apart in one process: the fleet's CPU per change is "
            f"{fmt_seconds(point.cpu_changes / point.changes)}, per plain commit of the same "
            f"splits {fmt_seconds(point.cpu_plain / point.changes)}"
        ),
    )
    return [deliveries, cpu, leader]


def _skipped_row(workers: int, points: list[_Point]) -> Row:
    grown = ", ".join(
        f"{p.workers}: {p.start_deliveries:,} in {p.start_wall:.1f} s" for p in points
    )
    largest = max(points, key=lambda p: p.workers, default=None)
    guess = (
        f"about {largest.start_wall * (workers / largest.workers) ** 2 / 60:.0f} min "
        f"(as W² from {largest.workers} workers)"
        if largest is not None
        else "tens of minutes"
    )
    return Row(
        bench=f"fleet, {workers:,} workers",
        store="memory",
        measured="not run",
        baseline="—",
        ratio=None,
        target="deliveries ≤ 1; CPU ≤ 2x of 8 workers",
        note=(
            f"every write of a fleet's start (claims, leases, assignments) reaches every "
            f"worker, so the start alone grows as W²: {guess} in one process (records "
            f"delivered during the start, by size: {grown}); "
            f"BENCH_FLEET_SIZES=8,{workers} runs it"
        ),
    )


def _large_rows(large: _Large) -> list[Row]:
    total = sum(large.joined.values())
    workers = LARGE_FLEET + 1
    allowed = LARGE_LANES + workers + 100
    parts = ", ".join(f"{k} {v:,}" for k, v in large.joined.items())
    per = large.listed / large.reconciles if large.reconciles else math.nan
    own = 2 * LARGE_LANES + 2
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
            measured=f"{per:,.0f} records",
            baseline=f"{own} (its own keys)",
            ratio=per / own,
            target="its own keys",
            met=per <= own,
            note=(
                f"the late joiner's reconcile listings (durable and ephemeral) over "
                f"{large.reconciles} reconcile intervals of {Config().reconcile_interval:g} s "
                f"(virtual), per reconcile; its own keys: {LARGE_LANES} progress records, "
                f"{LARGE_LANES} leases, its assignment and presence"
            ),
        ),
    ]
