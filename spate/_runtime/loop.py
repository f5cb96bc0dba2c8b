"""The Trio runtime around the machine: one loop task, the driver, timers, and API calls.

The machine (:mod:`spate._core.machine`) decides; this module feeds it and performs what it
asks. Watch pumps, tickers, the planner and the I/O tasks of flows hand the loop *inputs*
(callables, through one channel); the loop runs them one at a time and then lets the machine
*step* — unless every input of the batch said it changed nothing (the echo of an own write),
so a commit's echo costs no rule sweep. The machine's effects land here: flows go to the
:class:`~spate._runtime.driver.Driver`, events to the user's channel, wake-ups to the alarm
task, planner calls to a task of their own.

An API call (a handler's commit) does not go through the loop at all: it runs its flow
*inline*, in the caller's own task (:meth:`Runtime.call_inline`). Trio runs one task at a time,
so a synchronous call into the machine is already atomic; the caller then awaits only its own
write. Renewals and keepalives never queue behind commits: a commit holds only its own split's
record key, and a session keepalive runs on a connection of its own.
"""

from __future__ import annotations

import inspect
import math
import secrets
import sys
from collections.abc import Callable
from typing import Any

import attrs
import outcome
import trio

from spate import _write_spans as write_spans
from spate._config import Config
from spate._core.flows import Flow
from spate._core.machine import Machine
from spate._core.records import UnreadableRecord, now_ms
from spate._errors import FatalCoordinationError
from spate._events import Event
from spate._metrics import MetricsHooks
from spate._plan import Plan, PlanContext, Planner
from spate._runtime.bulk import Deferral, collector_paused
from spate._runtime.driver import Driver
from spate._runtime.session import SessionSlot
from spate._store import Delete, Keyspace, Put, Store
from spate.telemetry._context import Context

__all__ = ["Runtime"]

INPUT_BATCH = 256
"""Inputs run back to back before one step (a burst of watch events costs one step)."""

Input = Callable[[], "bool | None"]
"""An input to the loop; it answers ``False`` when it changed nothing (no step needed)."""


@attrs.define(eq=False)
class _PlannerCall:
    scope: trio.CancelScope

    def cancel(self) -> None:
        self.scope.cancel()


