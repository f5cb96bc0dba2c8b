"""Fleets for the benchmarks: coordinators in the background, idle handlers, a write recorder."""

from __future__ import annotations

import builtins
import collections
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from spate import (
    Config,
    Coordinator,
    Fenced,
    Gained,
    Lost,
    MetricsHooks,
    Plan,
    PlanContext,
    RevokeRequested,
    SplitHandle,
    SplitSpec,
    StoreError,
    open_coordinator,
)
from spate._core.records import KeyKind, Keys
from spate.store import (
    Capabilities,
    Entry,
    Keyspace,
    Revision,
    Session,
    Store,
    WatchEvent,
    Won,
    Write,
    WriteResult,
    batched,
    max_batch_of,
)

__all__ = [
    "JOB",
    "RecordingStore",
    "Worker",
    "WriteCounter",
    "failover_config",
    "idle",
    "planner_of",
    "split_id",
    "start_worker",
]

JOB = "bench"


def split_id(number: int) -> str:
    """The id of split ``number`` (sortable: s000000, s000001, ...)."""
    return f"s{number:06d}"


def planner_of(count: int) -> Callable[[PlanContext], Plan]:
    """A bounded plan of ``count`` equal splits."""

    def plan(ctx: PlanContext) -> Plan:
        ids = (split_id(n) for n in range(count))
        return Plan([SplitSpec(i) for i in ids if i not in ctx.known], final=True)

    return plan


def failover_config(max_in_flight: int, **overrides: Any) -> Config:
    """What both sides of a failover or hand-over run: no grace window, so the figure is the
    protocol's own (a configured ``rebalance_delay`` adds itself on top, by design)."""
    return Config(max_in_flight=max_in_flight, rebalance_delay=0.0, **overrides)


async def idle(split: SplitHandle) -> None:
    """A handler that holds its split and does nothing, and hands it back when asked."""
    await split.revoke_requested.wait()


class WriteCounter(MetricsHooks):
    """Counts guarded writes by operation and outcome, and involuntary losses by reason."""

    def __init__(self) -> None:
        self.writes: collections.Counter[tuple[str, str]] = collections.Counter()
        self.losses: collections.Counter[str] = collections.Counter()

    def write(self, operation: str, outcome: str, duration: float) -> None:
        self.writes[(operation, outcome)] += 1

    def lost(self, reason: str) -> None:
        self.losses[reason] += 1


@attrs.define(eq=False)
class Worker:
    """One coordinator running in the background, with what happened to it."""

    instance: str
    coord: Coordinator | None = None
    gained: dict[str, float] = attrs.field(factory=dict)
    """Split -> when it was last gained (Trio time)."""
    lost: list[tuple[float, str, str]] = attrs.field(factory=list)
    """(time, split, reason) of every Lost event."""
    metrics: WriteCounter = attrs.field(factory=WriteCounter)
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    changed: trio.Event = attrs.field(factory=trio.Event)
    done: trio.Event = attrs.field(factory=trio.Event)

    @property
    def c(self) -> Coordinator:
        """The open coordinator."""
        assert self.coord is not None, f"{self.instance} has no open coordinator"
        return self.coord

    @property
    def owned(self) -> frozenset[str]:
        """What it holds now (empty once stopped)."""
        return frozenset() if self.coord is None or self.done.is_set() else self.c.owned

    def poke(self) -> None:
        """Wake whoever waits in :meth:`until`."""
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, condition: Callable[[], bool], within: float, what: str) -> None:
        """Wait until ``condition()`` holds; TooSlowError naming ``what`` after ``within`` s."""
        try:
            with trio.fail_after(within):
                while not condition():
                    # Releases change ownership without an event: look again now and then.
                    with trio.move_on_after(0.05):
                        await self.changed.wait()
        except trio.TooSlowError:
            raise trio.TooSlowError(f"{self.instance}: {what} within {within} s") from None

    def kill(self) -> None:
        """Stop at once: no hand-back (the caller partitions its store first)."""
        self.scope.cancel()


async def start_worker(
    nursery: trio.Nursery,
    store: Store,
    instance: str,
    *,
    planner: Callable[[PlanContext], Plan],
    config: Config,
    job: str = JOB,
) -> Worker:
    """Open a coordinator in ``nursery``; returns once it is open."""
    worker = Worker(instance)

    async def run(task_status: trio.TaskStatus[None]) -> None:
        try:
            with worker.scope:
                async with open_coordinator(
                    store,
                    job=job,
                    instance=instance,
                    planner=planner,
                    config=config,
                    metrics=worker.metrics,
                ) as coord:
                    worker.coord = coord
                    task_status.started()
                    async with trio.open_nursery() as releases:
                        async for event in coord.events():
                            now = trio.current_time()
                            if isinstance(event, Gained):
                                worker.gained[event.split] = now
                            elif isinstance(event, Lost):
                                worker.lost.append((now, event.split, event.reason))
                            elif isinstance(event, RevokeRequested):
                                releases.start_soon(_hand_back, coord, event.split)
                            worker.poke()
        finally:
            worker.done.set()
            worker.poke()

    await nursery.start(run)
    return worker


async def _hand_back(coord: Coordinator, split: str) -> None:
    # A cooperative holder: nothing to drain, so give the split back at once.
    with contextlib.suppress(Fenced):
        await coord.release([split])


