"""Helpers for the coordinator scenario tests: in-process fleets on one MemoryServer."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio

from spate import (
    Config,
    Coordinator,
    Event,
    Fenced,
    Gained,
    MetricsHooks,
    PlanContext,
    Progress,
    RevokeRequested,
    open_coordinator,
)
from spate._core.records import ProgressRecord, decode
from spate.store import Delete, Keyspace, Put, Revision, SnapshotDone, Store, WriteResult
from spate_stores.memory import MemoryServer, MemoryStore

# The common helpers, offered here too: a scenario test imports its whole harness from one place.
from tests.common import JOB as JOB
from tests.common import KEYS as KEYS
from tests.common import EventLog as EventLog
from tests.common import config as config
from tests.common import planner_of as planner_of

TTL = 9.0
E = TypeVar("E", bound=Event)


class Recorder(MetricsHooks):
    """Metrics hooks that remember every call."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, str, str]] = []
        self.counts: collections.Counter[str] = collections.Counter()

    def write(self, operation: str, outcome: str, duration: float) -> None:
        self.writes.append((trio.current_time(), operation, outcome))

    def acquired(self, reason: str) -> None:
        self.counts[f"acquired:{reason}"] += 1

    def lost(self, reason: str) -> None:
        self.counts[f"lost:{reason}"] += 1

    def revocation(self, outcome: str) -> None:
        self.counts[f"revocation:{outcome}"] += 1

    def released(self, count: int) -> None:
        self.counts["released"] += count

    def failed(self) -> None:
        self.counts["failed"] += 1

    def quarantined(self) -> None:
        self.counts["quarantined"] += 1


@attrs.define(eq=False)
class Worker(EventLog):
    """A coordinator running in the background, with its events recorded."""

    instance: str
    coord: Coordinator | None = None
    events: list[Event] = attrs.field(factory=list)
    times: list[float] = attrs.field(factory=list)
    error: BaseException | None = None
    metrics: Recorder = attrs.field(factory=Recorder)
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)
    changed: trio.Event = attrs.field(factory=trio.Event)
    on_event: Callable[[Worker, Event], Awaitable[None]] | None = None

    @property
    def c(self) -> Coordinator:
        assert self.coord is not None
        return self.coord

    def _record(self, event: Event) -> None:
        self.events.append(event)
        self.times.append(trio.current_time())
        self._poke()

    def _poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, condition: Callable[[], bool], within: float = 120.0) -> None:
        """Wait (virtual time) until ``condition()`` holds."""
        with trio.fail_after(within):
            while not condition():
                with trio.move_on_after(0.25):
                    await self.changed.wait()

    async def wait_for(self, kind: type[E], split: str | None = None, within: float = 120.0) -> E:
        await self.until(lambda: bool(self.of(kind, split)), within)
        return self.of(kind, split)[0]

    def kill(self) -> None:
        """Stop abruptly: no hand-back, leases left to expire."""
        self.scope.cancel()


async def spawn(
    nursery: trio.Nursery,
    store: Store,
    instance: str,
    *,
    planner: Callable[[PlanContext], Any] | None = None,
    cfg: Config | None = None,
    fingerprint: str = "",
    expect_error: bool = False,
    on_event: Callable[[Worker, Event], Awaitable[None]] | None = None,
    locality: str = "",
) -> Worker:
    """Start a worker; returns once its coordinator is open (or failed, if expected)."""
    worker = Worker(instance, on_event=on_event)

    async def run(task_status: trio.TaskStatus[None]) -> None:
        started = False
        try:
            with worker.scope:
                async with open_coordinator(
                    store,
                    job=JOB,
                    instance=instance,
                    planner=planner or planner_of(4),
                    config=cfg or config(),
                    fingerprint=fingerprint,
                    metrics=worker.metrics,
                    locality=locality,
                ) as coord:
                    worker.coord = coord
                    started = True
                    task_status.started()
                    async for event in coord.events():
                        worker._record(event)
                        if worker.on_event is not None:
                            await worker.on_event(worker, event)
        except Exception as exc:
            worker.error = exc
            if not expect_error:
                raise
        finally:
            worker.done.set()
            worker._poke()
            if not started:
                task_status.started()

    await nursery.start(run)
    return worker


