"""The rules for running flows, without the I/O: which request goes now, and who waits for a key.

A flow (:mod:`spate._core.flows`) yields requests and is resumed with their results. What to
do with each request is the same wherever flows run: a :class:`~spate._core.flows.Hold` or a
write takes its key or queues for it, a key given up passes to the first flow queued for it,
a :class:`~spate._core.flows.Fork` gives up the parent's key first, a flow that ends gives
up its key, and the watch events of a key an API call holds wait until it lets go
(:mod:`spate._core.hold_back`). :class:`FlowEngine` holds those rules once. How a store
call is made, how a batch or a fork runs, and when a flow queued for a key resumes are left
to a subclass: the Trio runtime's driver (:class:`spate._runtime.driver.Driver`, with I/O
tasks) and the simulator's (:class:`spate_testing.sim._flowrunner.FlowRunner`, with scheduled
callbacks).
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Callable
from typing import Any, Generic, TypeAlias, TypeVar

import attrs
import outcome

from spate._core.flows import Batch, Flow, Fork, Hold, Op
from spate._core.hold_back import HoldBack, Redeliver
from spate._store import Delete, Keyspace, Put

__all__ = ["BATCH_CONCURRENCY", "LIST_TIMEOUT_FACTOR", "FlowEngine", "FlowRun", "Key"]

Key: TypeAlias = tuple[Keyspace, str]

LIST_TIMEOUT_FACTOR = 10
"""A listing may take this many op_timeouts (its cost grows with the job)."""
BATCH_CONCURRENCY = 32
"""Writes of one :class:`~spate._core.flows.Batch` in flight at once (planning seeds many)."""


@attrs.define(eq=False)
class FlowRun:
    """One flow in progress: the generator, who hears its outcome, the key it holds."""

    gen: Flow[Any]
    done: Callable[[outcome.Outcome[Any]], None]
    held: Key | None = None
    parked: Op | None = None
    """A write waiting for its key (it is performed as soon as the key passes to this flow)."""
    inline: bool = False
    """Whether an API call runs the flow in its own task (its keys' events are held back)."""


R = TypeVar("R", bound="FlowRun")


class FlowEngine(abc.ABC, Generic[R]):
    """Resumes flows and keeps their keys: at most one write per key, many keys at once.

    Subclasses perform the requests: :meth:`_perform` (one store call, resuming the flow with
    its outcome later), :meth:`_run_batch`, :meth:`_run_fork`, and :meth:`_key_passed` (a flow
    that queued for a key now holds it, and must be resumed). ``redeliver`` gets the watch
    events held back for a key once its API call lets go of it (see :meth:`hold_back`).
    """

    def __init__(self, redeliver: Redeliver | None = None) -> None:
        self._holders: dict[Key, R] = {}
        self._waiting: dict[Key, collections.deque[R]] = {}
        self._held_back = HoldBack() if redeliver is None else HoldBack(redeliver)

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        """Whether a flow holds ``key`` (or waits for it)."""
        k = (keyspace, key)
        return k in self._holders or bool(self._waiting.get(k))

    def hold_back(self, keyspace: Keyspace, key: str, event: Put | Delete) -> bool:
        """Keep a watch event of ``key`` while an API call holds that key; False if not.

        The kept events go to ``redeliver`` when the call lets go of the key (the rule and the
        race it prevents: :mod:`spate._core.hold_back`).
        """
        k = (keyspace, key)
        holder = self._holders.get(k)
        return self._held_back.hold(k, event, api_call_holds=holder is not None and holder.inline)

    def _advance(self, run: R, result: outcome.Outcome[Any]) -> None:
        """Resume ``run`` with ``result`` and serve its requests until one has to wait."""
        while True:
            try:
                request = result.send(run.gen)
            except StopIteration as stop:
                self._finish(run, outcome.Value(stop.value))
                return
            except BaseException as exc:  # the flow's exception is its outcome
                self._finish(run, outcome.Error(exc))
                return
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
                self._run_batch(run, request)
                return
            if isinstance(request, Fork):
                # The parent gives up its key first: a sub-flow may need that very key.
                self._release(run)
                self._run_fork(run, request)
                return
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
            self._perform(run, request)
            return

    def _finish(self, run: R, result: outcome.Outcome[Any]) -> None:
        self._release(run)
        run.done(result)

    def _release(self, run: R) -> None:
        """Give up ``run``'s key; the first flow queued for it gets it.

        The watch events held back for the key are handed on after that.
        """
        key = run.held
        if key is None:
            return
        self._pass_key(run, key)
        self._held_back.let_go(key)

    def _pass_key(self, run: R, key: Key) -> None:
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
            self._perform(nxt, op)
        else:
            self._key_passed(nxt)

    def _leave_queue(self, run: R, key: Key) -> bool:
        """Take ``run`` out of the queue for ``key``; False if it was not queued there."""
        queue = self._waiting.get(key)
        if queue is None or run not in queue:
            return False
        queue.remove(run)
        if not queue:
            del self._waiting[key]
        return True

    # -- what a subclass performs -------------------------------------------------------------

    @abc.abstractmethod
    def _perform(self, run: R, op: Op) -> None:
        """Make the store call ``op`` and resume ``run`` with its outcome, later."""

    @abc.abstractmethod
    def _run_batch(self, run: R, batch: Batch) -> None:
        """Run ``batch``'s ops and resume ``run`` with their results, later."""

    @abc.abstractmethod
    def _run_fork(self, run: R, fork: Fork) -> None:
        """Run ``fork``'s flows side by side and resume ``run`` with their outcomes, later."""

    @abc.abstractmethod
    def _key_passed(self, run: R) -> None:
        """``run`` queued for a key (a Hold) and now holds it: resume it, later."""