class Runtime:
    """One coordinator's tasks around its :class:`~spate._core.machine.Machine`."""

    def __init__(
        self,
        store: Store,
        *,
        job: str,
        instance: str,
        planner: Planner,
        config: Config,
        fingerprint: str,
        metrics: MetricsHooks,
        locality: str = "",
        nonce: str | None = None,
    ) -> None:
        assert config.lease_duration is not None
        assert config.op_timeout is not None
        self.store = store
        self.config = config
        self.op_timeout = config.op_timeout
        self.session = SessionSlot(store, op_timeout=config.op_timeout)
        self.machine = Machine(
            job=job,
            instance=instance,
            planner=planner,
            config=config,
            fingerprint=fingerprint,
            metrics=metrics,
            locality=locality,
            # The process nonce: drawn here unless the caller (the simulator) injects one.
            nonce=secrets.token_hex(16) if nonce is None else nonce,
            clock=trio.current_time,
            wall_ms=now_ms,
            max_value_size=store.capabilities.max_value_size,
            session=self.session,
            effects=self,
        )
        self.scope = write_spans.Scope(
            job, instance, store.capabilities.system, metrics, session=lambda: self.session.current
        )
        self.ready = trio.Event()
        self.probes = 0
        """Startup probes tried (each names its scratch keys after the nonce and this count)."""
        self.stopped: BaseException | None = None
        self._send, self._receive = trio.open_memory_channel[Input](math.inf)
        self.events_send, self.events_receive = trio.open_memory_channel[Event](math.inf)
        self._alarm_at = math.inf
        self._alarm_changed = trio.Event()
        self._loop_task: trio.lowlevel.Task | None = None
        self._step_requested = False
        self._bulk = Deferral()
        self._waiters: dict[trio.Event, Callable[[], bool]] = {}
        self._watches = self.machine.watches
        self._watches_moved = trio.Event()
        self.driver: Driver
        self.nursery: trio.Nursery

    # -- plumbing ----------------------------------------------------------------------------

    def attach(self, nursery: trio.Nursery) -> None:
        """Give the runtime the nursery its flows, planner runs and I/O tasks live in."""
        self.nursery = nursery
        self.driver = Driver(
            self.store,
            self.scope,
            nursery=nursery,
            post=self.post,
            op_timeout=self.op_timeout,
            redeliver=lambda keyspace, event: self.watch_event(keyspace, event, hold=False),
        )

    def post(self, fn: Input) -> None:
        """Hand ``fn`` to the loop (from any task); the loop runs it, then steps."""
        try:
            self._send.send_nowait(fn)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the loop has stopped; nothing is waiting for this input

    def watch_event(self, keyspace: Keyspace, event: Put | Delete, *, hold: bool = True) -> None:
        """A live watch event: posted to the machine, unless it needs no posting.

        The machine decides (:meth:`Machine.watch_input`): the echo of an own write that has
        landed is dropped here, costing the loop task no wake-up at all; an event of a key an
        API call of ours is writing (a commit) is held back until the call lets go of the key.
        ``hold`` is False for an event handed back so.
        """
        fn = self.machine.watch_input(keyspace, event, self.driver.hold_back if hold else None)
        if fn is not None:
            self.post(fn)

    async def watches_changed(self) -> None:
        """Return once the machine wants other watches than when last asked (leadership moved)."""
        await self._watches_moved.wait()
        self._watches_moved = trio.Event()

    def _on_loop(self) -> bool:
        return trio.lowlevel.current_task() is self._loop_task

    def request_step(self) -> None:
        """Have the machine step soon: its state changed outside the loop's inputs.

        On the loop nothing is needed (every input that changed something is followed by a
        step); from an API caller's task one empty input is posted, once until the loop steps.
        """
        if not self._step_requested and not self._on_loop():
            self._step_requested = True
            self.post(_nothing)

    # -- the machine's effects ---------------------------------------------------------------

    def start(
        self,
        flow: Flow[Any],
        done: Callable[[outcome.Outcome[Any]], None],
        context: Context | None = None,
    ) -> None:
        """Run ``flow`` through the driver, on the loop task.

        A flow the machine starts while an API call runs inline (a departing leader's
        resignation, a forced revocation) is handed to the loop rather than begun in the
        caller's task: a fatal error out of it must stop the coordinator, not the caller.
        """
        if self._on_loop():
            self.driver.start(flow, done, context)
        else:
            self.post(lambda: self.driver.start(flow, done, context))

    def busy(self, keyspace: Keyspace, key: str) -> bool:
        """Whether a flow holds ``key`` (or waits for it)."""
        return self.driver.busy(keyspace, key)

    def emit(self, event: Event) -> None:
        """Send ``event`` to the user (never blocks the loop)."""
        try:
            self.events_send.send_nowait(event)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # nobody listens any more

    def wake_at(self, deadline: float) -> None:
        """Make sure the loop steps again by ``deadline`` (time-based rules need it)."""
        if deadline < self._alarm_at:
            self._alarm_at = deadline
            self._alarm_changed.set()

    def run_planner(
        self,
        planner: Planner,
        ctx: PlanContext,
        deliver: Callable[[outcome.Outcome[Any]], None],
    ) -> _PlannerCall:
        """Call ``planner`` in a task of its own (a sync one in a thread, see Config)."""
        call = _PlannerCall(trio.CancelScope())
        self.nursery.start_soon(self._call_planner, call, planner, ctx, deliver)
        return call

    async def _call_planner(
        self,
        call: _PlannerCall,
        planner: Planner,
        ctx: PlanContext,
        deliver: Callable[[outcome.Outcome[Any]], None],
    ) -> None:
        result: outcome.Outcome[Any]
        with call.scope:
            try:
                if inspect.iscoroutinefunction(planner):
                    value: Any = await planner(ctx)
                elif _planner_in_thread(self.config.planner_thread):
                    value = await trio.to_thread.run_sync(planner, ctx, abandon_on_cancel=True)
                else:
                    value = planner(ctx)
                if inspect.isawaitable(value):
                    value = await value
                result = outcome.Value(value)
            except Exception as exc:
                result = outcome.Error(exc)
        if not call.scope.cancelled_caught:
            # Taking a plan in (checking and encoding every split) is bulk work like a
            # snapshot's fold, and as synchronous: see spate._runtime.bulk.
            splits = (
                len(result.value.splits)
                if isinstance(result, outcome.Value) and isinstance(result.value, Plan)
                else 0
            )

            def delivered() -> None:
                with collector_paused(splits):
                    deliver(result)

            self.post(delivered)

    # -- tasks -------------------------------------------------------------------------------

    async def alarm_task(self) -> None:
        """Post an empty input (so the loop steps) whenever a registered deadline passes."""
        while True:
            self._alarm_changed = trio.Event()
            with trio.move_on_at(self._alarm_at):
                await self._alarm_changed.wait()
                continue
            self._alarm_at = math.inf
            self.post(_nothing)

    async def run(self) -> None:
        """The loop: run inputs, step, until cancelled or a fatal error."""
        machine = self.machine
        self._loop_task = trio.lowlevel.current_task()
        try:
            async for fn in self._receive:
                changed = self._run_input(fn)
                for _ in range(INPUT_BATCH):
                    try:
                        fn = self._receive.receive_nowait()
                    except trio.WouldBlock:
                        break
                    changed = self._run_input(fn) or changed
                if machine.ready and not self.ready.is_set():
                    self.ready.set()
                if changed and self.ready.is_set():
                    self._step_requested = False
                    self._guarded(machine.step)
                if machine.watches is not self._watches:
                    self._watches = machine.watches
                    self._watches_moved.set()
                if self._waiters:
                    self._wake_waiters()
                self._bulk.hold(machine.bulk_records)
        except BaseException as exc:
            self.stop(exc)
            raise
        finally:
            self._bulk.release()

    def _run_input(self, fn: Input) -> bool:
        return self._guarded(fn) is not False

    def _guarded(self, fn: Input) -> bool | None:
        try:
            return fn()
        except UnreadableRecord as exc:
            raise FatalCoordinationError(str(exc)) from exc

    def heartbeat(self) -> None:
        """A heartbeat input: the machine's renewals, and a lost session replaced."""
        self.machine.heartbeat()
        self.session.check(self.nursery)

    # -- API calls ---------------------------------------------------------------------------

    async def call_inline(self, flow: Flow[Any]) -> Any:
        """Run an API call's flow in the caller's task; return what it returns.

        An exception raised out of the flow is fatal, as from any flow: it is raised here to
        the caller *and* handed to the loop, which stops the coordinator with it.
        """
        # The flow's waits are shielded (see Driver.run_inline): a cancelled caller learns of
        # its cancellation here, before anything is written.
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.stopped is not None:
            raise stopped_error(self.stopped)
        try:
            return await self.driver.run_inline(flow)
        except UnreadableRecord as exc:
            error = FatalCoordinationError(str(exc))
            self.post(_raiser(error))
            raise error from exc
        except Exception as exc:
            self.post(_raiser(exc))
            raise

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition`` holds, or once the loop has stopped.

        ``condition`` reads the machine's state: it is checked now and after every batch of
        inputs the loop runs (a watch event folded is one), so waiting costs no store call
        and no task of its own. It must not raise.
        """
        if self.stopped is not None or condition():
            return
        done = trio.Event()
        self._waiters[done] = condition
        try:
            await done.wait()
        finally:
            self._waiters.pop(done, None)

    def _wake_waiters(self) -> None:
        for done, condition in list(self._waiters.items()):
            if condition():
                del self._waiters[done]
                done.set()

    def stop(self, exc: BaseException) -> None:
        """Record why the coordinator stopped (later API calls raise it) and close the channels.

        Every :meth:`wait_until` returns: nothing it waits for can change any more.
        """
        self.stopped = exc
        self._send.close()
        self.events_send.close()
        for done in self._waiters:
            done.set()
        self._waiters.clear()


def stopped_error(cause: BaseException) -> BaseException:
    """What an API call on a stopped coordinator raises."""
    if isinstance(cause, FatalCoordinationError):
        return cause
    return FatalCoordinationError(
        "the coordinator has stopped; open a new one (open_coordinator) to keep working"
    )


def _planner_in_thread(setting: bool | None) -> bool:
    """Whether a synchronous planner runs in a worker thread (``Config.planner_thread``).

    Undecided (None), it runs in a thread unless the run's clock is a MockClock: autojump
    advances virtual time whenever every task waits, including while a thread plans, so the
    plan could come back after its leader's lease (virtually) expired and never be written.
    """
    if setting is not None:
        return setting
    # A MockClock exists only once trio.testing is imported: never import it for production.
    testing = sys.modules.get("trio.testing")
    return testing is None or not isinstance(trio.lowlevel.current_clock(), testing.MockClock)


def _nothing() -> None:
    """An input that only makes the loop step."""


def _raiser(exc: BaseException) -> Input:
    """An input that stops the loop with ``exc`` (a fatal error found outside the loop)."""

    def fatal() -> None:
        raise exc

    return fatal