async def complete_on_gain(worker: Worker, event: Event) -> None:
    """An event handler that completes every gained split at once."""
    if isinstance(event, Gained):
        await worker.c.commit(event.split, Progress(100, completed=True))


async def cooperative(worker: Worker, event: Event) -> None:
    """An event handler that hands a revoked split back at once (after committing 7)."""
    if isinstance(event, RevokeRequested):
        try:
            await worker.c.commit(event.split, Progress(7, b"st"))
            await worker.c.release([event.split])
        except Fenced:
            pass  # already gone (a repeated request, or lost meanwhile)


def client(server: MemoryServer) -> MemoryStore:
    """A new store client ("process") on ``server``."""
    return MemoryStore(server=server, ephemeral_ttl=TTL)


async def record_of(store: Store, split: str) -> tuple[ProgressRecord, Revision]:
    entry = await store.get(Keyspace.DURABLE, KEYS.split(split))
    assert entry is not None
    return decode(ProgressRecord, entry.key, entry.value), entry.revision


class HookStore:
    """Delegates to a store; ``before``/``after`` hooks run around matching writes."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.before: Callable[[str, Keyspace, str], Awaitable[None]] | None = None
        self.after: Callable[[str, Keyspace, str, WriteResult], Awaitable[None]] | None = None
        self.writes: list[tuple[str, Keyspace, str]] = []
        self.durable_gate: trio.Event | None = None
        """While set to an unset Event, live durable watch events are held back (slow watch)."""
        self.ephemeral_gate: trio.Event | None = None
        self.gate_prefix = ""
        """Only events for keys under this prefix are held back."""

    @property
    def capabilities(self) -> Any:
        return self.inner.capabilities

    @property
    def ephemeral_ttl(self) -> float:
        return self.inner.ephemeral_ttl

    async def __aenter__(self) -> HookStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def session(self) -> Any:
        return self.inner.session()

    async def get(self, keyspace: Keyspace, key: str) -> Any:
        return await self.inner.get(keyspace, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> Any:
        return await self.inner.list(keyspace, prefix)

    def list_pages(self, keyspace: Keyspace, prefix: str, *, page_size: int) -> Any:
        return self.inner.list_pages(keyspace, prefix, page_size=page_size)

    async def _write(
        self, kind: str, keyspace: Keyspace, key: str, call: Callable[[], Awaitable[WriteResult]]
    ) -> WriteResult:
        self.writes.append((kind, keyspace, key))
        if self.before is not None:
            await self.before(kind, keyspace, key)
        result = await call()
        if self.after is not None:
            await self.after(kind, keyspace, key, result)
        return result

    async def create(self, keyspace: Keyspace, key: str, value: bytes, **named: Any) -> WriteResult:
        return await self._write(
            "create", keyspace, key, lambda: self.inner.create(keyspace, key, value, **named)
        )

    async def update(
        self, keyspace: Keyspace, key: str, value: bytes, expected: Revision, **named: Any
    ) -> WriteResult:
        return await self._write(
            "update",
            keyspace,
            key,
            lambda: self.inner.update(keyspace, key, value, expected, **named),
        )

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        return await self._write(
            "delete", keyspace, key, lambda: self.inner.delete(keyspace, key, expected)
        )

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        return self._watch(keyspace, prefix, exact)

    @asynccontextmanager
    async def _watch(
        self, keyspace: Keyspace, prefix: str, exact: bool
    ) -> AsyncIterator[AsyncIterator[Any]]:
        async with self.inner.watch(keyspace, prefix, exact=exact) as events:
            yield self._gated(keyspace, events)

    async def _gated(self, keyspace: Keyspace, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        live = False
        async for event in events:
            gate = self.durable_gate if keyspace is Keyspace.DURABLE else self.ephemeral_gate
            if isinstance(event, Delete):
                key = event.key
            elif isinstance(event, Put):
                key = event.entry.key
            else:
                key = ""
            if live and gate is not None and key.startswith(self.gate_prefix):
                await gate.wait()
            live = live or isinstance(event, SnapshotDone)
            yield event


def split_ids(count: int) -> Iterable[str]:
    return [f"s{i:02d}" for i in range(count)]
