"""The demo's fleet: in-process workers, the trouble injected into them, and the final check.

Each worker is one :func:`spate.run_worker` call with its own store client wrapped in a
:class:`~spate_testing.faults.FaultyStore`, standing in for a separate process: freezing that
client is a stopped process, partitioning it is a crash the store only learns of when the
worker's leases expire. The chaos schedule runs against the same clock as the workers, so a
run under ``MockClock`` is deterministic for a given seed.

The job holds one straggler, a split several times longer than the fleet's share of the work
per lane. Its handlers split it when the leader asks (lanes sit idle at the end of the job),
and the result says how long the job took against the least the straggler alone, unsplit,
would have made it take.
"""

from __future__ import annotations

import hashlib
import math
import random
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import attrs
import trio

from spate._cli.demo.check import Checked, Piece, check_pieces
from spate._cli.demo.workload import (
    Dataset,
    DemoStats,
    Fold,
    decode_range,
    make_handler,
    make_planner,
)
from spate._config import Config
from spate._delete import delete_job
from spate._errors import ConfigError, SpateError
from spate._events import AllComplete, Stalled
from spate._groups import single_error
from spate._ops import JobStatus, read_status, requeue
from spate._runtime.worker import run_worker
from spate._store import Store
from spate_testing.faults import FaultyStore

__all__ = ["DemoOptions", "DemoResult", "DemoWorker", "Display", "Straggler", "run_demo"]

JOB = "spate-demo"
"""The job name every `spate worker` joins by default (an in-process demo runs its own)."""


def fresh_job_name() -> str:
    """A job name no earlier run used: ``spate-demo-<run id>``.

    Each `spate demo` runs a job of its own, so a store namespace that holds an earlier run's
    job (finished, or left behind by a run that was stopped) can never lend it a result.
    """
    return f"{JOB}-{secrets.token_hex(4)}"


ZONES = ("zone-a", "zone-b", "zone-c")
"""The failure domains the demo's workers are spread over (round robin by start order)."""
BATCH = 50
"""Records a handler folds per step (and per commit)."""
WORK_SHARE = 0.65
"""The share of ``--duration`` the job's work takes, spread evenly over the fleet's lanes."""
SPLIT_WORTH = 1.5
"""Seconds of work the smaller half of a split must hold at least: a residual takes about a
second to be handed out (the leader finds it, seeds it, assigns it, a worker claims it), so
splitting off less gains nothing and floods the event log."""
STRAGGLER_FACTOR = 3
"""How many times the job's ideal length (its work spread evenly over the lanes) the
straggler alone takes: long enough that waiting for it would set the job's length."""


def _with_straggler(dataset: Dataset, lanes: int) -> Dataset:
    """``dataset`` with one of its splits (chosen by the seed) made the job's straggler.

    Its size makes it :data:`STRAGGLER_FACTOR` times the ideal length of the whole job on
    ``lanes`` lanes, its own length included (at least 4 units, longer than any other split).
    """
    digest = hashlib.blake2b(f"{dataset.seed}:straggler".encode(), digest_size=4).digest()
    straggler = int.from_bytes(digest, "big") % dataset.splits
    others = sum(w for n, (*_, w) in enumerate(dataset.ranges()) if n != straggler)
    # units * lanes / (others + units) == FACTOR, solved for units.
    spare = lanes - STRAGGLER_FACTOR
    units = math.ceil(STRAGGLER_FACTOR * others / spare) if spare > 0 else 4 * STRAGGLER_FACTOR
    return attrs.evolve(dataset, straggler=straggler, straggler_units=max(4, units))


@attrs.frozen
class DemoOptions:
    """What `spate demo` was asked to do."""

    store_url: str = "memory://"
    workers: int = 4
    splits: int = 64
    seed: int = 1
    chaos: bool = True
    duration: float = 20.0
    max_in_flight: int = 4
    lease_duration: float = 3.0
    job: str = attrs.field(factory=fresh_job_name)
    """The job this run's fleet works on: a fresh name each run unless given."""

    def __attrs_post_init__(self) -> None:
        if self.workers < 2 and self.chaos:
            raise ConfigError("--workers must be at least 2 with chaos (someone must take over)")
        if self.workers < 1:
            raise ConfigError(f"--workers must be at least 1, not {self.workers}")
        if not 1 <= self.splits <= 10_000:
            raise ConfigError(f"--splits must be between 1 and 10000, not {self.splits}")
        if not (self.duration > 0 and math.isfinite(self.duration)):
            raise ConfigError(
                f"--duration must be a positive number of seconds, not {self.duration}"
            )


