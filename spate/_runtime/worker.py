"""The high-level runner: one handler task per owned split, graceful leave on cancellation.

:func:`run_worker` is what most users call. It opens a coordinator, starts the user's
handler for every split the worker gains (each in its own task under its own cancel scope),
turns the coordinator's events into handler cancellations and revocation requests, and
returns the verdict of a bounded job. Cancelling it leaves gracefully: every split is handed
back without consuming an attempt, presence and leadership are given up, and it waits
(bounded) until the splits are held elsewhere, so a rolling deploy loses no time to lease
expiry.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
import math
import random
from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias, overload

import attrs
import trio

from spate._config import Config
from spate._core.backoff import IDLE_BACKOFF, RETRY_BACKOFF, Backoff
from spate._core.balance import check_amount
from spate._errors import ConfigError, FatalCoordinationError, Fenced, StoreUnavailable
from spate._events import (
    AllComplete,
    Gained,
    Lost,
    Progress,
    Quarantined,
    RevokeRequested,
    SplitRequested,
    Stalled,
)
from spate._groups import single_error
from spate._metrics import MetricsHooks
from spate._plan import Planner
from spate._runtime.busy_time import BusyTime
from spate._runtime.coordinator import Coordinator, open_coordinator
from spate._runtime.signals import (
    LeaveRequest,
    Left,
    check_signals_can_be_handled,
    watch_signals,
)
from spate._store import Store

__all__ = ["Handler", "Left", "Planner", "SplitHandle", "Verdict", "run_worker"]

logger = logging.getLogger("spate.worker")

Verdict: TypeAlias = AllComplete | Stalled
"""What a bounded job ends with."""
Handler: TypeAlias = Callable[["SplitHandle"], Awaitable[None]]
"""The user's work function, called once per gained split."""

DEFAULT_LEAVE_DEADLINE = 30.0
"""Seconds a graceful leave may take (hand-back plus waiting for new owners)."""


class _Life(enum.Enum):
    """Where one handle stands: whether its handler run is over, and whether its tenancy is."""

    RUNNING = "running"
    """The run goes on and the tenancy holds: calls go through to the coordinator."""
    LOST = "lost"
    """The tenancy ended while the run went on: every call refuses (the split is lost)."""
    ENDED = "ended"
    """The run is over, the tenancy kept (the next run gets a new handle): every call refuses."""
    ENDED_LOST = "ended and lost"
    """The run is over and the tenancy ended too."""


_Step: TypeAlias = Literal["lost", "refused", "ended"]
"""What can happen to a handle.

``lost``: the runner learnt the tenancy ended (a Lost event, a loss found on failing, a
re-gain); ``refused``: a call through the handle met ``Fenced`` (a loss while the run goes on;
once it is over, the refusal is of the handle, not a loss of the split); ``ended``: the run
returned, raised or was cancelled.
"""

_LIFE: dict[tuple[_Life, _Step], _Life] = {
    (_Life.RUNNING, "lost"): _Life.LOST,
    (_Life.RUNNING, "refused"): _Life.LOST,
    (_Life.RUNNING, "ended"): _Life.ENDED,
    (_Life.LOST, "lost"): _Life.LOST,
    (_Life.LOST, "refused"): _Life.LOST,
    (_Life.LOST, "ended"): _Life.ENDED_LOST,
    (_Life.ENDED, "lost"): _Life.ENDED_LOST,
    (_Life.ENDED, "refused"): _Life.ENDED,
    (_Life.ENDED, "ended"): _Life.ENDED,
    (_Life.ENDED_LOST, "lost"): _Life.ENDED_LOST,
    (_Life.ENDED_LOST, "refused"): _Life.ENDED_LOST,
    (_Life.ENDED_LOST, "ended"): _Life.ENDED_LOST,
}
"""Every transition of a handle's life (each pair has one: nothing is left to chance)."""


