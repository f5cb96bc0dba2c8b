"""One simulated worker process: a coordination machine, driven by callbacks instead of tasks.

:class:`SimWorker` does for a :class:`~spate._core.machine.Machine` what the Trio runtime
(:mod:`spate._runtime`) and :func:`~spate.run_worker` do for it in production, with
every wait turned into a callback on the simulation's
:class:`~spate_testing.sim._clockwork.Scheduler`:

- *effects*: flows run on a small driver with the runtime's per-key serialisation
  (:mod:`spate_testing.sim._flowrunner`), events go to the handlers
  (:mod:`spate_testing.sim._handlers`), wake-ups become timers, the planner is
  called at the next turn;
- *inputs*: watch snapshots and events from the worker's :class:`~spate_testing.sim._model.Link`
  (re-watched with the runtime's backoff when they break), the heartbeat on its jittered
  period, reconcile and replan on theirs; each input is followed by a step unless it changed
  nothing, as in the runtime's loop;
- *startup*: join the job (the plan record's fingerprint) and announce presence, each retried
  with the runtime's capped backoff and budget;
- *the handlers*: one per gained split, doing the workload's steps with one commit each,
  handing the split back at a revocation, failing it when poisoned, cancelled when it is lost;
- *ending*: a verdict (the worker steps down and stops), a graceful leave (handlers cancelled,
  every split handed back, presence deleted), a kill, or a crash.

The machine is the real one, with its clock and nonce injected: everything it decides is what
it would decide in production. What this module models is only the runtime around it, which
the Trio-level simulator (:mod:`spate_testing.sim._fleet`) exercises for real.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import outcome

from spate import (
    AllComplete,
    Config,
    Event,
    FatalCoordinationError,
    PlanContext,
    Planner,
    Stalled,
    StoreUnavailable,
)
from spate._core.backoff import RETRY_BACKOFF, REWATCH_BACKOFF, Backoff
from spate._core.flows import Flow
from spate._core.machine import Machine
from spate._core.membership.startup import Retry, StartupStep, StartupTries
from spate._core.records import UnreadableRecord
from spate._core.view.scopes import WatchScope
from spate.store import Delete, Entry, EphemeralSemantics, Keyspace, Put, WatchEvent
from spate.telemetry._context import Context
from spate_testing.sim import _history as h
from spate_testing.sim._clockwork import Scheduler, Timer
from spate_testing.sim._flowrunner import FlowRunner
from spate_testing.sim._handlers import Handlers, SplitHooks
from spate_testing.sim._model import Link
from spate_testing.sim._recorder import RecordingMetrics
from spate_testing.sim._session import SimSession
from spate_testing.sim._workload import Workload

__all__ = ["SimWorker", "WorkerState"]

WorkerState = Literal["starting", "running", "leaving", "killed", "verdict", "left", "crashed"]


class SimWorker:
    """One incarnation of a worker process, driven by the scheduler (see the module doc)."""

    def __init__(
        self,
        *,
        scheduler: Scheduler,
        link: Link,
        history: h.History,
        actor: str,
        instance: str,
        job: str,
        workload: Workload,
        planner: Planner,
        config: Config,
        fingerprint: str,
        leave_deadline: float,
        metrics: RecordingMetrics,
        nonce: str,
        on_exit: Callable[[SimWorker, BaseException | None], None],
        hooks: SplitHooks | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.link = link
        self.history = history
        self.actor = actor
        self.instance = instance
        self.workload = workload
        self.metrics = metrics
        self.leave_deadline = leave_deadline
        self.on_exit = on_exit
        self.state: WorkerState = "starting"
        self.stopped = False
        self.config = config
        assert config.lease_duration is not None
        assert config.op_timeout is not None
        self.lease = config.lease_duration
        self.op_timeout = config.op_timeout
        self.session = SimSession(
            link,
            keeps_keys=link.model.semantics is EphemeralSemantics.SESSION,
            ttl=self.lease,
            clock=scheduler.now,
            later=self.later,
            guard=self.guarded,
        )
        self.machine = Machine(
            job=job,
            instance=instance,
            planner=planner,
            config=config,
            fingerprint=fingerprint,
            metrics=metrics,
            locality="",
            nonce=nonce,
            clock=scheduler.now,
            wall_ms=lambda: int(scheduler.now() * 1000),
            max_value_size=1024 * 1024,
            session=self.session,
            effects=self,
        )
        self.flows = FlowRunner(
            link,
            self.guarded,
            scheduler.soon,
            lease=self.session.lease_for_write,
            redeliver=lambda keyspace, event: self.watch_event(keyspace, event, hold=False),
        )
        self.ready = False
        self._opened = False
        self._watches: tuple[WatchScope, ...] = ()
        self._watching: dict[WatchScope, _Watching] = {}
        self._alarm: Timer | None = None
        self._step_soon = False
        self._leaving: tuple[list[str], Timer] | None = None
        """While leaving: the splits handed back, and the leave deadline's timer."""
        self._leading = False
        """Whether this worker leads, as the history last recorded (see :class:`h.Leading`)."""
        self.handlers = Handlers(
            scheduler=scheduler,
            history=history,
            actor=actor,
            machine=self.machine,
            flows=self.flows,
            workload=workload,
            later=self.later,
            active=lambda: self.state == "running",
            on_verdict=self._on_verdict,
            request_step=self.request_step,
            hooks=hooks,
        )

    @property
    def leading(self) -> bool:
        """Whether this worker leads the job now (as its Leading events say)."""
        return self._leading

    # -- the guard: every callback of this process runs through it ----------------------------

    def guarded(self, fn: Callable[[], None]) -> Callable[[], None]:
        """``fn`` as a callback of this process: skipped once it stopped; a raise kills it."""

        def run() -> None:
            if self.stopped:
                return
            try:
                fn()
            except UnreadableRecord as exc:
                self.die(FatalCoordinationError(str(exc)))
            except Exception as exc:
                self.die(exc)

        return run

    def later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` as a callback of this process ``delay`` seconds from now."""
        return self.scheduler.later(delay, self.guarded(fn))

    def _soon(self, fn: Callable[[], None]) -> Timer:
        return self.scheduler.soon(self.guarded(fn))

    # -- the machine's effects ----------------------------------------------------------------

    def start(
        self,
        flow: Flow[Any],
        done: Callable[[outcome.Outcome[Any]], None],
        context: Context | None = None,
    ) -> None:
        """Run ``flow`` on the driver."""
        self.flows.start(flow, done)

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        """Whether a flow holds ``key`` or waits for it."""
        return self.flows.busy(keyspace, key)

    def emit(self, event: Event) -> None:
        """Hand ``event`` to the handlers (dispatched at the next turn)."""
        self.handlers.emit(event)

    def wake_at(self, deadline: float) -> None:
        """Step again by ``deadline``."""
        if self._alarm is not None and self._alarm.pending and self._alarm.due <= deadline:
            return
        if self._alarm is not None:
            self._alarm.cancel()
        self._alarm = self.scheduler.at(deadline, self.guarded(lambda: self.input(_nothing)))

    def request_step(self) -> None:
        """Step at the next turn."""
        if not self._step_soon:
            self._step_soon = True

            def step() -> None:
                self._step_soon = False
                self.input(_nothing)

            self._soon(step)

    def run_planner(
        self,
        planner: Planner,
        ctx: PlanContext,
        deliver: Callable[[outcome.Outcome[Any]], None],
    ) -> Timer:
        """Call the (synchronous) planner at the next turn and deliver its outcome as an input."""

        def call() -> None:
            result = outcome.capture(planner, ctx)
            self.input(lambda: deliver(result))

        return self._soon(call)

    # -- inputs --------------------------------------------------------------------------------

    def input(self, fn: Callable[[], bool | None]) -> None:
        """Run one input, then step unless it changed nothing (the runtime loop's rule)."""
        changed = fn() is not False
        machine = self.machine
        if machine.ready and not self.ready:
            self.ready = True
            self.state = "running"
            self.handlers.dispatch_pending()
        if changed and self.ready:
            machine.step()
        # It leads from the first moment its machine says so until it keeps a follower's
        # watches again (a deposed leader closes the leader's watches after its next step).
        if (machine.leading or machine.scopes.whole_job) is not self._leading:
            self._note_leading(not self._leading)
        if self._opened and machine.watches is not self._watches and not self.stopped:
            self._sync_watches()
        if self._leaving is not None:
            self._check_handed_over()

    def _note_leading(self, leading: bool) -> None:
        self._leading = leading
        self.history.append(h.Leading(at=self.scheduler.now(), actor=self.actor, leading=leading))

    # -- startup -------------------------------------------------------------------------------

    def begin(self) -> None:
        """Start the process: the machine's startup sequence, then watch and tick."""
        # No probe: the model store is the reference the probe would check a store against,
        # and probing it proves nothing.
        steps = [step for step in self.machine.startup_steps if step.name != "probe"]
        self._startup_step(steps, 0)

    def _start_step(
        self, step: StartupStep, done: Callable[[outcome.Outcome[Any]], None]
    ) -> Callable[[], None]:
        """Start one try of ``step``; returns how to abandon it (its time ran out)."""
        if step.name == "session":
            self.session.open(done)
            return _nothing  # an abandoned grant only leaves a lease to expire
        run = self.flows.start(self.machine.startup_flow(step), done)
        return lambda: self.flows.drop(run)

    def _startup_step(
        self, steps: list[StartupStep], index: int, tries: StartupTries | None = None
    ) -> None:
        if index == len(steps):
            return self._open()
        step = steps[index]
        current = tries or self.machine.startup_tries(step)
        settled = {"done": False}

        def failed(exc: BaseException) -> None:
            delay = current.failed(exc)  # the last try raises FatalCoordinationError
            self.later(delay, lambda: self._startup_step(steps, index, current))

        def done(result: outcome.Outcome[Any]) -> None:
            if settled["done"]:
                return
            settled["done"] = True
            watchdog.cancel()
            if isinstance(result, outcome.Error):
                if isinstance(result.error, StoreUnavailable | Retry):
                    return failed(result.error)
                result.unwrap()
            self._startup_step(steps, index + 1)

        timeout = self.machine.startup_timeout(self.op_timeout)

        def too_slow() -> None:
            if not settled["done"]:
                settled["done"] = True
                abandon()
                failed(StoreUnavailable(f"{step.what} took longer than {timeout:g} s"))

        watchdog = self.later(timeout, too_slow)
        abandon = self._start_step(step, done)

    def _open(self) -> None:
        self._opened = True
        self._sync_watches()
        self._heartbeat(0)
        machine = self.machine
        reconcile = machine.reconcile_interval(
            expiry_reaches_watchers=not self.link.rates.silent_expiry
        )
        self._every(reconcile, lambda: self.input(machine.reconcile))
        self._every(machine.replan_interval, lambda: self.input(machine.replan_tick))

    # -- pumps and tickers ---------------------------------------------------------------------

    def watch_event(self, keyspace: Keyspace, event: Put | Delete, *, hold: bool = True) -> None:
        """A live watch event: an input unless the machine says it needs none (the runtime's)."""
        fn = self.machine.watch_input(keyspace, event, self.flows.hold_back if hold else None)
        if fn is not None:
            self.guarded(lambda: self.input(fn))()

    def _sync_watches(self) -> None:
        """Open and close watches to match the machine's wish (as the runtime's pumps do)."""
        wanted = self.machine.watches
        self._watches = wanted
        for scope in [s for s in self._watching if s not in wanted]:
            self._watching.pop(scope).stop()
        for scope in wanted:
            if scope not in self._watching:
                self._watch(scope, Backoff.of(REWATCH_BACKOFF))

    def _watch(self, scope: WatchScope, backoff: Backoff) -> None:
        """Open the watch ``scope`` (as the runtime's watch pump: re-opened on a break)."""
        if self.stopped or self.machine.watches is not self._watches or scope not in self._watches:
            return
        watching = _Watching(self, scope, backoff)
        self._watching[scope] = watching
        self.input(partial(self.machine.watch_opening, scope))
        # That input steps the machine, which may stop wanting this watch (a leader deposed
        # at the instant its re-watch came due): then it is already stopped, and opening it
        # would leak a watch nobody closes (the runtime's pump is cancelled before it opens).
        if not watching.ended:
            watching.open()

    def _heartbeat(self, round_: int) -> None:
        def beat() -> None:
            self.input(self.machine.heartbeat)
            self.session.check()  # a lost session is replaced (a new generation)
            self._heartbeat(round_ + 1)

        self.later(self.machine.heartbeat_delay(round_), beat)

    def _every(self, interval: float, fn: Callable[[], None]) -> None:
        def tick() -> None:
            fn()
            self._every(interval, fn)

        self.later(interval, tick)

    # -- events and handlers -------------------------------------------------------------------

    # -- ending --------------------------------------------------------------------------------

    def _on_verdict(self, verdict: AllComplete | Stalled) -> None:
        self._wait_idle(self.scheduler.now() + self.config.drain_deadline)

    def _wait_idle(self, until: float) -> None:
        # Every split is finished: a handler still running is one whose last commit just
        # landed; let it end in peace (bounded by the drain deadline), then step down.
        if self.handlers.running and self.scheduler.now() < until:
            self.later(0.05, lambda: self._wait_idle(until))
            return
        self.handlers.cancel_all()
        verdict = self.handlers.verdict
        assert verdict is not None
        deadline = self.later(self.leave_deadline, lambda: self._finish_verdict(verdict))

        def depart() -> None:
            def done(result: outcome.Outcome[Any]) -> None:
                error = result.unwrap()
                if isinstance(error, StoreUnavailable):
                    self.later(backoff.delay(), depart)
                    return
                deadline.cancel()
                self._finish_verdict(verdict)

            self.flows.start(self.machine.depart_flow(), done)

        backoff = Backoff.of(RETRY_BACKOFF)
        depart()

    def _finish_verdict(self, verdict: AllComplete | Stalled) -> None:
        if self.stopped:
            return
        self.state = "verdict"
        stalled = verdict if isinstance(verdict, Stalled) else None
        self.history.append(
            h.Verdict(
                at=self.scheduler.now(),
                actor=self.actor,
                all_complete=stalled is None,
                completed=None if stalled is None else stalled.completed,
                quarantined=None if stalled is None else stalled.quarantined,
            )
        )
        self.stop(None)

    def leave(self) -> None:
        """Leave gracefully (``run_worker`` cancelled): hand everything back, then stop."""
        if self.stopped or self.handlers.verdict is not None:
            return  # gone, or already stepping down after its verdict
        if self.state != "running":
            # Still starting: nothing held yet, so leaving is stopping.
            self.state = "left"
            self.stop(None)
            return
        self.state = "leaving"
        self.handlers.cancel_all()
        held = sorted(self.machine.owned)
        deadline = self.later(self.leave_deadline, lambda: self._left())

        def done(result: outcome.Outcome[Any]) -> None:
            error = result.unwrap()
            if isinstance(error, StoreUnavailable):
                deadline.cancel()
                return self._left()  # nothing could land: the keys expire instead
            self._await_new_owners(held, deadline)

        self.flows.start(self.machine.depart_flow(), done)

    def _await_new_owners(self, held: list[str], deadline: Timer) -> None:
        # As Coordinator.wait_handed_over: answered from this worker's own view, looked at
        # after every input (the runtime's loop looks after every batch of them), done once
        # every split is owned by another worker or finished, or nobody is going to take them.
        self._leaving = (held, deadline)
        self._check_handed_over()

    def _check_handed_over(self) -> None:
        if self._leaving is None:
            return
        held, deadline = self._leaving
        if self.machine.handed_over(held):
            self._leaving = None
            deadline.cancel()
            self._left()

    def _left(self) -> None:
        if not self.stopped:
            self.state = "left"
            self.stop(None)

    def kill(self) -> None:
        """SIGKILL: cut off from the store first (nothing it sent lands), then gone."""
        self.link.partition()
        self.link.thaw()
        self.state = "killed"
        self.stop(None)

    def die(self, exc: BaseException) -> None:
        """The process stopped on an error (its coordinator's fatal error, say)."""
        if self.stopped:
            return
        if self.state != "killed":
            self.state = "crashed"
        self.stop(exc)

    def stop(self, error: BaseException | None) -> None:
        """The process is gone: nothing of it runs again."""
        if self.stopped:
            return
        self.stopped = True
        self.handlers.cancel_all()
        if self.state != "killed":
            self.session.close()
        self.link.close()
        if self._leading:
            self._note_leading(False)
        if self._alarm is not None:
            self._alarm.cancel()
        self.history.append(
            self.metrics.snapshot(
                settled=self.state in ("verdict", "left"), at=self.scheduler.now()
            )
        )
        self.on_exit(self, error)


class _Watching:
    """One opening of a watch: its snapshot, its live events, and at most one re-watch."""

    def __init__(self, worker: SimWorker, scope: WatchScope, backoff: Backoff) -> None:
        self._worker = worker
        self._scope = scope
        self._keyspace = scope.keyspace
        self._backoff = backoff
        self._opened = False
        self._ended = False
        self._close: Callable[[], None] = _nothing
        self._deadline: Timer | None = None

    @property
    def ended(self) -> bool:
        """Whether this opening was stopped or broke (nothing more is opened for it)."""
        return self._ended

    def open(self) -> None:
        worker = self._worker
        scope = self._scope
        self._close = worker.link.watch(scope.keyspace, scope.key, self, exact=scope.exact)
        # Establishing the watch is bounded by the operation timeout; its live tail is not.
        self._deadline = worker.later(worker.op_timeout, self._too_slow)

    def snapshot(self, entries: list[Entry]) -> None:
        if self._ended:
            return
        self._opened = True
        if self._deadline is not None:
            self._deadline.cancel()
        self._backoff.reset()
        machine = self._worker.machine
        self._input(partial(machine.watch_snapshot, self._scope, entries))

    def event(self, event: WatchEvent) -> None:
        if self._ended:
            return
        if isinstance(event, Put | Delete):
            self._worker.watch_event(self._keyspace, event)

    def broken(self, reason: str) -> None:
        # Reported once, whichever comes first: the link breaking the watch, or the
        # opening outliving its deadline (each would otherwise start a watch of its own).
        if self._ended:
            return
        self._ended = True
        if self._deadline is not None:
            self._deadline.cancel()
        self._close()
        worker = self._worker

        def again() -> None:
            # Only if this is still the scope's opening: once the watch stopped being wanted
            # (the runtime cancels its pump, backoff sleep included), or a newer opening took
            # its place, re-watching would leave a second watch open that nothing closes.
            if worker._watching.get(self._scope) is self:
                worker._watch(self._scope, self._backoff)

        worker.later(self._backoff.delay(), again)

    def stop(self) -> None:
        """The watch is no longer wanted: close it, and open no other in its place."""
        if self._ended:
            return
        self._ended = True
        if self._deadline is not None:
            self._deadline.cancel()
        self._close()

    def _too_slow(self) -> None:
        if not self._opened:
            self.broken("opening the watch took longer than op_timeout")

    def _input(self, fn: Callable[[], bool | None]) -> None:
        worker = self._worker
        worker.guarded(lambda: worker.input(fn))()


def _nothing() -> None:
    """An input that only makes the machine step."""
