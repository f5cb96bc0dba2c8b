"""The machine engine's handlers: the workload's work per gained split, as run_worker runs it.

:class:`Handlers` turns a worker's events into handlers the way
:func:`spate.run_worker` does: a :class:`~spate.Gained` split gets a handler
doing :meth:`Workload.handle <spate_testing.sim._workload.Workload.handle>`'s steps (one commit
each, retried with the runtime's backoff while the store is unavailable); a revocation makes it
return at the next step, and the split is handed back (a stubborn split's handler declines the
revocation instead, which forces it); a poison split fails halfway, and the
failure is reported; a :class:`~spate.Lost` split's handler is cancelled at once. Gains,
acknowledged commits and endings go to the history exactly as the Trio engine's recorder
writes them.

A splittable workload's handler also splits at commit points, as the workload's does: a
:class:`~spate.SplitRequested` event marks its handler asked, and the split is the machine's
one fenced write (:meth:`Machine.split_flow <spate._core.machine.Machine.split_flow>`), retried
with the runtime's backoff while the store is unavailable (as :meth:`SplitHandle.split
<spate.SplitHandle.split>` retries it: a split that did land is recognised). Each call's end is
a :class:`~spate_testing.sim._history.Split` event; the :class:`SplitHooks` let the chaos
driver strike around it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, Literal, Protocol

import attrs
import outcome

from spate import (
    AllComplete,
    Event,
    Fenced,
    Gained,
    Lost,
    Progress,
    RevokeRequested,
    SplitRequested,
    Stalled,
    StoreUnavailable,
)
from spate._core.backoff import RETRY_BACKOFF, Backoff
from spate._core.flow_engine import FlowRun
from spate._core.flows import Flow
from spate._core.machine import Machine
from spate_testing.sim import _history as h
from spate_testing.sim._clockwork import Scheduler, Timer
from spate_testing.sim._flowrunner import FlowRunner
from spate_testing.sim._history import range_descriptor
from spate_testing.sim._workload import Workload

__all__ = ["Handler", "Handlers", "SplitHooks"]


class SplitHooks(Protocol):
    """Where the chaos driver hears of a worker's splitting (see :class:`FleetActions`)."""

    def splitting(self, actor: str) -> None:
        """``actor``'s handler is about to send a split write."""
        ...

    def split_done(self, actor: str) -> None:
        """``actor``'s handler heard its split landed (before it commits again)."""
        ...

    def split_asked(self, actor: str) -> None:
        """``actor``'s handler was told the leader asks it to split."""
        ...


class _NoHooks:
    def splitting(self, actor: str) -> None:
        pass

    def split_done(self, actor: str) -> None:
        pass

    def split_asked(self, actor: str) -> None:
        pass


@attrs.define(eq=False)
class Handler:
    """One split's handler: the workload's position in it, and what it waits for."""

    split: str
    epoch: int
    steps: int
    """Where its work ends (the end of its range, for a splittable workload)."""
    position: int
    stubborn: bool = False
    start: int = 0
    """Where its work starts (its range's start; 0 for steps)."""
    asked: bool = False
    """The leader asked it to split (a SplitRequested since its last split)."""
    splitting: tuple[int, bool] | None = None
    """The split point of the split call in flight, and whether it was asked."""
    revoke: bool = False
    declined: bool = False
    returned: bool = False
    """The handler's own code ended (its HandlerEnded is recorded); a settle may follow."""
    retired: bool = False
    """Nothing more happens for it (its results, if any arrive, are ignored)."""
    timer: Timer | None = None
    call: FlowRun | None = None
    backoff: Backoff | None = None