class Display(Protocol):
    """Something that shows the fleet while it runs."""

    def event(self, message: str) -> None:
        """Show one event as it happens."""

    async def run(self, fleet: Fleet) -> None:
        """Refresh until cancelled."""


@attrs.define(eq=False)
class DemoWorker:
    """One in-process worker of the demo fleet."""

    name: str
    store: FaultyStore
    locality: str = ""
    state: str = "starting"
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    verdict: AllComplete | Stalled | None = None
    handover_seconds: float | None = None
    error: str | None = None
    finished: trio.Event = attrs.field(factory=trio.Event)
    killed: bool = False
    """Whether the demo killed it (its client was cut off: counted as a kill, not a partition)."""


@attrs.frozen
class Straggler:
    """What splitting did for the job's straggler, and what the job would have taken without."""

    id: str
    records: int
    pieces: int
    """Splits its range ended in, in the store (1: never split)."""
    started: float | None
    """Seconds from the fleet's start until a handler first started it (None: never)."""
    alone: float
    """Seconds its whole range takes one handler at the demo's pace (commits not counted)."""
    batch: int
    batch_seconds: float
    others_split: int
    """Other planned splits that were split too (asked at the end of the job, like it)."""
    fix: float = 0.0
    """Seconds the operator's fix of the poison split took after the job stalled (0: none)."""

    @property
    def least_without_splitting(self) -> float | None:
        """The least the job would have taken without splitting (None: it never started).

        Until the first split the run is the same with or without splitting, so unsplit the
        straggler would have started when it did and run its whole range at the demo's pace;
        the job stalls on the poison split no earlier than that, and the operator's fix
        follows. Failovers of the straggler would only add to it.
        """
        return None if self.started is None else self.started + self.alone + self.fix


@attrs.define
class DemoResult:
    """How the demo went: the verdict, the check, and the figures."""

    verdict: AllComplete | Stalled | None
    ok: bool
    problems: list[str]
    seconds: float
    """The job's length: from the fleet's start to its verdict (the operator's fix included)."""
    stats: DemoStats
    splits_checked: int
    handover_seconds: list[float]
    resumed: int
    replayed: int
    requeued: list[str]
    faults: dict[str, int]
    late_writes: dict[str, int]
    blast_radius: tuple[float, float | None] | None = None
    """The largest share of the job one zone held before a whole zone was lost, and after
    (None when the job ended before the lost zone's splits were held again)."""
    residuals_checked: int = 0
    """Residuals (splits split off others) whose result matched too."""
    straggler: Straggler | None = None
    dataset: Dataset | None = None
    """The job's dataset (its straggler included)."""
    job: str = ""
    """The job this run worked on (a fresh name each run)."""
    cleanup: str | None = None
    """What became of the job's keys in a real store afterwards (None: the memory store)."""


def demo_config(options: DemoOptions) -> Config:
    """Short timings so that failover and rebalancing show within a short demo."""
    lease = options.lease_duration
    return Config(
        lease_duration=lease,
        max_in_flight=options.max_in_flight,
        rebalance_delay=lease / 2,
        drain_deadline=lease,
        reconcile_interval=lease,
        replan_interval=max(60.0, lease),
        # A short demo cannot spare the default second of debounce per round of splitting.
        split_request_delay=lease / 6,
    )