@attrs.define(eq=False, kw_only=True)
class SplitHandle:
    """One split this worker owns, as one run of its handler sees it.

    ``progress`` is the resume point (the last committed watermark and state) and moves
    forward with every successful :meth:`commit`. ``revoke_requested`` is set when the leader
    wants the split elsewhere: commit what you have and return, and the split is handed back
    with nothing replayed. If the split is lost (another worker took it, or this worker could
    not renew its lease) the handler is cancelled at once and any later commit raises
    :class:`~spate.Fenced` without writing.

    A handle is good for one run of the handler in one tenancy: once that run has returned,
    raised or been cancelled, or the tenancy has ended, every call through it (:meth:`commit`,
    :meth:`split`, :meth:`decline_revoke`) raises :class:`~spate.Fenced` and writes nothing,
    whoever holds the split by then (this worker included). A task that outlives its handler
    cannot write for a later tenancy, or a later run, of the same split.

    What returning means: with ``completed=True`` committed, the split is finished. With a
    revocation pending (``revoke_requested`` set), the split is handed back at once, nothing
    replayed. Otherwise the split stays this worker's and the handler runs again, with a new
    handle, after a backoff (about a second, doubling to about a minute while runs make no
    progress, back to a second after a commit that moves the watermark); no store write is
    made while it waits. Raising fails the split (an attempt consumed); it stays this
    worker's and the handler runs again after the failure backoff (``Config.failure_backoff``).
    """

    id: str
    """The split id."""
    descriptor: bytes
    """What the planner said this split is (opaque to spate)."""
    weight: int
    """The split's relative size, used to balance the fleet."""
    epoch: int
    """This tenancy's epoch: it increases every time the split changes hands."""
    progress: Progress
    """The last committed progress (the resume point when the split was gained)."""
    _coordinator: Coordinator = attrs.field(repr=False, alias="_coordinator")
    _fence: int = attrs.field(alias="_fence")
    revoke_requested: trio.Event = attrs.field(factory=trio.Event)
    """Set when the leader asks for the split back; return soon after a commit."""
    split_requested: trio.Event = attrs.field(factory=trio.Event)
    """Set when the leader asks for this split to be split (idle lanes could take part of it);
    after each successful :meth:`split` the handle carries a fresh, unset event."""
    _life: _Life = attrs.field(default=_Life.RUNNING, init=False)
    """The handle's one state, moved only through :meth:`_step` (see ``_LIFE``)."""
    _began_at: int | None = attrs.field(default=None, init=False)
    """The watermark the run began from: a commit past it is progress (watermarks only grow)."""
    _misuse: ConfigError | None = attrs.field(default=None, alias="_misuse")
    """The last bad-argument error a call through this handle raised (see ``_mistake``)."""

    def __attrs_post_init__(self) -> None:
        self._began_at = self.progress.watermark

    @property
    def lost(self) -> bool:
        """True once the split is no longer this worker's; commits will raise Fenced."""
        return self._life in (_Life.LOST, _Life.ENDED_LOST)

    @property
    def completed(self) -> bool:
        """True once a ``completed=True`` commit has landed."""
        return self.progress.completed

    @property
    def _ended(self) -> bool:
        """The handler run this handle was made for is over: every call refuses."""
        return self._life in (_Life.ENDED, _Life.ENDED_LOST)

    @property
    def _advanced(self) -> bool:
        """A commit through this handle moved the watermark (it resets the idle backoff)."""
        return self.progress.watermark != self._began_at

    def _step(self, step: _Step) -> None:
        """Move the handle's life on (the runner's and the handle's own only way to)."""
        self._life = _LIFE[self._life, step]

    @property
    def fence(self) -> int:
        """The fencing token of this ownership: store it next to every output you write.

        It strictly increases with every new ownership of the split (a claim, a reclaim after
        a restart, a requeue all raise it), and across a job deleted and created again under
        the same name: it is the job's incarnation (when its plan record was created, in
        wall-clock milliseconds) above the split's :attr:`epoch`, ``incarnation * 2**20 +
        epoch``, so of two owners the later one always holds the larger fence. It is a plain
        non-negative ``int`` below ``2**63``: compare it, store it in a signed 64-bit integer
        column, send it anywhere. A sink that accepts a write only while the fence it holds
        for the split is ``<=`` the writer's (in the same transaction as the output) refuses
        a zombie's late writes: see the recipe in the docs (``docs/exactly-once.md``).

        Jobs created before incarnations existed keep their epoch as the fence. A job created
        again relies on wall clocks: its creator's clock must not be behind the old job's
        creator's by more than the time between the two creations.
        """
        return self._fence

    def _refuse_if_over(self, what: str) -> None:
        """Raise Fenced if this handle's run or tenancy is over (nothing is written then)."""
        if self._life is _Life.RUNNING:  # (every commit asks: one comparison on the hot path)
            return
        if self._ended:
            raise Fenced(
                self.id,
                f"the handler run this handle was made for has ended; {what}. A handle is good "
                "for one handler run: a task that outlives its handler must not write for the "
                "split any more",
            )
        if self.lost:
            raise Fenced(self.id, f"it was lost earlier; {what}")

    def _mistake(self, message: str) -> ConfigError:
        """A ConfigError for a bad argument of a call through this handle (nothing written).

        Kept, so that if the handler lets it escape the runner knows it for the handler's own
        mistake (a bug that would fail every split), not a failure of the split's work.
        """
        self._misuse = ConfigError(f"split {self.id!r}: {message}; nothing was written")
        return self._misuse

    def _checked_watermark(self, watermark: object) -> int | None:
        if watermark is not None and (
            isinstance(watermark, bool) or not isinstance(watermark, int)
        ):
            raise self._mistake(
                f"commit(): the watermark must be an int (or None), not {watermark!r} "
                f"({type(watermark).__name__}). It is the source's position, compared exactly "
                "and never allowed to move back: convert it (say, int(offset)) or commit the "
                "position as state bytes"
            )
        return watermark

    def _checked_state(self, state: object) -> bytes:
        if not isinstance(state, bytes | bytearray | memoryview):
            hint = " (encode text first: state=text.encode())" if isinstance(state, str) else ""
            raise self._mistake(f"commit(): state must be bytes, not {type(state).__name__}{hint}")
        return bytes(state)

    def _checked_completed(self, completed: object) -> bool:
        if not isinstance(completed, bool):
            raise self._mistake(f"commit(): completed must be True or False, not {completed!r}")
        return completed

    def report_load(self, amount: float) -> None:
        """Add ``amount`` units of work this split did; synchronous, writes nothing.

        Any unit the whole job shares (records, bytes): spate keeps a smoothed rate per split,
        carries it to the leader on this worker's presence renewals, and the leader moves
        running splits by it so every worker carries its share of the load (see
        ``docs/balancing.md``). Raises :class:`~spate.ConfigError` for a negative, NaN or
        infinite amount or a non-number, and :class:`~spate.Fenced` if this handle's run or
        tenancy is over.
        """
        check_amount(amount)
        self._refuse_if_over("no load was counted")
        try:
            self._coordinator.report_load(self.id, amount, fence=self._fence)
        except Fenced:
            self._step("lost")
            raise

    async def decline_revoke(self) -> None:
        """Say this split cannot stop at a safe boundary now: the revocation is forced at once.

        Use it when ``revoke_requested`` is set but the handler cannot commit and return soon.
        The split then moves the replaying way: the handler is cancelled (the split is lost,
        its uncommitted work replays on the next owner) instead of running out the drain
        deadline. Does nothing if no revocation is pending. Raises :class:`~spate.Fenced`,
        doing nothing, if this handle's run or tenancy is over.
        """
        self._refuse_if_over("no revocation was declined")
        await self._coordinator.decline_revoke(self.id, fence=self._fence)

    async def commit(
        self, watermark: int | None, *, state: bytes = b"", completed: bool = False
    ) -> None:
        """Record progress with one fenced compare-and-swap; return once it has landed.

        ``watermark`` must never move backwards (a regression is treated as a bug in the
        work source and stops the worker). ``completed=True`` finishes the split and
        releases it. Raises :class:`~spate.Fenced` (nothing written) if the split is
        no longer owned by this worker, or this handle's run or tenancy is over, and
        :class:`~spate.ValueTooLarge` (nothing written; the worker carries on) if the progress
        record would exceed the store's value size: keep ``state`` small.
        A ``watermark`` that is not an int (a float, a bool), a ``state`` that is not bytes (a
        ``str``) or a ``completed`` that is not a bool raises :class:`~spate.ConfigError`,
        writing nothing and failing nothing; escaping the handler, it stops ``run_worker``.

        A store outage is retried (a landed try is recognised and adopted) while the tenancy
        lasts. If the tenancy ends while a try's outcome is unknown, this raises
        :class:`~spate.StoreUnavailable` saying the commit may have landed, never ``Fenced``:
        do not undo its effects then.
        """
        self._refuse_if_over("nothing was written")
        progress = Progress(
            watermark=self._checked_watermark(watermark),
            state=self._checked_state(state),
            completed=self._checked_completed(completed),
        )
        coordinator, fence = self._coordinator, self._fence

        async def attempt() -> None:
            # A retry is a new call: a run that ended while the store was away writes nothing.
            self._refuse_if_over("nothing was written")
            await coordinator.commit(self.id, progress, fence=fence)

        try:
            # An unknown outcome is retried with the same progress: a commit that did land is
            # recognised by the coordinator and adopted, so retrying never double-applies. If
            # the store stays away long enough the split is lost and this task is cancelled.
            try:
                await coordinator.commit(self.id, progress, fence=fence)
            except StoreUnavailable as exc:  # the first attempt is the hot path: no wrapper
                try:
                    await _retry_unavailable(attempt, failed=exc)
                except Fenced as fenced:
                    # The retry wrote nothing, but an earlier try may have landed: Fenced
                    # would tell the handler to undo effects the store may hold.
                    self._step("refused")
                    raise StoreUnavailable(
                        f"committing split {self.id!r}: an earlier try's outcome is unknown "
                        f"(the store could not be reached) and the tenancy ended before a "
                        f"retry could find out ({fenced.reason}). The commit may have landed: "
                        "do not undo its effects; the split's next owner resumes from whatever "
                        "the store holds."
                    ) from fenced
        except Fenced:
            self._step("refused")
            raise
        self.progress = progress

    async def split(self, primary: bytes, residual: bytes, *, weight: int | None = None) -> str:
        """Split this split's remaining work in two with one fenced write; return the new id.

        ``primary`` becomes this split's descriptor (:attr:`descriptor`, and what a successor
        resumes), and a new split with ``residual`` as its descriptor joins the job: an idle
        worker takes it. The contract (``docs/splitting.md``): primary and residual partition
        the work left after the last commit, the primary keeps this split's start, and the
        split point lies past everything processed so far; commit before splitting. spate
        guarantees the rest: the residual runs if and only if this write won, exactly once.

        ``weight`` is the residual's (default: half this split's, at least 1). Raises
        :class:`~spate.Fenced` if the split is no longer this worker's, or this handle's run
        or tenancy is over (no residual ever runs then), :class:`~spate.ConfigError` or
        :class:`~spate.ValueTooLarge` for bad input (nothing written). A store outage is
        retried (a landed split is recognised).
        """
        self._refuse_if_over("nothing was written")
        coord, fence = self._coordinator, self._fence
        rid: list[str] = []

        async def attempt() -> None:
            self._refuse_if_over("nothing was written")
            rid.append(await coord.split(self.id, primary, residual, weight, fence=fence))

        try:
            await _retry_unavailable(attempt)
        except Fenced:
            self._step("refused")
            raise
        self.descriptor = primary
        self.split_requested = trio.Event()
        return rid[-1]


