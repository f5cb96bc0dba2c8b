"""The driver: performs the store requests of flows (:mod:`spate._core.flows`) and resumes them.

Flows are resumed synchronously (no await between a result and the flow's next decision), so
each decision runs against the current state with nothing interleaved. The store calls run in
small I/O tasks, one per call in flight, and overlap freely; a write waits only for another
write to its own key (see :class:`spate._core.flows.Hold`). An API call may instead run its
flow *inline* (:meth:`Driver.run_inline`): the flow's requests are then performed in the
caller's own task, with the same per-key serialisation, and no hop through any other task.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import attrs
import outcome
import trio

from spate import _write_spans as write_spans
from spate._core.flow_engine import BATCH_CONCURRENCY, LIST_TIMEOUT_FACTOR, FlowEngine, FlowRun, Key
from spate._core.flows import Batch, Flow, Fork, Hold, Op, Page
from spate._errors import StoreError, StoreUnavailable
from spate._quote import seconds
from spate._runtime.group_commit import GroupCommit, grouping
from spate._runtime.listings import Listings
from spate._store import Delete, Entry, Keyspace, Put, Store, WriteResult, batched
from spate.telemetry._context import Context, attached

__all__ = ["Driver"]

logger = logging.getLogger("spate.flows")

T = TypeVar("T")


@attrs.define(eq=False)
class _Running(FlowRun):
    context: Context | None = None
    """The trace context of the API call that started the flow (None: internal)."""
    granted: trio.Event | None = None
    """Set when an inline flow waiting for a key was given it (inline flows only)."""


class Driver(FlowEngine[_Running]):
    """Runs flows: resumes them on the loop task, runs their store calls in I/O tasks.

    ``post`` hands a callable to the loop (the loop runs it, then steps); results come back
    that way, so a flow is only ever resumed on the loop.
    """

    def __init__(
        self,
        store: Store,
        scope: write_spans.Scope,
        *,
        nursery: trio.Nursery,
        post: Callable[[Callable[[], None]], None],
        op_timeout: float,
        redeliver: Callable[[Keyspace, Put | Delete], None] = lambda keyspace, event: None,
    ) -> None:
        self._store = store
        self._writer: write_spans.Writer = store
        self.group: GroupCommit | None = None
        """The group commit in front of a store that takes compare-and-swaps in groups."""
        if grouping(store):
            self.group = GroupCommit(batched(store), store, timeout=op_timeout)
            nursery.start_soon(self.group.run, name="spate group commit")
            self._writer = self.group
        self._scope = scope
        self._nursery = nursery
        self._post = post
        self._timeout = op_timeout
        super().__init__(redeliver)
        self._ready: collections.deque[tuple[_Running, outcome.Outcome[Any]]] = collections.deque()
        self._running = False
        # Store calls of background flows run on reusable I/O tasks, not a task per call: a
        # call goes to an idle one, and a new one is started only when none is idle (so no
        # call ever waits behind another, and a burst leaves its tasks for the next).
        self._calls_send, self._calls_receive = trio.open_memory_channel[
            Callable[[], Awaitable[None]]
        ](math.inf)
        self._idle = 0
        self.listings = Listings(store, nursery, idle=op_timeout * LIST_TIMEOUT_FACTOR)
        """The paged listings held open between their flows' page requests."""
        self.io_tasks = 0
        """I/O tasks started so far (the most calls ever in flight at once)."""

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

    def _run_fork(self, parent: _Running, fork: Fork) -> None:
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

    def _perform(self, run: _Running, op: Op) -> None:
        self._submit(partial(self._run_op, run, op))

    def _run_batch(self, run: _Running, batch: Batch) -> None:
        self._nursery.start_soon(self._batch_task, run, batch)

    def _key_passed(self, run: _Running) -> None:
        if run.granted is not None:
            run.granted.set()  # an inline flow: its caller's task resumes it
        else:
            self._ready.append((run, outcome.Value(None)))

    # -- inline flows ------------------------------------------------------------------------

    async def run_inline(self, flow: Flow[T]) -> T:
        """Run ``flow`` in the calling task: its requests are performed right here.

        This is an API call's path (a handler's commit): no hop through the loop task, no
        task per store call. Each decision of the flow still runs synchronously — Trio runs
        one task at a time, so it is as atomic as an input of the loop — and the per-key
        serialisation is the driver's own, shared with the loop's flows. Each store call of
        the flow is shielded from cancellation: a write in flight always has its outcome
        folded (a commit abandoned half-way could leave the view one revision behind its own
        write), and each is bounded by the operation timeout anyway. Waiting for a key is
        not shielded (its holder may never let go, if its loop stopped): a cancelled caller
        leaves the queue, and the flow is closed where it stood. The caller runs the
        flow in its own trace context, so its writes' spans join the caller's trace.

        A :class:`Fork` runs its sub-flows side by side in tasks of this call; a
        :class:`Batch` (the leader's) is not for API calls. Returns the flow's value; its
        exception propagates.
        """
        running = _Running(flow, _ignore, inline=True)
        # The flow is resumed directly (send, or throw a store error into it): this loop runs
        # for every commit, and wrapping each step's result in an Outcome cost a tenth of it.
        sent: Any = None
        error: StoreUnavailable | StoreError | None = None
        try:
            while True:
                try:
                    if error is None:
                        request = flow.send(sent)
                    else:
                        request, error = flow.throw(error), None
                except StopIteration as stop:
                    value: T = stop.value
                    return value
                sent = None
                if type(request) is Op:
                    if request.is_write and running.held != (request.keyspace, request.key):
                        await self._acquire_inline(running, (request.keyspace, request.key))
                    # Already in the caller's trace context: nothing to attach.
                    try:
                        sent = await self._call(request, None, inline=True)
                    except (StoreUnavailable, StoreError) as exc:
                        error = exc
                elif type(request) is Hold:
                    if running.held != (request.keyspace, request.key):
                        await self._acquire_inline(running, (request.keyspace, request.key))
                elif type(request) is Fork:
                    # The sub-flows run side by side, each in a task of this call's own
                    # nursery; the parent gives up its key first (a sub-flow may need it).
                    self._release_inline(running)
                    sent = await self._fork_inline(request)
                else:
                    raise TypeError(f"an inline flow cannot yield {request!r}")
        finally:
            self._release_inline(running)
            flow.close()  # a flow left mid-way (its caller cancelled) runs its clean-ups now

    async def _fork_inline(self, fork: Fork) -> list[outcome.Outcome[Any]]:
        results: list[outcome.Outcome[Any]] = [outcome.Value(None)] * len(fork.flows)

        async def one(i: int, flow: Flow[Any]) -> None:
            try:
                results[i] = outcome.Value(await self.run_inline(flow))
            except Exception as exc:  # the parent decides what is fatal
                results[i] = outcome.Error(exc)

        async with trio.open_nursery() as nursery:
            for i, flow in enumerate(fork.flows):
                nursery.start_soon(one, i, flow)
        return results

    async def _acquire_inline(self, running: _Running, key: Key) -> None:
        self._release_inline(running)
        if key not in self._holders:
            self._holders[key] = running
            running.held = key
            return
        running.granted = granted = trio.Event()
        queue = self._waiting.setdefault(key, collections.deque())
        queue.append(running)
        try:
            # Not shielded: the holder may never let go (a flow of a loop that stopped), and
            # nothing of this hold has been written yet, so a cancelled caller may leave.
            await granted.wait()
        except BaseException:
            if granted.is_set():
                self._release_inline(running)  # granted just as the cancellation came
            else:
                queue.remove(running)
                if not queue:
                    self._waiting.pop(key, None)
            raise
        finally:
            running.granted = None

    def _release_inline(self, running: _Running) -> None:
        self._release(running)
        if self._ready and not self._running:
            # A loop flow was waiting for the key: it resumes on the loop task, never in the
            # API caller's (an exception out of it must stop the coordinator, not the caller).
            self._post(self._drain)

    def _resume(self, running: _Running, result: outcome.Outcome[Any]) -> None:
        self._ready.append((running, result))
        self._drain()

    # -- I/O tasks ---------------------------------------------------------------------------

    def _submit(self, call: Callable[[], Awaitable[None]]) -> None:
        if self._idle:
            self._idle -= 1  # reserved: that task takes this call (or an earlier one)
        else:
            self.io_tasks += 1
            self._nursery.start_soon(self._io_task, name="spate store call")
        self._calls_send.send_nowait(call)

    def close(self) -> None:
        """Let the I/O tasks end once the calls already handed to them are done."""
        self._calls_send.close()

    async def _io_task(self) -> None:
        async for call in self._calls_receive:
            await call()
            self._idle += 1

    async def _call(
        self, op: Op, context: Context | None, *, inline: bool = False
    ) -> Entry | list[Entry] | Page | WriteResult | None:
        """Perform ``op`` within the operation timeout.

        ``inline``: in an API caller's task, shielded from its cancellation and in its own
        trace context; the timeout and the shield are then one cancel scope.
        """
        # A listing's cost grows with the job, so it gets a longer bound than a single call.
        timeout = self._timeout * (LIST_TIMEOUT_FACTOR if op.method == "list" else 1)
        with trio.CancelScope(deadline=trio.current_time() + timeout, shield=inline) as scope:
            if inline:
                return await self._store_call(op)
            # I/O tasks inherit the loop's context; a write belongs to the trace of the call
            # that asked for it (a handler's commit), or starts its own.
            with attached(context):
                return await self._store_call(op)
        assert scope.cancelled_caught
        raise _timed_out(op, timeout)

    def _store_call(
        self, op: Op, *, traced: bool | None = None
    ) -> Awaitable[Entry | list[Entry] | Page | WriteResult | None]:
        # Returns the awaitable of the call itself (one coroutine frame less per store call).
        if op.method == "get":
            return self._store.get(op.keyspace, op.key)
        if op.method == "list":
            return self._store.list(op.keyspace, op.key)
        if op.method == "list-page":
            return self.listings.page(op)
        return write_spans.write(
            self._writer,
            self._scope,
            op.operation or op.method,
            op.method,
            op.keyspace,
            op.key,
            op.value,
            expected=op.expected,
            split=op.split,
            epoch=op.epoch,
            traced=traced,
        )

    async def _run_op(self, running: _Running, op: Op) -> None:
        try:
            result: outcome.Outcome[Any] = outcome.Value(await self._call(op, running.context))
        except (StoreUnavailable, StoreError) as exc:
            result = outcome.Error(exc)
        self._post(lambda: self._resume(running, result))

    async def _batch_task(self, running: _Running, batch: Batch) -> None:
        # A plan seeds two records per split, so a batch may hold hundreds of thousands of
        # ops: a fixed pool of workers takes them in order from a shared index (a task per
        # op cost more than the write to the memory store itself).
        ops = batch.ops
        results: list[Any] = [None] * len(ops)
        landed = batch.landed
        # Decided once for the batch (looking it up costs more than a memory-store write).
        traced = write_spans.tracing()
        context = running.context
        timeout = self._timeout
        slack = timeout / 100
        following = 0

        async def worker() -> None:
            nonlocal following
            i = following
            with attached(context):
                while following < len(ops):
                    # One cancel scope for a run of ops, its deadline moved before each (a
                    # scope per op cost as much as the write): every op is bounded by
                    # op_timeout from its own start, less at most 1% (a deadline is moved
                    # only once it has fallen that far behind, since moving it costs too).
                    # A timeout ends the run; the next run opens a new scope.
                    with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                        while following < len(ops):
                            i = following
                            following += 1
                            now = trio.current_time()
                            if scope.deadline < now + timeout - slack:
                                scope.deadline = now + timeout
                            try:
                                result: Any = await self._store_call(ops[i], traced=traced)
                            except (StoreUnavailable, StoreError) as exc:
                                result = exc
                            results[i] = result
                            if landed is not None:
                                landed(i, result)
                    if scope.cancelled_caught:
                        results[i] = _timed_out(ops[i], timeout)
                        if landed is not None:
                            landed(i, results[i])

        async with trio.open_nursery() as nursery:
            for _ in range(min(BATCH_CONCURRENCY, len(ops))):
                nursery.start_soon(worker)
        self._post(lambda: self._resume(running, outcome.Value(results)))


def _timed_out(op: Op, timeout: float) -> StoreUnavailable:
    return StoreUnavailable(
        f"{op.method} of {op.key!r} took longer than {seconds(timeout)} (op_timeout); "
        "its outcome is unknown"
    )


def _ignore(result: outcome.Outcome[Any]) -> None:
    """The completion callback of an inline flow (its caller gets the result directly)."""