class Fleet:
    """Starts, troubles and watches the demo's workers."""

    def __init__(
        self,
        options: DemoOptions,
        open_client: Callable[[], AbstractAsyncContextManager[Store]],
        stats: DemoStats,
    ) -> None:
        self.options = options
        self.job = options.job
        self.stats = stats
        self.rng = random.Random(options.seed)
        self.config = demo_config(options)
        self.workers: dict[str, DemoWorker] = {}
        concurrency = min(options.splits, options.workers * options.max_in_flight)
        self.dataset = _with_straggler(
            Dataset(seed=options.seed, splits=options.splits), concurrency
        )
        self.poisoned: set[str] = set()
        """The splits whose data holds a malformed record (until the operator fixes it)."""
        self.bad_records: set[int] = set()
        if options.chaos:
            poisoned = self.rng.randrange(options.splits)
            if poisoned == self.dataset.straggler and options.splits > 1:
                poisoned = (poisoned + 1) % options.splits  # the straggler's story is splitting
            split_id, start, end, _ = self.dataset.ranges()[poisoned]
            self.poisoned.add(split_id)
            self.bad_records.add((start + end) // 2)
        self._open_client = open_client
        total_steps = sum(
            math.ceil((end - start) / BATCH) for _, start, end, _ in self.dataset.ranges()
        )
        # Pace the work so that, spread evenly over the lanes, it takes WORK_SHARE of
        # --duration: the rest is room for the chaos and the straggler's last splits.
        self.batch_seconds = options.duration * WORK_SHARE / max(1.0, total_steps / concurrency)
        self.started_at = 0.0
        self.observer: Store | None = None
        self.blast_radius: tuple[float, float | None] | None = None

    def current_store(self) -> Store:
        """A store client of the fleet's own that only reads (for views and checks)."""
        if self.observer is None:
            raise RuntimeError("the fleet has no observer client yet")
        return self.observer

    async def all_finished(self) -> None:
        """Wait until every worker, including ones added meanwhile, has stopped."""
        while True:
            running = [w for w in self.workers.values() if not w.finished.is_set()]
            if not running:
                return
            await running[0].finished.wait()

    def elapsed(self) -> float:
        """Seconds since the fleet started."""
        return trio.current_time() - self.started_at

    async def run_one(self, worker: DemoWorker) -> None:
        """Run one worker until its verdict, its departure, or its death."""
        handler = make_handler(
            self.dataset,
            self.stats,
            worker.name,
            batch=BATCH,
            batch_seconds=self.batch_seconds,
            poison=lambda record: record in self.bad_records,
            splits=True,
            split_batches=max(1, math.ceil(SPLIT_WORTH / self.batch_seconds)),
        )
        async with self._open_client() as client:
            worker.store = FaultyStore(
                client, rng=random.Random(self.rng.random()), name=worker.name
            )
            worker.state = "running"
            try:
                with worker.scope:
                    worker.verdict = await run_worker(
                        worker.store,
                        job=self.job,
                        instance=worker.name,
                        planner=make_planner(self.dataset),
                        handler=handler,
                        config=self.config,
                        fingerprint=f"demo-seed-{self.options.seed}",
                        leave_deadline=self.options.lease_duration * 3,
                        locality=worker.locality,
                    )
                    worker.state = "done"
            except SpateError as exc:
                if worker.state not in ("killed", "leaving"):
                    worker.state = "failed"
                    worker.error = str(exc)
                    self.stats.log(f"{worker.name} stopped: {exc}")
            finally:
                worker.finished.set()

    def add(self, nursery: trio.Nursery, name: str) -> DemoWorker:
        """Start a new worker named ``name``."""
        zone = ZONES[len(self.workers) % len(ZONES)]
        worker = DemoWorker(name=name, store=None, locality=f"{zone}/{name}")  # type: ignore[arg-type]
        self.workers[name] = worker
        nursery.start_soon(self.run_one, worker, name=f"demo worker {name}")
        return worker

    async def kill(self, worker: DemoWorker) -> None:
        """A crash: the store stops hearing from the worker and nothing is handed back."""
        if worker.state != "running":
            return
        worker.state = "killed"
        worker.killed = True
        worker.store.partition()
        worker.scope.cancel()
        self.stats.log(f"{worker.name} killed without warning (its leases must expire)")

    async def lose_zone(self, zone: str, nursery: trio.Nursery) -> None:
        """A whole zone goes dark at once; the blast radius is reported before and after."""
        status = await read_status(self.current_store(), self.job)
        with trio.move_on_after(self.options.lease_duration):
            while not any(share.splits for share in status.placement().domains):
                # Nothing held at this instant (a rebalance in flight): measure a moment later.
                await trio.sleep(0.1)
                status = await read_status(self.current_store(), self.job)
        before = status.placement().blast_radius
        lost = [w for w in self.workers.values() if w.locality.startswith(zone + "/")]
        held = {s.id for s in status.splits.values() if s.lease_owner in {w.name for w in lost}}
        self.blast_radius = (before, None)
        self.stats.log(
            f"{zone} lost at once ({', '.join(w.name for w in lost)}); blast radius before: "
            f"{before:.0%} of the job in one zone"
        )
        for worker in lost:
            await self.kill(worker)
        nursery.start_soon(self._blast_radius_after, zone, before, held)

    async def _blast_radius_after(self, zone: str, before: float, held: set[str]) -> None:
        """Once the lost zone's unfinished splits are held elsewhere, report the blast radius."""
        # Its leases expire first, then its splits wait out the rebalance delay.
        await trio.sleep(self.options.lease_duration + self.config.rebalance_delay)
        while True:
            status = await read_status(self.current_store(), self.job)
            waiting = [
                s
                for s in held
                if s in status.splits
                and status.splits[s].status == "runnable"
                and status.splits[s].lease_owner is None
            ]
            if not waiting:
                break
            await trio.sleep(0.25)
        report = status.placement()
        if not any(share.splits for share in report.domains):
            return  # the job ended first: nothing is held to measure
        self.blast_radius = (before, report.blast_radius)
        self.stats.log(
            f"{zone}'s splits are held in the other zones; blast radius now "
            f"{report.blast_radius:.0%}"
        )

    async def freeze(self, worker: DemoWorker, seconds: float) -> None:
        """A stopped process: nothing it sends reaches the store until it wakes."""
        if worker.state != "running":
            return
        worker.state = "frozen"
        worker.store.freeze()
        self.stats.log(
            f"{worker.name} frozen for {seconds:.1f} s "
            f"(past its {self.options.lease_duration:.1f} s lease)"
        )
        await trio.sleep(seconds)
        worker.store.thaw()
        if worker.state == "frozen":
            worker.state = "running"
        self.stats.log(f"{worker.name} wakes up as a zombie; its stale writes must be fenced")

    async def leave(self, worker: DemoWorker) -> None:
        """A graceful scale-down; measures how long the hand-over takes."""
        if worker.state != "running":
            return
        worker.state = "leaving"
        self.stats.log(f"{worker.name} leaves gracefully (scale-down)")
        started = trio.current_time()
        worker.scope.cancel()
        await worker.finished.wait()
        worker.handover_seconds = trio.current_time() - started
        worker.state = "left"
        self.stats.log(
            f"{worker.name} left; its splits were held elsewhere {worker.handover_seconds:.2f} s "
            "after it began handing them back"
        )

    async def chaos(self, nursery: trio.Nursery) -> None:
        """The trouble schedule, as fractions of --duration."""
        duration = self.options.duration
        names = list(self.workers)
        victim, zombie = names[1], names[2 % len(names)]
        leaver = names[0]
        await trio.sleep(duration * 0.15)
        joiner = f"w{len(names) + 1}"
        self.stats.log(f"{joiner} joins the fleet")
        self.add(nursery, joiner)
        await trio.sleep(duration * 0.1)
        # The victim's whole zone fails at once (the joiner shares it), and a replacement
        # worker starts in another zone.
        await self.lose_zone(self.workers[victim].locality.split("/")[0], nursery)
        self.add(nursery, f"w{len(names) + 2}")
        await trio.sleep(duration * 0.1)
        if zombie != victim:
            nursery.start_soon(self.freeze, self.workers[zombie], self.options.lease_duration * 2.5)
        await trio.sleep(duration * 0.1)
        if len(names) > 3:
            await self.leave(self.workers[leaver])


@asynccontextmanager
async def _clients(
    options: DemoOptions,
) -> AsyncIterator[Callable[[], AbstractAsyncContextManager[Store]]]:
    """A factory of per-worker store clients for ``options.store_url``."""
    from spate_stores import open_store
    from spate_stores.memory import MemoryServer, MemoryStore

    if options.store_url.startswith("memory:") and options.store_url != "memory://":
        # A named memory namespace: the process-wide server's, shared with whatever else in
        # this process has it open (as a real store's namespace is shared).
        url = options.store_url
        yield lambda: MemoryStore.from_url(url, ttl=options.lease_duration)
    elif options.store_url.startswith("memory:"):
        server = MemoryServer()  # plain memory://: a server of this run's own

        def memory_client() -> AbstractAsyncContextManager[Store]:
            return MemoryStore(
                server=server, namespace="demo", ephemeral_ttl=options.lease_duration
            )

        yield memory_client
    else:
        url = demo_store_url(options)
        yield lambda: open_store(url)


DEMO_NAMESPACE = "spate-demo"
"""The namespace the demo runs in on a real store whose URL names none."""


def demo_store_url(options: DemoOptions) -> str:
    """The store URL the demo runs on: ``--store``, its TTL and namespace filled in.

    On a real store the demo's TTL is added unless the URL gives one, and the demo's own
    namespace unless the URL names one.

    A namespace's jobs share one TTL, and the demo's lease is short (a failover within
    seconds): run in a namespace of its own, it never collides with the jobs a user keeps in
    the store's default namespace (the tutorial's, say), which a TTL mismatch would refuse.
    """
    url = options.store_url
    if url.startswith("memory:"):
        return url
    parts = urlsplit(url)
    params = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    extra = []
    if "namespace" not in params and not parts.path.strip("/"):
        extra.append(f"namespace={DEMO_NAMESPACE}")
    if "ttl" not in params:
        extra.append(f"ttl={options.lease_duration:g}")
    if not extra:
        return url
    return urlunsplit(parts._replace(query="&".join(filter(None, [parts.query, *extra]))))


async def run_demo(options: DemoOptions, display: Display | None = None) -> DemoResult:
    """Run the whole demo: the fleet, the chaos, the operator's requeue, the final check."""
    stats = DemoStats(on_event=display.event if display is not None else None)
    async with _clients(options) as open_client, open_client() as observer:
        fleet = Fleet(options, open_client, stats)
        fleet.observer = observer
        fleet.started_at = trio.current_time()
        with single_error():
            async with trio.open_nursery() as nursery:
                if display is not None:
                    nursery.start_soon(display.run, fleet)
                for i in range(options.workers):
                    fleet.add(nursery, f"w{i + 1}")
                if options.chaos:
                    nursery.start_soon(fleet.chaos, nursery)
                # A demo must finish by itself: bound the run generously.
                with trio.move_on_after(options.duration * 6 + 30) as guard:
                    await fleet.all_finished()
                if guard.cancelled_caught:
                    stats.log("the demo ran past its time limit; stopping the fleet")
                verdicts = [w.verdict for w in fleet.workers.values() if w.verdict is not None]
                verdict = verdicts[0] if verdicts else None
                requeued: list[str] = []
                fix_started: float | None = None
                if isinstance(verdict, Stalled) and fleet.poisoned and not guard.cancelled_caught:
                    fix_started = fleet.elapsed()
                    verdict, requeued = await _operator_fixes_poison(fleet, nursery)
                seconds = fleet.elapsed()
                nursery.cancel_scope.cancel()
        checked = await _check(fleet, observer, verdict)
        problems = checked.problems
        if fleet.stats.processed == 0 and options.splits:
            # Never report a result this run did not compute.
            problems.append("the fleet folded no record, so there is no result of this run")
        cleanup = (
            None if options.store_url.startswith("memory:") else await _remove(observer, fleet.job)
        )
        faults: dict[str, int] = {}
        late: dict[str, int] = {}
        for worker in fleet.workers.values():
            if worker.store is not None:
                for kind, count in _injected(worker).items():
                    faults[kind] = faults.get(kind, 0) + count
                for kind, count in worker.store.late_writes.items():
                    late[kind] = late.get(kind, 0) + count
        for worker in fleet.workers.values():
            if worker.state == "failed":
                problems.append(f"{worker.name} failed: {worker.error}")
        return DemoResult(
            verdict=verdict,
            ok=not problems,
            problems=problems,
            seconds=seconds,
            stats=stats,
            splits_checked=checked.splits,
            handover_seconds=[
                w.handover_seconds for w in fleet.workers.values() if w.handover_seconds is not None
            ],
            resumed=stats.resumed,
            replayed=stats.replayed,
            requeued=requeued,
            faults=faults,
            late_writes=late,
            blast_radius=fleet.blast_radius,
            residuals_checked=checked.residuals,
            straggler=_straggler(
                fleet, checked, 0.0 if fix_started is None else seconds - fix_started
            ),
            dataset=fleet.dataset,
            job=fleet.job,
            cleanup=cleanup,
        )


async def _remove(store: Store, job: str) -> str:
    """Delete the run's job from a real store (every worker has stopped): what became of it.

    Its keys would otherwise pile up run after run in the namespace (and on NATS linger for a
    TTL as live-looking workers).
    """
    try:
        with trio.fail_after(30):
            report = await delete_job(store, job, force=True)
    except (SpateError, trio.TooSlowError) as exc:
        return f"its keys were left in the store ({exc}); remove them with `spate delete`"
    return f"its {report.total} keys were removed from the store"


def _injected(worker: DemoWorker) -> dict[str, int]:
    """The faults injected into one worker, a kill counted as a kill.

    A kill is made by cutting the worker's client off (a partition the store only learns of
    when the leases expire), so its client counts one partition; the report says kill.
    """
    injected = dict(worker.store.injected)
    if worker.killed and injected.get("partition", 0) > 0:
        injected["partition"] -= 1
        injected["kill"] = injected.get("kill", 0) + 1
    return {kind: count for kind, count in injected.items() if count}


def _straggler(fleet: Fleet, checked: Checked, fix: float) -> Straggler | None:
    """The straggler's report: how often it was split, and its length run alone."""
    dataset = fleet.dataset
    if dataset.straggler is None:
        return None
    split_id, start, end, _ = dataset.ranges()[dataset.straggler]
    started = fleet.stats.started_at.get(split_id)
    return Straggler(
        id=split_id,
        records=end - start,
        pieces=checked.pieces.get(split_id, 1),
        started=None if started is None else started - fleet.started_at,
        # The pace every handler keeps: a batch, then a sleep of batch_seconds (the commit
        # after it is not counted, so this is the least the range takes one handler).
        alone=math.ceil((end - start) / BATCH) * fleet.batch_seconds,
        batch=BATCH,
        batch_seconds=fleet.batch_seconds,
        others_split=sum(1 for root, n in checked.pieces.items() if n > 1 and root != split_id),
        fix=fix,
    )


async def _operator_fixes_poison(
    fleet: Fleet, nursery: trio.Nursery
) -> tuple[AllComplete | Stalled | None, list[str]]:
    """The operator fixes the bad data and requeues the split; a fresh worker finishes it."""
    stats = fleet.stats
    status = await read_status(fleet.current_store(), fleet.job)
    # What the store quarantined, not what the demo poisoned: a poisoned split that was split
    # leaves its bad record in one of its pieces.
    quarantined = sorted(s.id for s in status.splits.values() if s.status == "quarantined")
    stats.log(f"operator: the job stalled on {', '.join(quarantined)}; fixing the data, requeueing")
    fleet.bad_records.clear()
    await requeue(fleet.current_store(), fleet.job, quarantined)
    worker = fleet.add(nursery, "w-fix")
    await worker.finished.wait()
    return worker.verdict, quarantined


async def _check(fleet: Fleet, store: Store, verdict: AllComplete | Stalled | None) -> Checked:
    """Compare every split's final committed state with a single pass over its range."""
    status = await read_status(store, fleet.job)
    pieces = []
    unreadable = []
    for split in status.splits.values():
        try:
            start, end = decode_range(split.descriptor)
        except (ValueError, KeyError, TypeError):
            unreadable.append(f"{split.id}: its descriptor {split.descriptor!r} is no range")
            continue
        pieces.append(
            Piece(
                id=split.id,
                root=_root(status, split.id),
                start=start,
                end=end,
                status=split.status,
                completed=split.completed,
                fold=Fold.decode(split.state),
            )
        )
    checked = check_pieces(fleet.dataset, pieces)
    checked.problems[:0] = unreadable
    if not isinstance(verdict, AllComplete):
        checked.problems.insert(0, f"the job ended with {verdict!r}, not AllComplete")
    return checked


def _root(status: JobStatus, split: str) -> str:
    """The planned split that ``split`` was split off, through any number of splits."""
    seen = {split}
    parent = status.splits[split].parent if split in status.splits else None
    while parent is not None and parent not in seen:
        split = parent
        seen.add(split)
        parent = status.splits[split].parent if split in status.splits else None
    return split