async def _retry_unavailable(
    call: Callable[[], Awaitable[None]], *, failed: StoreUnavailable | None = None
) -> None:
    """Run ``call`` until it does not raise StoreUnavailable (capped exponential backoff).

    ``failed``: the caller's own first attempt already failed so; back off before the next.
    """
    backoff: Backoff | None = None  # built on the first failure: commits are the hot path
    while True:
        if failed is not None:
            backoff = backoff or Backoff.of(RETRY_BACKOFF)
            delay = backoff.delay()
            logger.debug("store unavailable (%s); retrying in %.2f s", failed, delay)
            await trio.sleep(delay)
        try:
            await call()
            return
        except StoreUnavailable as exc:
            failed = exc


_RunEnd: TypeAlias = Literal["returned", "failed", "over"]
"""How one handler run ended: it returned with the split held and unfinished; it raised and
the split is kept to run again after a failure backoff; or the tenancy is over (completed,
failed and given back, quarantined, lost)."""


@attrs.define(eq=False)
class _Running:
    """One tenancy of a split on this worker: its handler's runs, one at a time."""

    handle: SplitHandle
    """The handle of the current run (or of the last one, during a backoff)."""
    scope: trio.CancelScope
    revoked: trio.Event = attrs.Factory(trio.Event)
    """A revocation arrived during this tenancy (it may come while no handler runs)."""
    split_asked: bool = False
    """A split request arrived while no handler ran: the next run's handle is told."""
    failures: Backoff = attrs.Factory(lambda: Backoff(1.0, 60.0))
    """The failure backoff of this tenancy (set from the Config when the tenancy starts)."""
    retry_in: float = 0.0
    """After a run that raised and kept the split: how long to wait before the next run."""


