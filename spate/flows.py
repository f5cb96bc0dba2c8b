"""Flows: the protocol's multi-step procedures as generators driven by the control loop.

A claim is a lease write, then a record CAS, then perhaps a read and a retry; a commit is a CAS
and perhaps a read. Written as plain async functions on one task, every write would wait for
every other write's round trip. Written as independent tasks, every task would own a piece of
state. A flow is neither: it is a generator that *yields* the store operation it needs
(:class:`Op`) and is *resumed* with the result, and only the coordinator's loop ever resumes
it. So all of a flow's decisions run on the loop task, between inputs, against the current
state — one owner of state — while the store round trips themselves run in small I/O tasks
and overlap freely.

Two writes to one key must not overlap (the second would be built on a revision the first
is about to change). A flow therefore yields :class:`Hold` for a key before reading the state
its write depends on: it is resumed only when no other flow's write to that key is in flight,
and keeps the key until it moves on to another key or ends. Writes to different keys never
wait for each other, so commits on different splits pipeline and renewals never queue behind
commits.

A flow that needs several independent procedures at once (a departing worker handing back
every split it holds) yields :class:`Fork`: the sub-flows start together, their writes to
different keys are in flight together, and the parent resumes once all of them have ended.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Generator
from typing import Any, Literal, TypeAlias, TypeVar

import attrs
import outcome
import trio

from spate import fenced
from spate.errors import StoreError, StoreUnavailable
from spate.store import Entry, Keyspace, Store, WriteResult
from spate.telemetry._context import Context, attached

__all__ = ["Batch", "Driver", "Flow", "Fork", "Hold", "Op", "Request"]

logger = logging.getLogger("spate.flows")

T = TypeVar("T")
Key: TypeAlias = tuple[Keyspace, str]

LIST_TIMEOUT_FACTOR = 10
"""A listing may take this many op_timeouts."""
BATCH_CONCURRENCY = 32
"""Writes of one :class:`Batch` in flight at once (planning seeds many records)."""


@attrs.frozen
class Op:
    """One store call. Writes (create/update/delete) go through :func:`spate.fenced.write`."""

    kind: Literal["get", "list", "create", "update", "delete"]
    keyspace: Keyspace
    key: str
    value: bytes = b""
    expected: int | None = None
    operation: str = ""
    """The span name of a write: ``spate.<operation>``."""
    split: str | None = None
    epoch: int | None = None

    @property
    def is_write(self) -> bool:
        """Whether this call writes (and so needs its key to itself)."""
        return self.kind in ("create", "update", "delete")


@attrs.frozen
class Hold:
    """Wait until no other flow is writing ``key``, then keep it until the next key or the end."""

    keyspace: Keyspace
    key: str


@attrs.frozen
class Batch:
    """Several create operations run concurrently; resumed with a list of results or errors.

    Only for keys no other flow writes (freshly planned spec and progress records).
    """

    ops: tuple[Op, ...]


Flow: TypeAlias = Generator["Request", Any, T]
"""A protocol procedure: yields requests, receives results, returns its outcome."""


@attrs.frozen
class Fork:
    """Run several flows side by side; resumed with their outcomes, in order, once all end.

    A sub-flow's exception is part of its outcome (the parent decides what is fatal). The
    parent gives up any key it holds first: a sub-flow may need that very key.
    """

    flows: tuple[Flow[Any], ...]


Request: TypeAlias = Op | Hold | Batch | Fork


@attrs.define(eq=False)
class _Running:
    gen: Flow[Any]
    done: Callable[[outcome.Outcome[Any]], None]
    held: Key | None = None
    parked: Op | None = None
    context: Context | None = None
    """The trace context of the API call that started the flow (None: internal)."""


class Driver:
    """Runs flows: resumes them on the loop task, runs their store calls in I/O tasks.

    ``post`` hands a callable to the loop (the loop runs it, then steps); results come back
    that way, so a flow is only ever resumed on the loop.
    """

    def __init__(
        self,
        store: Store,
        scope: fenced.Scope,
        *,
        nursery: trio.Nursery,
        post: Callable[[Callable[[], None]], None],
        op_timeout: float,
    ) -> None:
        self._store = store
        self._scope = scope
        self._nursery = nursery
        self._post = post
        self._timeout = op_timeout
        self._busy: dict[Key, _Running] = {}
        self._waiting: dict[Key, collections.deque[_Running]] = {}
        self._ready: collections.deque[tuple[_Running, outcome.Outcome[Any]]] = collections.deque()
        self._running = False

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        """Whether a flow holds ``key`` (or waits for it)."""
        k = (keyspace, key)
        return k in self._busy or bool(self._waiting.get(k))

    def start(
        self,
        flow: Flow[T],
        done: Callable[[outcome.Outcome[T]], None],
        context: Context | None = None,
    ) -> None:
        """Start ``flow``; ``done`` gets its return value (or exception) on the loop task.

        An exception out of ``done`` (or out of a flow whose ``done`` re-raises) propagates out
        of the loop: that is how a fatal condition found by a flow stops the coordinator.
        """
        self._ready.append((_Running(flow, done, context=context), outcome.Value(None)))
        self._drain()

    # -- resuming --------------------------------------------------------------------------

    def _drain(self) -> None:
        if self._running:
            return  # a resumption further up the stack drains the queue
        self._running = True
        try:
            while self._ready:
                running, result = self._ready.popleft()
                self._advance(running, result)
        finally:
            self._running = False

    def _advance(self, running: _Running, result: outcome.Outcome[Any]) -> None:
        while True:
            try:
                request = result.send(running.gen)
            except StopIteration as stop:
                self._finish(running, outcome.Value(stop.value))
                return
            except BaseException as exc:
                self._finish(running, outcome.Error(exc))
                return
            if isinstance(request, Hold):
                key = (request.keyspace, request.key)
                if running.held == key:
                    result = outcome.Value(None)
                    continue
                self._release(running)
                if key not in self._busy:
                    self._busy[key] = running
                    running.held = key
                    result = outcome.Value(None)
                    continue
                self._waiting.setdefault(key, collections.deque()).append(running)
                return
            if isinstance(request, Batch):
                self._nursery.start_soon(self._run_batch, running, request)
                return
            if isinstance(request, Fork):
                self._release(running)
                self._fork(running, request)
                return
            if request.is_write:
                key = (request.keyspace, request.key)
                if running.held != key:
                    self._release(running)
                    if key in self._busy:
                        running.parked = request
                        self._waiting.setdefault(key, collections.deque()).append(running)
                        return
                    self._busy[key] = running
                    running.held = key
            self._nursery.start_soon(self._run_op, running, request)
            return

    def _fork(self, parent: _Running, fork: Fork) -> None:
        results: list[outcome.Outcome[Any] | None] = [None] * len(fork.flows)
        pending = len(fork.flows)
        if not pending:
            self._ready.append((parent, outcome.Value([])))
            return

        def collect(i: int) -> Callable[[outcome.Outcome[Any]], None]:
            def done(result: outcome.Outcome[Any]) -> None:
                nonlocal pending
                results[i] = result
                pending -= 1
                if not pending:
                    # Resumed through the ready queue: we are inside a drain already.
                    self._ready.append((parent, outcome.Value(results)))

            return done

        # Every sub-flow is queued before any runs, so each reaches its first store call
        # (and puts it in flight) before the parent could possibly resume.
        for i, flow in enumerate(fork.flows):
            child = _Running(flow, collect(i), context=parent.context)
            self._ready.append((child, outcome.Value(None)))

    def _finish(self, running: _Running, result: outcome.Outcome[Any]) -> None:
        self._release(running)
        running.done(result)

    def _release(self, running: _Running) -> None:
        key = running.held
        if key is None:
            return
        running.held = None
        del self._busy[key]
        queue = self._waiting.get(key)
        if not queue:
            self._waiting.pop(key, None)
            return
        nxt = queue.popleft()
        if not queue:
            del self._waiting[key]
        self._busy[key] = nxt
        nxt.held = key
        if nxt.parked is not None:
            op, nxt.parked = nxt.parked, None
            self._nursery.start_soon(self._run_op, nxt, op)
        else:
            self._ready.append((nxt, outcome.Value(None)))

    def _resume(self, running: _Running, result: outcome.Outcome[Any]) -> None:
        self._ready.append((running, result))
        self._drain()

    # -- I/O tasks ---------------------------------------------------------------------------

    async def _call(
        self, op: Op, context: Context | None
    ) -> Entry | list[Entry] | WriteResult | None:
        # A listing's cost grows with the job, so it gets a longer bound than a single call.
        timeout = self._timeout * (LIST_TIMEOUT_FACTOR if op.kind == "list" else 1)
        # I/O tasks inherit the loop's context; a write belongs to the trace of the call that
        # asked for it (a handler's commit), or starts its own.
        with attached(context), trio.move_on_after(timeout) as scope:
            if op.kind == "get":
                return await self._store.get(op.keyspace, op.key)
            if op.kind == "list":
                return await self._store.list(op.keyspace, op.key)
            return await fenced.write(
                self._store,
                self._scope,
                op.operation or op.kind,
                op.kind,
                op.keyspace,
                op.key,
                op.value,
                expected=op.expected,
                split=op.split,
                epoch=op.epoch,
            )
        assert scope.cancelled_caught
        raise StoreUnavailable(
            f"{op.kind} of {op.key!r} took longer than {timeout} s (op_timeout); "
            "its outcome is unknown"
        )

    async def _run_op(self, running: _Running, op: Op) -> None:
        try:
            result: outcome.Outcome[Any] = outcome.Value(await self._call(op, running.context))
        except (StoreUnavailable, StoreError) as exc:
            result = outcome.Error(exc)
        self._post(lambda: self._resume(running, result))

    async def _run_batch(self, running: _Running, batch: Batch) -> None:
        results: list[Any] = [None] * len(batch.ops)
        limiter = trio.CapacityLimiter(BATCH_CONCURRENCY)

        async def one(i: int, op: Op) -> None:
            async with limiter:
                try:
                    results[i] = await self._call(op, running.context)
                except (StoreUnavailable, StoreError) as exc:
                    results[i] = exc

        async with trio.open_nursery() as nursery:
            for i, op in enumerate(batch.ops):
                nursery.start_soon(one, i, op)
        self._post(lambda: self._resume(running, outcome.Value(results)))