def category(keys: Keys, keyspace: Keyspace, key: str) -> str:
    """What a key of the job is, in the protocol's words (presence, lease, progress, ...)."""
    found = keys.classify(key)
    if found is None:
        return "other"
    kind = found[0]
    if keyspace is Keyspace.EPHEMERAL:
        names = {KeyKind.WORKER: "presence", KeyKind.SPLIT: "lease", KeyKind.LEADER: "leader"}
    else:
        names = {KeyKind.SPLIT: "progress", KeyKind.ASSIGN: "assignment", KeyKind.SPEC: "spec"}
        names[KeyKind.PLAN] = "plan"
    return names.get(kind, kind.value)


class RecordingStore:
    """Delegates to a store and counts every call by (operation, key category).

    ``renewed`` keeps, per ephemeral key, the times of its won updates (renewals), so a
    benchmark can show the longest gap between two renewals of one key: on a per-key TTL
    store, of a coordinator's session (its presence record), which keeps every lease it holds.
    """

    def __init__(self, inner: Store, job: str = JOB) -> None:
        self.inner = inner
        self.keys = Keys(job)
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self.renewed: dict[str, list[float]] = collections.defaultdict(list)
        self.sessions: list[Session] = []
        self.confirmed: list[float] = []

    def writes(self) -> collections.Counter[str]:
        """Writes (create, update, delete) by key category."""
        counted: collections.Counter[str] = collections.Counter()
        for (op, cat), n in self.calls.items():
            if op in ("create", "update", "delete"):
                counted[cat] += n
        return counted

    def longest_renewal_gap(self, started: float, ended: float, prefix: str) -> float:
        """The longest stretch of [started, ended] in which some ephemeral key under
        ``prefix`` went unrenewed (all of it, when none was renewed at all)."""
        longest = 0.0
        keys = [key for key in self.renewed if key.startswith(prefix)]
        if not keys:
            return ended - started
        for key in keys:
            times = self.renewed[key]
            ordered = sorted(times)
            before = [t for t in ordered if t <= started]
            marks = [before[-1] if before else started]
            marks += [t for t in ordered if started < t <= ended] + [ended]
            longest = max(longest, *(b - a for a, b in itertools.pairwise(marks)))
        return longest

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property
    def ephemeral_ttl(self) -> float:
        return self.inner.ephemeral_ttl

    async def __aenter__(self) -> RecordingStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def _count(self, op: str, keyspace: Keyspace, key: str) -> None:
        self.calls[(op, category(self.keys, keyspace, key))] += 1

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        self._count("get", keyspace, key)
        return await self.inner.get(keyspace, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        self.calls[("list", keyspace.value)] += 1
        return await self.inner.list(keyspace, prefix)

    @asynccontextmanager
    async def list_pages(
        self, keyspace: Keyspace, prefix: str, *, page_size: int
    ) -> AsyncIterator[AsyncIterator[builtins.list[Entry]]]:
        """A paged listing, counted as one listing; each page goes through :meth:`listed`."""
        self.calls[("list", keyspace.value)] += 1
        self.listing_started(keyspace, prefix)
        async with self.inner.list_pages(keyspace, prefix, page_size=page_size) as pages:

            async def counted() -> AsyncIterator[list[Entry]]:
                async for page in pages:
                    self.listed_page(keyspace, prefix, page)
                    yield page

            yield counted()

    def listing_started(self, keyspace: Keyspace, prefix: str) -> None:
        """A paged listing began (for counting subclasses)."""

    def listed_page(self, keyspace: Keyspace, prefix: str, page: builtins.list[Entry]) -> None:
        """A page of a paged listing arrived (for counting subclasses)."""

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        async with self.inner.session() as session:
            self.sessions.append(session)
            yield session

    async def sample_keepalives(self, every: float = 0.02) -> None:
        """Note each new ``last_confirmed`` of the newest session (session stores), forever."""
        while True:
            if self.sessions:
                confirmed = self.sessions[-1].last_confirmed
                if confirmed is not None and confirmed not in self.confirmed:
                    self.confirmed.append(confirmed)
            await trio.sleep(every)

    def longest_keepalive_gap(self, started: float, ended: float) -> float:
        """The longest stretch of [started, ended] with no keepalive confirmed."""
        ordered = sorted(self.confirmed)
        before = [t for t in ordered if t <= started]
        marks = [before[-1] if before else started]
        marks += [t for t in ordered if started < t <= ended] + [ended]
        return max(b - a for a, b in itertools.pairwise(marks))

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        self._count("create", keyspace, key)
        return await self.inner.create(keyspace, key, value, session=session)

    @property
    def max_batch(self) -> int:
        """The inner store's (1, so nothing is grouped, when it cannot send writes together)."""
        return max_batch_of(self.inner)

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        """Writes sent together, each counted as the create, update or delete it is."""
        for write in writes:
            self._count(write.kind, write.keyspace, write.key)
        return await batched(self.inner).write_many(writes, session=session)

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        self._count("update", keyspace, key)
        result = await self.inner.update(keyspace, key, value, expected, session=session)
        if keyspace is Keyspace.EPHEMERAL and isinstance(result, Won):
            self.renewed[key].append(trio.current_time())
        return result

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        self._count("delete", keyspace, key)
        return await self.inner.delete(keyspace, key, expected)

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        return self._watch(keyspace, prefix, exact)

    @asynccontextmanager
    async def _watch(
        self, keyspace: Keyspace, prefix: str, exact: bool
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        self.calls[("watch", keyspace.value)] += 1
        async with self.inner.watch(keyspace, prefix, exact=exact) as events:
            yield events