class _Runner:
    """Dispatches coordinator events to handler tasks; owned by one run_worker call."""

    def __init__(self, coordinator: Coordinator, handler: Handler) -> None:
        self._coord = coordinator
        self._handler = handler
        self._running: dict[str, _Running] = {}
        self._changed = trio.Event()
        self._waiting = 0
        """Splits waiting out a failure backoff (the ``retry_waiting`` level)."""
        self.busy: BusyTime | None = None
        """With ``Config.measure_load``: the instrument timing the handlers' steps."""
        if coordinator.config.measure_load:
            self.busy = BusyTime(
                lambda split, fence, seconds: coordinator.report_load(split, seconds, fence=fence)
            )

    async def dispatch(self, nursery: trio.Nursery) -> Verdict | None:
        async for event in self._coord.events():
            if isinstance(event, Gained):
                self._start(nursery, event)
            elif isinstance(event, Lost):
                running = self._running.pop(event.split, None)
                if running is not None:
                    running.handle._step("lost")
                    running.scope.cancel()
            elif isinstance(event, RevokeRequested):
                running = self._running.get(event.split)
                if running is not None:
                    running.revoked.set()  # (wakes a backoff: the split goes back at once)
                    running.handle.revoke_requested.set()
            elif isinstance(event, SplitRequested):
                running = self._running.get(event.split)
                if running is not None:
                    running.handle.split_requested.set()
                    running.split_asked = running.handle._ended
            elif isinstance(event, Quarantined):
                logger.warning(
                    "split %s quarantined after %d attempts; fix the cause, then run "
                    "`spate requeue` to retry it",
                    event.split,
                    event.attempts,
                )
            elif isinstance(event, AllComplete | Stalled):
                return event
        # The stream ends only when the coordinator stops; its error (say, a duplicate
        # instance id) comes out of open_coordinator, so report nothing of our own here.
        return None

    def _start(self, nursery: trio.Nursery, event: Gained) -> None:
        previous = self._running.pop(event.split, None)
        if previous is not None:
            # A re-gain always follows a loss; never let two handlers run one split.
            previous.handle._step("lost")
            previous.scope.cancel()
        handle = SplitHandle(
            id=event.split,
            descriptor=event.descriptor,
            weight=event.weight,
            epoch=event.epoch,
            progress=event.progress,
            _coordinator=self._coord,
            _fence=event.fence,
        )
        config = self._coord.config
        running = _Running(handle, trio.CancelScope())
        if config.failure_backoff > 0:
            running.failures = Backoff(config.failure_backoff, config.failure_backoff_max)
        self._running[event.split] = running
        nursery.start_soon(self._run_tenancy, running, name=f"spate handler {event.split}")

    async def _run_tenancy(self, running: _Running) -> None:
        """Run the handler until the split is finished, failed, handed back or lost.

        A run that returns without completing, with no revocation pending, keeps the split:
        the next run starts after a backoff (no store write while it waits), so a handler
        with nothing to do cannot spin the worker and the store.
        """
        split = running.handle.id
        backoff = Backoff.of(IDLE_BACKOFF)
        told = False  # logged for this backoff episode
        task = trio.lowlevel.current_task()
        if self.busy is not None:
            self.busy.handler_started(task, split, running.handle.fence)
        try:
            with running.scope:
                while (end := await self._run_once(running)) != "over":
                    handle = running.handle
                    if running.revoked.is_set():
                        # Returning is the cooperative end of a revocation: hand back now,
                        # nothing replays since everything the handler did was committed.
                        await self._settle(lambda: self._coord.release([split]))
                        return
                    if handle._advanced:
                        backoff.reset()
                        told = False
                        if end != "failed":
                            running.failures.reset()  # (a run that failed is no recovery)
                    if end == "failed":
                        await self._wait_to_retry(running)
                        if running.revoked.is_set():
                            # A revocation during the wait: give the split back now rather
                            # than spend another attempt on a handler that just failed.
                            await self._settle(lambda: self._coord.release([split]))
                            return
                        running.handle = self._next_handle(running, handle)
                        continue
                    delay = backoff.delay()
                    if not told:
                        told = True
                        logger.warning(
                            "handler for split %s returned without completing it and with no "
                            "revocation pending; the split stays on this worker and the "
                            "handler runs again in %.0f s (doubling to %.0f s while runs make "
                            "no progress). Returning without completing means 'not done, try "
                            "later': commit completed=True when the split is done, and return "
                            "early only when revoke_requested is set",
                            split,
                            delay,
                            IDLE_BACKOFF[1],
                        )
                    with trio.move_on_after(delay):
                        await running.revoked.wait()  # a revocation ends the wait at once
                    running.handle = self._next_handle(running, handle)
        finally:
            if self.busy is not None:
                self.busy.handler_ended(task)
            running.handle._step("ended")
            if self._running.get(split) is running:
                del self._running[split]
            self._changed.set()
            self._changed = trio.Event()

    def _next_handle(self, running: _Running, last: SplitHandle) -> SplitHandle:
        """A fresh handle for the next run: the same tenancy, from where the last one got."""
        handle = SplitHandle(
            id=last.id,
            descriptor=last.descriptor,
            weight=last.weight,
            epoch=last.epoch,
            progress=last.progress,
            _coordinator=self._coord,
            _fence=last.fence,
        )
        if running.revoked.is_set():
            handle.revoke_requested.set()
        if running.split_asked:
            running.split_asked = False
            handle.split_requested.set()
        return handle

    async def _run_once(self, running: _Running) -> _RunEnd:
        """One run of the handler, and how it ended (see :data:`_RunEnd`).

        The handle refuses every call once the run is over, however it ended.
        """
        handle = running.handle
        try:
            await self._handler(handle)
        except Exception as exc:
            if handle.lost or (isinstance(exc, Fenced) and handle.id not in self._coord.owned):
                handle._step("lost")  # the tenancy ended: nothing to settle, no failure
                return "over"
            if exc is handle._misuse:
                # A bad argument of the handler's own call: a bug in the handler, which would
                # fail (and quarantine) every split it runs. Nothing was written; stop.
                logger.exception(
                    "handler for split %s let the error of its own bad call escape; "
                    "run_worker stops, failing no split: fix the handler",
                    handle.id,
                )
                raise
            # (A Fenced of a handle kept from an earlier run is the handler's bug, not a loss:
            # the split is still held, so it fails like any other error.)
            handle._step("ended")
            return await self._failed(running, exc)
        finally:
            handle._step("ended")
        return "returned" if not handle.lost and not handle.completed else "over"

    async def _failed(self, running: _Running, exc: Exception) -> _RunEnd:
        """The run raised: charge an attempt, and keep the split to retry after a backoff.

        With ``Config.failure_backoff`` at 0 the split is failed and handed back at once. A
        failure whose write finds the tenancy over (another worker holds the split: this one
        is a zombie, and the error most likely its sink refusing a stale write) charges
        nothing and is said as such, at INFO.
        """
        handle = running.handle
        reason = f"{type(exc).__name__}: {exc}"
        config = self._coord.config
        delay: float | None = None
        if config.failure_backoff > 0:
            # Jittered upwards only: a fleet's splits spread out, and the waits before the
            # fourth attempt still add up to at least 1 + 2 + 4 s at the defaults.
            delay = running.failures.delay() * (1 + random.random() / 4)
        landed = await self._settle(lambda: self._coord.fail(handle.id, reason, retry_after=delay))
        if not landed:
            logger.info(
                "handler for split %s raised %s after its tenancy had ended (another worker "
                "holds the split now%s); no attempt was consumed and there is nothing to do",
                handle.id,
                type(exc).__name__,
                ": a stale tenancy's write, refused by the sink's fence"
                if isinstance(exc, Fenced)
                else "",
            )
            handle._step("lost")
            return "over"
        if delay is None or handle.id not in self._coord.owned or handle.lost:
            logger.warning(
                "handler for split %s raised; the split was failed", handle.id, exc_info=exc
            )
            return "over"  # handed back, quarantined by this failure, or lost meanwhile
        logger.warning(
            "handler for split %s raised; it stays here and runs again in %.1f s",
            handle.id,
            delay,
            exc_info=exc,
        )
        running.retry_in = delay
        return "failed"

    async def _wait_to_retry(self, running: _Running) -> None:
        """Wait out a failure backoff (a revocation ends it at once); counted as a level."""
        self._waiting += 1
        self._coord._metrics.retry_waiting(self._waiting)
        try:
            with trio.move_on_after(running.retry_in):
                await running.revoked.wait()
        finally:
            self._waiting -= 1
            self._coord._metrics.retry_waiting(self._waiting)

    async def _settle(self, call: Callable[[], Awaitable[None]]) -> bool:
        """Make a fail or hand-back land; False if the tenancy was over (nothing written).

        It must land, or the split be lost: a split left held with no handler would sit
        idle until the worker leaves.
        """
        try:
            await _retry_unavailable(call)
        except Fenced:
            return False  # lost in the meantime: its new owner resumes from the last commit
        return True

    async def wait_idle(self) -> None:
        """Return once no handler is running (and no split waits out a backoff)."""
        while self._running:
            await self._changed.wait()

    @property
    def handles(self) -> list[SplitHandle]:
        """Handles of the current runs (or of the last run, for a split backing off)."""
        return [r.handle for r in self._running.values()]


