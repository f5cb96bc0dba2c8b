"""The machine engine's flow driver: the runtime driver's rules, on callbacks.

:class:`FlowRunner` performs the store requests of the machine's flows
(:mod:`spate._core.flows`) over a worker's :class:`~spate_testing.sim.model.Link` and resumes
each flow with its results, as :class:`spate._runtime.driver.Driver` does with Trio tasks: a
flow is resumed synchronously with each result, so its decisions run against the machine's
current state with nothing interleaved; at most one write per key is in flight, writes to
different keys overlap, a :class:`~spate._core.flows.Fork` runs its sub-flows side by side and
a :class:`~spate._core.flows.Batch` keeps up to :data:`BATCH_CONCURRENCY` writes in flight.
(Spans and write metrics are the runtime's; the model store records every write instead.)
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import attrs
import outcome

from spate._core.flows import Batch, Flow, Fork, Hold, Op
from spate._runtime.driver import BATCH_CONCURRENCY
from spate.store import Keyspace
from spate_testing.sim.model import Link

__all__ = ["FlowRun", "FlowRunner"]

Guard = Callable[[Callable[[], None]], Callable[[], None]]
"""Wraps a callback of the worker process (skipped once it stopped, fatal errors kill it)."""


@attrs.define(eq=False)
class FlowRun:
    """One flow in progress: where it stands and what it holds."""

    gen: Flow[Any]
    done: Callable[[outcome.Outcome[Any]], None]
    held: tuple[Keyspace, str] | None = None
    parked: Op | None = None
    dropped: bool = False


class FlowRunner:
    """The runtime driver's rules, on callbacks: one write per key in flight, many keys at once.

    A flow is resumed synchronously with each result, so its decisions run against the
    machine's current state with nothing interleaved. (Spans and metrics of fenced writes are
    the runtime's; the simulation counts writes only.)
    """

    def __init__(
        self,
        link: Link,
        guard: Guard,
        soon: Callable[[Callable[[], None]], object],
    ) -> None:
        self._link = link
        self._guard = guard
        self._soon = soon
        self._holders: dict[tuple[Keyspace, str], FlowRun] = {}
        self._waiting: dict[tuple[Keyspace, str], collections.deque[FlowRun]] = {}

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        """Whether a flow holds ``key`` or waits for it."""
        k = (keyspace, key)
        return k in self._holders or bool(self._waiting.get(k))

    def start(self, flow: Flow[Any], done: Callable[[outcome.Outcome[Any]], None]) -> FlowRun:
        """Run ``flow`` until its first wait; ``done`` gets its outcome when it ends."""
        run = FlowRun(flow, done)
        self._advance(run, outcome.Value(None))
        return run

    def drop(self, run: FlowRun) -> None:
        """Abandon ``run`` if it waits for a key (its caller left); nothing of it was written."""
        for key, queue in list(self._waiting.items()):
            if run in queue:
                queue.remove(run)
                if not queue:
                    del self._waiting[key]
                run.dropped = True
                run.gen.close()

    def _advance(self, run: FlowRun, result: outcome.Outcome[Any]) -> None:
        while True:
            if run.dropped:
                return
            try:
                request = result.send(run.gen)
            except StopIteration as stop:
                return self._finish(run, outcome.Value(stop.value))
            except BaseException as exc:  # the flow's exception is its outcome
                return self._finish(run, outcome.Error(exc))
            if isinstance(request, Hold):
                key = (request.keyspace, request.key)
                if run.held == key:
                    result = outcome.Value(None)
                    continue
                self._release(run)
                if key not in self._holders:
                    self._holders[key] = run
                    run.held = key
                    result = outcome.Value(None)
                    continue
                self._waiting.setdefault(key, collections.deque()).append(run)
                return
            if isinstance(request, Batch):
                return self._batch(run, request)
            if isinstance(request, Fork):
                self._release(run)
                return self._fork(run, request)
            if request.is_write:
                key = (request.keyspace, request.key)
                if run.held != key:
                    self._release(run)
                    if key in self._holders:
                        run.parked = request
                        self._waiting.setdefault(key, collections.deque()).append(run)
                        return
                    self._holders[key] = run
                    run.held = key
            self._call(run, request)
            return

    def _call(self, run: FlowRun, op: Op) -> None:
        self._link.call(op, lambda result: self._guard(lambda: self._advance(run, result))())

    def _finish(self, run: FlowRun, result: outcome.Outcome[Any]) -> None:
        self._release(run)
        run.done(result)

    def _release(self, run: FlowRun) -> None:
        key = run.held
        if key is None:
            return
        run.held = None
        del self._holders[key]
        queue = self._waiting.get(key)
        if not queue:
            self._waiting.pop(key, None)
            return
        nxt = queue.popleft()
        if not queue:
            del self._waiting[key]
        self._holders[key] = nxt
        nxt.held = key
        if nxt.parked is not None:
            op, nxt.parked = nxt.parked, None
            self._call(nxt, op)
        else:
            # Resumed on a turn of its own, as the runtime resumes it on its loop task.
            self._link_soon(lambda: self._advance(nxt, outcome.Value(None)))

    def _link_soon(self, fn: Callable[[], None]) -> None:
        self._soon(self._guard(fn))

    def _fork(self, parent: FlowRun, fork: Fork) -> None:
        results: list[outcome.Outcome[Any] | None] = [None] * len(fork.flows)
        pending = len(fork.flows)
        if not pending:
            return self._advance(parent, outcome.Value([]))

        def collect(i: int) -> Callable[[outcome.Outcome[Any]], None]:
            def done(result: outcome.Outcome[Any]) -> None:
                nonlocal pending
                results[i] = result
                pending -= 1
                if not pending:
                    self._link_soon(lambda: self._advance(parent, outcome.Value(results)))

            return done

        for i, flow in enumerate(fork.flows):
            self.start(flow, collect(i))

    def _batch(self, run: FlowRun, batch: Batch) -> None:
        ops = batch.ops
        results: list[Any] = [None] * len(ops)
        state = {"next": 0, "left": len(ops)}
        if not ops:
            return self._advance(run, outcome.Value(results))

        def take() -> None:
            i = state["next"]
            if i >= len(ops):
                return
            state["next"] = i + 1
            self._link.call(ops[i], lambda result: self._guard(lambda: landed(i, result))())

        def landed(i: int, result: outcome.Outcome[Any]) -> None:
            value = result.error if isinstance(result, outcome.Error) else result.unwrap()
            results[i] = value
            if batch.landed is not None:
                batch.landed(i, value)
            state["left"] -= 1
            if state["left"] == 0:
                self._advance(run, outcome.Value(results))
            else:
                take()

        for _ in range(min(BATCH_CONCURRENCY, len(ops))):
            take()
