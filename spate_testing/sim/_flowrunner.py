"""The machine engine's flow driver: the runtime's flow rules, on callbacks.

:class:`FlowRunner` performs the store requests of the machine's flows
(:mod:`spate._core.flows`) over a worker's :class:`~spate_testing.sim._model.Link` and resumes
each flow with its results. The rules (a flow is resumed synchronously with each result; at
most one write per key is in flight; a key passes to the first flow queued for it) are the
production driver's own: both are a :class:`spate._core.flow_engine.FlowEngine`. Only the
performing differs: a store call is a call on the link, a :class:`~spate._core.flows.Fork`'s
sub-flows and a :class:`~spate._core.flows.Batch`'s ops (up to the driver's
``BATCH_CONCURRENCY`` at once) are in flight together, and a flow that gets a key resumes at
the scheduler's next turn. (Spans and write metrics are the runtime's; the model store
records every write instead.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import outcome

from spate._core.flow_engine import BATCH_CONCURRENCY, FlowEngine, FlowRun
from spate._core.flows import Batch, Flow, Fork, Op
from spate._core.hold_back import Redeliver
from spate.store import Keyspace, SessionLost
from spate_testing.sim._model import Link

__all__ = ["FlowRunner"]

Guard = Callable[[Callable[[], None]], Callable[[], None]]
"""Wraps a callback of the worker process (skipped once it stopped, fatal errors kill it)."""


class FlowRunner(FlowEngine[FlowRun]):
    """Runs one worker's flows over its link (see the module docstring)."""

    def __init__(
        self,
        link: Link,
        guard: Guard,
        soon: Callable[[Callable[[], None]], object],
        *,
        lease: Callable[[], int | None] = lambda: None,
        redeliver: Redeliver | None = None,
    ) -> None:
        super().__init__(redeliver)
        self._link = link
        self._guard = guard
        self._soon = soon
        self._lease = lease

    def start(self, flow: Flow[Any], done: Callable[[outcome.Outcome[Any]], None]) -> FlowRun:
        """Run ``flow`` until its first wait; ``done`` gets its outcome when it ends."""
        run = FlowRun(flow, done)
        self._advance(run, outcome.Value(None))
        return run

    def drop(self, run: FlowRun) -> None:
        """Abandon ``run`` if it waits for a key (its caller left); nothing of it was written.

        As an API call whose caller is cancelled while it waits for a key: it leaves the
        queue and its flow is closed. A flow with a call in flight runs on.
        """
        for key in list(self._waiting):
            if self._leave_queue(run, key):
                run.gen.close()
                return

    def _perform(self, run: FlowRun, op: Op) -> None:
        lease = None
        if op.keyspace is Keyspace.EPHEMERAL and op.method in ("create", "update"):
            # An ephemeral write names the session's lease; a lost session refuses it before
            # anything is sent (as the etcd adapter does).
            try:
                lease = self._lease()
            except SessionLost as exc:
                error: outcome.Outcome[Any] = outcome.Error(exc)
                self._later(lambda: self._advance(run, error))
                return
        self._link.call(
            op, lambda result: self._guard(lambda: self._advance(run, result))(), lease=lease
        )

    def _key_passed(self, run: FlowRun) -> None:
        # Resumed on a turn of its own, as the runtime resumes it on its loop task.
        self._later(lambda: self._advance(run, outcome.Value(None)))

    def _later(self, fn: Callable[[], None]) -> None:
        self._soon(self._guard(fn))

    def _run_fork(self, parent: FlowRun, fork: Fork) -> None:
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
                    self._later(lambda: self._advance(parent, outcome.Value(results)))

            return done

        for i, flow in enumerate(fork.flows):
            self.start(flow, collect(i))

    def _run_batch(self, run: FlowRun, batch: Batch) -> None:
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