@overload
async def run_worker(
    store: Store,
    *,
    job: str,
    instance: str | None = None,
    planner: Planner,
    handler: Handler,
    config: Config | None = None,
    fingerprint: str = "",
    leave_deadline: float = DEFAULT_LEAVE_DEADLINE,
    locality: str = "",
    metrics: MetricsHooks | None = None,
    nonce: str | None = None,
    handle_signals: Literal[False] = False,
) -> Verdict: ...


@overload
async def run_worker(
    store: Store,
    *,
    job: str,
    instance: str | None = None,
    planner: Planner,
    handler: Handler,
    config: Config | None = None,
    fingerprint: str = "",
    leave_deadline: float = DEFAULT_LEAVE_DEADLINE,
    locality: str = "",
    metrics: MetricsHooks | None = None,
    nonce: str | None = None,
    handle_signals: bool,
) -> Verdict | Left: ...


async def run_worker(
    store: Store,
    *,
    job: str,
    instance: str | None = None,
    planner: Planner,
    handler: Handler,
    config: Config | None = None,
    fingerprint: str = "",
    leave_deadline: float = DEFAULT_LEAVE_DEADLINE,
    locality: str = "",
    metrics: MetricsHooks | None = None,
    nonce: str | None = None,
    handle_signals: bool = False,
) -> Verdict | Left:
    """Join ``job`` as one worker and run ``handler`` for every split this worker gains.

    Returns the verdict of a bounded job (:class:`~spate.AllComplete` or
    :class:`~spate.Stalled`); for an open plan it runs until cancelled.

    What a handler's end means: a completed commit finishes the split. Returning while a
    revocation is pending (``revoke_requested`` set) hands the split back at once. Returning
    otherwise keeps the split: the handler runs again, with a new :class:`SplitHandle`, after
    a backoff (about 1 s, doubling to about 60 s while runs make no progress, back to 1 s
    after a commit that moves the watermark), logged once per backoff, with no store write
    while it waits; a revocation, a loss or the worker leaving ends the wait at once.
    Raising fails the split (consuming an attempt; quarantined at ``max_attempts``) and runs
    it again, held, after a backoff (``Config.failure_backoff``, doubling to
    ``failure_backoff_max``; ``spate status`` shows it ``retrying``), while
    the worker keeps its other splits.

    Cancelling ``run_worker`` leaves gracefully, bounded by ``leave_deadline`` seconds:
    handlers are cancelled, every split is handed back with no attempt consumed, presence
    and leadership are given up, and it waits until the splits are held elsewhere. Then the
    cancellation propagates as usual. The store's connection serves the leave even when the
    cancelled scope encloses the store too (``async with open_store(...)`` inside it): a
    store's own tasks stop only when the store is closed.

    ``locality`` is this worker's failure-domain path (``"zone-a/rack-3/host-7"``), as for
    :func:`~spate.open_coordinator`.

    ``metrics`` receives every outcome the coordinator counts, as for
    :func:`~spate.open_coordinator` (default: OpenTelemetry instruments).

    ``nonce`` is the process nonce, random by default; pass one only to replay a run exactly
    (as for :func:`~spate.open_coordinator`).

    ``handle_signals=True`` makes SIGINT (Ctrl-C) and SIGTERM (what a process manager sends
    to stop a process) leave gracefully, as a cancellation does, for as long as the worker
    runs: the first starts the leave, and ``run_worker`` then returns :class:`~spate.Left`
    instead of raising, so the program ends normally; a second leaves at once (splits not
    yet handed back wait out their leases). A signal before the worker holds anything just
    stops it. Signals reach only the main thread: elsewhere this raises
    :class:`~spate.ConfigError`. Without it, the program's own signal handling applies
    (Python turns Ctrl-C into ``KeyboardInterrupt``; SIGTERM ends the process at once).
    """
    _check_handler(handler)
    if handle_signals:
        check_signals_can_be_handled()
    if not (leave_deadline >= 0 and math.isfinite(leave_deadline)):
        raise ConfigError(
            f"leave_deadline must be a finite number of seconds >= 0, not {leave_deadline!r}"
        )
    verdict: Verdict | None = None
    request = LeaveRequest()
    with single_error():
        verdict = await _run_shielded(
            request,
            handle_signals,
            store,
            job,
            instance,
            planner,
            handler,
            config,
            fingerprint,
            leave_deadline,
            locality,
            metrics,
            nonce,
        )
    if verdict is None:
        # We left because we were cancelled; let the cancellation continue outward.
        await trio.lowlevel.checkpoint()
        left = request.left()
        if left is not None:
            return left  # a signal, not a cancellation, asked us to leave
        raise FatalCoordinationError(
            f"the coordinator of {job!r} stopped without a verdict or an error; this is a bug "
            "in spate, please report it with the worker's log"
        )
    return verdict