class Handlers:
    """The running handlers of one worker, fed by its events (see the module docstring)."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        history: h.History,
        actor: str,
        machine: Machine,
        flows: FlowRunner,
        workload: Workload,
        later: Callable[[float, Callable[[], None]], Timer],
        active: Callable[[], bool],
        on_verdict: Callable[[AllComplete | Stalled], None],
        request_step: Callable[[], None],
        hooks: SplitHooks | None = None,
    ) -> None:
        self._hooks: SplitHooks = hooks or _NoHooks()
        self._scheduler = scheduler
        self._history = history
        self._actor = actor
        self._machine = machine
        self._flows = flows
        self._workload = workload
        self._later = later
        self._active = active
        self._on_verdict = on_verdict
        self._request_step = request_step
        self.running: dict[str, Handler] = {}
        """Handlers whose split is still this worker's to finish, by split."""
        self.verdict: AllComplete | Stalled | None = None
        """The verdict, once it arrived (no event is dispatched after it)."""
        self._events: collections.deque[Event] = collections.deque()
        self._dispatching = False

    def emit(self, event: Event) -> None:
        """Queue ``event``; it is dispatched at the next turn."""
        self._events.append(event)
        self.dispatch_pending()

    def dispatch_pending(self) -> None:
        """Dispatch the queued events at the next turn (once the worker is active)."""
        if self._events and not self._dispatching:
            self._dispatching = True
            self._later(0.0, self._dispatch)

    def _record(self, kind: Callable[..., h.HistoryEvent], handler: Handler, **fields: Any) -> None:
        """Append a ``kind`` event about ``handler`` (its split and epoch, now, this actor)."""
        self._history.append(
            kind(
                at=self._scheduler.now(),
                actor=self._actor,
                split=handler.split,
                epoch=handler.epoch,
                **fields,
            )
        )

    def cancel_all(self) -> None:
        """Cancel every handler (the worker stops working)."""
        for handler in list(self.running.values()):
            self._cancel(handler)

    def _dispatch(self) -> None:
        self._dispatching = False
        while self._events and self.verdict is None and self._active():
            event = self._events.popleft()
            if isinstance(event, Gained):
                self._gain(event)
            elif isinstance(event, Lost):
                handler = self.running.pop(event.split, None)
                if handler is not None:
                    self._cancel(handler)
            elif isinstance(event, RevokeRequested):
                handler = self.running.get(event.split)
                if handler is not None:
                    handler.revoke = True
            elif isinstance(event, SplitRequested):
                handler = self.running.get(event.split)
                if handler is not None and not handler.returned:
                    handler.asked = True
                    self._hooks.split_asked(self._actor)
            elif isinstance(event, AllComplete | Stalled):
                self.verdict = event
                self._on_verdict(event)

    def _gain(self, event: Gained) -> None:
        previous = self.running.pop(event.split, None)
        if previous is not None:
            self._cancel(previous)  # a re-gain follows a loss: never two handlers on a split
        start, end = self._workload.bounds(event.descriptor)
        watermark = event.progress.watermark
        handler = Handler(
            split=event.split,
            epoch=event.epoch,
            steps=end,
            start=start,
            position=start if watermark is None else watermark,
            stubborn=self._workload.is_stubborn(event.split),
        )
        self.running[event.split] = handler
        self._record(h.Gained, handler, watermark=event.progress.watermark)
        self._work(handler)

    def _work(self, handler: Handler) -> None:
        """The workload's loop, one step per call (see :meth:`Workload.handle`)."""
        if handler.position >= handler.steps:
            return self._end(handler, "returned", settle="release")
        if handler.revoke:
            if not handler.stubborn:
                return self._end(handler, "returned", settle="release")
            if not handler.declined:
                # It cannot stop here: the revocation is forced, and it works on until the
                # loss cancels it (SplitHandle.decline_revoke, Coordinator.decline_revoke).
                handler.declined = True
                self._machine.decline_revoke(handler.split)
                self._request_step()
        workload = self._workload
        mid = workload.split_point(
            handler.split, handler.position, handler.steps, asked=handler.asked
        )
        if mid is not None:
            handler.splitting = (mid, handler.asked)
            self._hooks.splitting(self._actor)
            return self._split(handler)
        if workload.fails_at(handler.split, handler.position, handler.steps):
            reason = f"PoisonedSplit: step {handler.position} of {handler.split} always fails"
            return self._end(handler, "raised", settle="fail", reason=reason)

        def step() -> None:
            handler.position += 1
            if load := workload.load_of(handler.split):
                try:
                    self._machine.report_load(handler.split, load)
                except Fenced:
                    pass  # lost meanwhile: the commit finds out and ends the handler
            self._commit(handler)

        handler.timer = self._later(self._workload.step_seconds, step)

    def _commit(self, handler: Handler) -> None:
        position = handler.position
        progress = Progress(
            watermark=position,
            state=str(position).encode(),
            completed=position >= handler.steps,
        )

        def done(result: outcome.Outcome[Any]) -> None:
            handler.call = None
            error = result.unwrap()  # an exception out of a commit is fatal
            if handler.retired:
                return  # cancelled meanwhile: nobody hears of this commit
            if error is None:
                handler.backoff = None
                self._record(
                    h.Acked,
                    handler,
                    watermark=progress.watermark,
                    completed=progress.completed,
                )
                if progress.completed:
                    return self._end(handler, "completed")
                return self._work(handler)
            if isinstance(error, StoreUnavailable):
                if not progress.completed and position % 2:
                    # Half the handlers move on instead of retrying the same commit: the
                    # next commit, of new progress, must build on this one if it landed.
                    return self._work(handler)
                handler.backoff = handler.backoff or Backoff.of(RETRY_BACKOFF)
                handler.timer = self._later(handler.backoff.delay(), lambda: self._commit(handler))
                return
            assert isinstance(error, Fenced), error
            self._end(handler, "fenced")

        handler.call = self._flows.start(self._machine.commit_flow(handler.split, progress), done)

    def _split(self, handler: Handler) -> None:
        """One try of the split in ``handler.splitting`` (the workload's ``split.split``)."""
        assert handler.splitting is not None
        mid, asked = handler.splitting
        primary = range_descriptor(handler.start, mid)
        residual = range_descriptor(mid, handler.steps)

        def record(how: h.SplitOutcome, rid: str | None = None) -> None:
            self._record(
                h.Split,
                handler,
                primary=primary,
                residual=residual,
                outcome=how,
                residual_id=rid,
                asked=asked,
            )

        def done(result: outcome.Outcome[Any]) -> None:
            handler.call = None
            found = result.unwrap()  # an exception out of a split is fatal
            if handler.retired:
                return  # cancelled meanwhile (recorded as abandoned then)
            if isinstance(found, StoreUnavailable):
                handler.backoff = handler.backoff or Backoff.of(RETRY_BACKOFF)
                handler.timer = self._later(handler.backoff.delay(), lambda: self._split(handler))
                return
            handler.backoff = None
            handler.splitting = None
            if isinstance(found, Fenced):
                record("fenced")
                return self._end(handler, "fenced")
            if isinstance(found, BaseException):
                raise found  # (ConfigError, ValueTooLarge: the simulator's own mistake)
            assert isinstance(found, str), found
            record("split", found)
            handler.steps = mid
            handler.asked = False  # (SplitHandle.split: a fresh, unset split_requested)
            self._hooks.split_done(self._actor)
            if not handler.retired:
                self._work(handler)

        handler.call = self._flows.start(
            self._machine.split_flow(handler.split, primary, residual, None), done
        )

    def _end(
        self,
        handler: Handler,
        how: h.HandlerHow,
        *,
        settle: Literal["release", "fail"] | None = None,
        reason: str = "",
    ) -> None:
        handler.returned = True
        self._record(h.HandlerEnded, handler, how=how)
        if settle is None:
            self._retire(handler)
            return
        # Still the worker's to finish: its hand-back (or failure) must land.
        handler.backoff = None
        self._settle(handler, settle, reason)

    def _settle(self, handler: Handler, what: Literal["release", "fail"], reason: str) -> None:
        machine = self._machine
        flow: Flow[Any]
        if what == "release":
            if not machine.holds(handler.split):
                return self._retire(handler)  # lost meanwhile (Fenced: nothing written)
            flow = machine.release_all_flow([handler.split])
        else:
            flow = machine.fail_flow(handler.split, reason)

        def done(result: outcome.Outcome[Any]) -> None:
            handler.call = None
            error = result.unwrap()
            if handler.retired:
                return
            if isinstance(error, StoreUnavailable):
                handler.backoff = handler.backoff or Backoff.of(RETRY_BACKOFF)
                handler.timer = self._later(
                    handler.backoff.delay(), lambda: self._settle(handler, what, reason)
                )
                return
            self._retire(handler)

        handler.call = self._flows.start(flow, done)

    def _retire(self, handler: Handler) -> None:
        handler.retired = True
        if self.running.get(handler.split) is handler:
            del self.running[handler.split]

    def _cancel(self, handler: Handler) -> None:
        """Cancel a handler (its split was lost, or the worker stops working)."""
        if handler.timer is not None:
            handler.timer.cancel()
        if handler.call is not None:
            self._flows.drop(handler.call)  # a call waiting for its key leaves; one in flight lands
        handler.retired = True
        if handler.splitting is not None:
            mid, asked = handler.splitting
            handler.splitting = None
            self._record(
                h.Split,
                handler,
                primary=range_descriptor(handler.start, mid),
                residual=range_descriptor(mid, handler.steps),
                outcome="abandoned",
                asked=asked,
            )
        if not handler.returned:
            handler.returned = True
            self._record(h.HandlerEnded, handler, how="cancelled")
        if self.running.get(handler.split) is handler:
            del self.running[handler.split]