def _check_handler(handler: object) -> None:
    """Refuse a handler that is not an ``async def`` function (or a callable object's)."""
    call = handler
    while isinstance(call, functools.partial):
        call = call.func
    if not callable(call):
        raise ConfigError(
            f"handler must be an async def function taking a SplitHandle, not {handler!r}"
        )
    if inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        getattr(call, "__call__", None)  # noqa: B004 (an object whose __call__ is async def)
    ):
        return
    raise ConfigError(
        f"handler must be an async def function taking a SplitHandle (run_worker awaits it "
        f"in a task of its own), not the plain function {handler!r}: declare it "
        "`async def handle(split): ...`; run blocking work inside it with "
        "`await trio.to_thread.run_sync(...)`"
    )


async def _run_shielded(
    request: LeaveRequest,
    handle_signals: bool,
    store: Store,
    job: str,
    instance: str | None,
    planner: Planner,
    handler: Handler,
    config: Config | None,
    fingerprint: str,
    leave_deadline: float,
    locality: str,
    metrics: MetricsHooks | None,
    nonce: str | None,
) -> Verdict | None:
    leave = request.event

    async def notice_cancellation() -> None:
        # Runs outside the shield below: the caller's cancellation lands here and asks the
        # shielded part to leave gracefully instead of dying mid-protocol.
        try:
            await trio.sleep_forever()
        finally:
            leave.set()

    verdict: Verdict | None = None
    work = trio.CancelScope()
    # The signals stay ours through the whole leave, whatever started it (a second one cuts
    # it short), so their watcher is not cancelled with the caller: only once we are done.
    signals = trio.CancelScope(shield=True)

    async def handle_signals_until_done(task_status: trio.TaskStatus[None]) -> None:
        with signals:
            await watch_signals(request, work, task_status=task_status)

    async with trio.open_nursery() as outer:
        outer.start_soon(notice_cancellation, name="spate leave sentinel")
        if handle_signals:
            await outer.start(handle_signals_until_done, name="spate signal handler")
        try:
            with work:
                async with open_coordinator(
                    store,
                    job=job,
                    instance=instance,
                    planner=planner,
                    config=config,
                    fingerprint=fingerprint,
                    locality=locality,
                    metrics=metrics,
                    nonce=nonce,
                ) as coord:
                    # Shielded only once open: a cancellation during startup simply aborts it
                    # (nothing is held yet), while one after it becomes a graceful leave.
                    work.shield = True
                    verdict = await _work_until_verdict_or_leave(
                        coord, handler, leave, leave_deadline
                    )
        finally:
            # (Also on an error: the shielded watcher would otherwise keep the nursery open.)
            signals.cancel()
        outer.cancel_scope.cancel()
    return verdict


async def _work_until_verdict_or_leave(
    coord: Coordinator, handler: Handler, leave: trio.Event, leave_deadline: float
) -> Verdict | None:
    runner = _Runner(coord, handler)
    if runner.busy is not None:
        trio.lowlevel.add_instrument(runner.busy)
    try:
        return await _work(coord, runner, leave, leave_deadline)
    finally:
        if runner.busy is not None:
            trio.lowlevel.remove_instrument(runner.busy)


async def _work(
    coord: Coordinator, runner: _Runner, leave: trio.Event, leave_deadline: float
) -> Verdict | None:
    verdict: Verdict | None = None
    stream_ended = False
    async with trio.open_nursery() as nursery:

        async def dispatch() -> None:
            nonlocal verdict, stream_ended
            verdict = await runner.dispatch(nursery)
            stream_ended = verdict is None
            if verdict is not None:
                # Every split is finished, so a handler still running is one whose final
                # commit just landed: let it return (and run its own clean-up) in peace.
                with trio.move_on_after(coord.config.drain_deadline):
                    await runner.wait_idle()
            nursery.cancel_scope.cancel()

        nursery.start_soon(dispatch, name="spate event dispatch")
        await leave.wait()
        nursery.cancel_scope.cancel()
    if stream_ended:
        return None  # the coordinator stopped; leaving its block raises why
    if verdict is not None:
        # The job is over: step down at once (leadership, presence) rather than leaving a
        # leader key behind for a lease, so a worker started later (say, after a requeue)
        # does not wait for it to expire.
        with trio.move_on_after(leave_deadline):
            await _retry_unavailable(coord.depart)
        return verdict
    held = sorted(coord.owned)
    with trio.move_on_after(leave_deadline) as scope:
        try:
            await coord.depart()
        except StoreUnavailable as exc:
            # Nothing of the leave could land, and waiting for new owners would only wait
            # out the whole deadline: give up now. The keys expire with the session.
            logger.warning("%s left without handing back its splits: %s", coord.instance, exc)
            return None
        await coord.wait_handed_over(held)
    if scope.cancelled_caught:
        logger.warning(
            "graceful leave of %s did not finish within %.1f s; the remaining splits move "
            "when their leases expire",
            coord.instance,
            leave_deadline,
        )
    return None
