"""The coordinator's public face: :func:`open_coordinator` and :class:`Coordinator`.

``open_coordinator`` checks its arguments, runs the startup steps (refuse a store whose CAS
is broken, join the job with a fingerprint check, announce presence — each retried with
capped backoff against an unavailable store), starts the runtime's loop with its watches and
timers in one nursery, and yields a :class:`Coordinator` once the first snapshots are in.
Leaving the block stops every task. A fatal error comes out of the ``async with`` as itself
(``FatalCoordinationError``, ``PlanError``, ``StoreError``), never wrapped in an
ExceptionGroup, and so does an exception raised by the block's own body.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TypeVar

import trio

from spate import _write_spans as write_spans
from spate._config import Config
from spate._core.membership.startup import Retry, StartupStep
from spate._core.placement.vocabulary import validate_locality
from spate._core.tenancy.splitting import check_split_args
from spate._errors import ConfigError, Fenced, StoreUnavailable
from spate._events import Event, Progress
from spate._groups import meaningful_leaf
from spate._metrics import MetricsHooks
from spate._plan import Planner, default_instance_id, validate_instance, validate_job
from spate._runtime.loop import Runtime, stopped_error
from spate._runtime.probe import probe_store
from spate._runtime.pumps import heartbeat_ticker, interval_ticker, watch_pumps
from spate._store import Store
from spate.telemetry import metrics_for

__all__ = ["Coordinator", "open_coordinator"]

logger = logging.getLogger("spate.coordinator")

T = TypeVar("T")


class Coordinator:
    """One worker's membership in a job: the events of its splits, and the calls to act on them.

    Get one from :func:`open_coordinator`. All methods are safe to call from any task of the
    Trio run that opened it. Commands return once their write landed (or was refused).
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._machine = runtime.machine
        self._events_taken = False

    @property
    def job(self) -> str:
        """The job this worker is part of."""
        return self._machine.job

    @property
    def instance(self) -> str:
        """This worker's instance id."""
        return self._machine.instance

    @property
    def config(self) -> Config:
        """The configuration in force, resolved against the store (lease and op timeout set)."""
        return self._runtime.config

    @property
    def is_leader(self) -> bool:
        """Whether this worker currently leads the job (for live views)."""
        return self._machine.leading

    @property
    def _metrics(self) -> MetricsHooks:
        """The hooks this coordinator reports to (run_worker adds its own levels)."""
        return self._runtime.scope.metrics

    @property
    def owned(self) -> frozenset[str]:
        """The splits this worker holds right now (for live views)."""
        return self._machine.owned

    def events(self) -> AsyncIterator[Event]:
        """The event stream, for one consumer: gains, losses, requests, quarantines, the verdict.

        Gained, Lost, RevokeRequested, SplitRequested, Quarantined, then AllComplete or
        Stalled for a bounded job. The stream ends when the coordinator stops. Calling this
        twice raises RuntimeError: events are a queue, and two consumers would each miss half
        of them.
        """
        if self._events_taken:
            raise RuntimeError(
                "Coordinator.events() has one consumer and was already called; share the "
                "events from that one loop instead."
            )
        self._events_taken = True
        return self._runtime.events_receive

    async def commit(self, split: str, progress: Progress, *, fence: int | None = None) -> None:
        """Record ``progress`` for a held split with one fenced write; return once it landed.

        ``fence`` is the tenancy the commit is for (:attr:`Gained.fence <spate.Gained.fence>`):
        given, the commit lands only while that tenancy lasts, so a task left over from an
        earlier tenancy of a split this worker holds again cannot write for the new one.

        Raises :class:`~spate.Fenced` (nothing written) if this worker does not hold
        the split, lost it, or holds it under another fence than ``fence``, or the progress
        record shows another tenancy; :class:`~spate.StoreUnavailable` if the outcome is
        unknown (the reply or the read-back after a lost compare-and-swap failed: the write may
        have landed, and the split is still held; retry the same commit, which adopts a landed
        one). After a ``StoreUnavailable``, a ``Fenced`` from the retry says the retry wrote
        nothing: the earlier try's outcome stays unknown (:meth:`SplitHandle.commit
        <spate.SplitHandle.commit>` raises ``StoreUnavailable`` then);
        :class:`~spate.ValueTooLarge` (nothing written, the coordinator unharmed) if the
        progress record would exceed the store's value size; and
        :class:`~spate.FatalCoordinationError` if the watermark would move backwards (the
        coordinator stops). A completed commit also hands the split's lease back.
        """
        _check_split(split)
        if not isinstance(progress, Progress):
            raise ConfigError(f"commit() takes a spate.Progress, not {type(progress).__name__}")
        _check_fence(fence)
        # The write runs in this task, inline, under the caller's trace context: the
        # handler's own span and the commit's share one trace.
        error = await self._runtime.call_inline(self._machine.commit_flow(split, progress, fence))
        if error is not None:
            raise error

    async def split(
        self,
        split: str,
        primary: bytes,
        residual: bytes,
        weight: int | None = None,
        *,
        fence: int | None = None,
    ) -> str:
        """Split a held split with one fenced write; return the new split's id once it landed.

        ``primary`` is the split's descriptor from now on (its owners resume it), and a new
        split with ``residual`` as its descriptor joins the job, with ``weight`` (default: half
        the split's, at least 1) and the split's locality. Together they must cover exactly
        the work left after the last commit, the primary keeping the split's own start (see
        ``docs/splitting.md``). Raises :class:`~spate.Fenced` if this worker does not hold the
        split, lost it, or holds it under another fence than ``fence`` (the tenancy the call
        is for, as for :meth:`commit`; then no residual ever runs), :class:`~spate.ConfigError` for
        arguments that are not non-empty bytes or a positive int weight, and
        :class:`~spate.ValueTooLarge` if a record would exceed the store's value size (nothing
        is written in either case); :class:`~spate.StoreUnavailable` if the outcome is unknown.
        """
        _check_split(split)
        check_split_args(primary, residual, weight)
        _check_fence(fence)
        result = await self._runtime.call_inline(
            self._machine.split_flow(split, primary, residual, weight, fence)
        )
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, str)
        return result

    def report_load(self, split: str, amount: float, *, fence: int | None = None) -> None:
        """Count ``amount`` units of work a held split did; synchronous, writes nothing.

        The unit is the job's own (records, bytes, seconds of CPU): every worker of the job
        must use the same one. The coordinator keeps a smoothed rate per split and carries it
        to the leader on its presence renewals, and the leader moves running splits so each
        worker's load per unit of ``Config.capacity`` lies within ``Config.load_band`` of the
        mean (see ``docs/balancing.md``).

        Raises :class:`~spate.ConfigError` for an amount that is not a finite number at least
        0, and :class:`~spate.Fenced` if this worker does not hold the split (or holds it under
        another fence than ``fence``, the tenancy the call is for, as for :meth:`commit`).
        """
        _check_split(split)
        _check_fence(fence)
        self._check_running()
        self._machine.report_load(split, amount, fence)

    async def fail(self, split: str, reason: str, *, retry_after: float | None = None) -> None:
        """Report that work on a held split failed: consumes an attempt and gives it back.

        At ``max_attempts`` the split is quarantined (every worker then sees Quarantined).
        With ``retry_after`` (seconds, positive) the split is not given back unless this
        failure quarantines it: this worker keeps it, to run it again after that long, and its
        progress record says when (``spate status`` shows it ``retrying``); check
        :attr:`owned` afterwards. Raises :class:`~spate.Fenced` if this worker does not hold it.
        """
        _check_split(split)
        if retry_after is not None and (
            isinstance(retry_after, bool)
            or not isinstance(retry_after, int | float)
            or not 0 < retry_after < math.inf
        ):
            raise ConfigError(
                f"fail(): retry_after is a positive number of seconds or None, not {retry_after!r}"
            )
        error = await self._runtime.call_inline(
            self._machine.fail_flow(split, str(reason), retry_after)
        )
        if error is not None:
            raise error

    async def release(self, splits: Iterable[str]) -> None:
        """Hand held splits back cleanly (no attempt consumed); return once done.

        Raises :class:`~spate.Fenced`, writing nothing, if any of them is not held.
        """
        ids = _split_ids(splits)
        machine = self._machine
        self._check_running()
        for split in ids:
            if not machine.holds(split):
                raise Fenced(split, "this worker does not hold it; nothing was released")
        # All at once, in this task: the hand-backs write different keys, so they overlap.
        await self._runtime.call_inline(machine.release_all_flow(ids))

    async def decline_revoke(self, split: str, *, fence: int | None = None) -> None:
        """Say the split cannot stop at a safe boundary: a revocation is then forced at once.

        The split goes back the replaying way (Lost "revoked" follows); a revocation the
        leader already took back simply ends. With ``fence`` (the tenancy the call is for, as
        for :meth:`commit`), raises :class:`~spate.Fenced` and does nothing unless this worker
        holds the split under that fence.
        """
        _check_split(split)
        _check_fence(fence)
        self._check_running()
        await trio.lowlevel.checkpoint()
        if fence is not None and (ended := self._machine.tenancy_ended(split, fence)):
            raise ended
        # A synchronous call into the machine: atomic, since Trio runs one task at a time.
        # (A forced revocation's flow it starts runs on the loop, see Runtime.start.)
        self._machine.decline_revoke(split)
        self._runtime.request_step()

    async def depart(self) -> None:
        """Leave the job gracefully and return when done.

        Hands every held split back (no attempt consumed), stops claiming, resigns leadership
        and deletes this worker's presence, so the others rebalance at once instead of after
        a lease. The coordinator keeps watching (a bounded job's verdict still arrives).

        Raises :class:`~spate.StoreUnavailable` (after about one operation timeout)
        when a hand-back cannot reach the store: the worker then stops holding everything
        without writing, and its splits move when its session's keys expire.
        """
        self._check_running()
        error = await self._runtime.call_inline(self._machine.depart_flow())
        if error is not None:
            raise error

    async def wait_handed_over(self, splits: Iterable[str]) -> None:
        """After :meth:`depart`, return once ``splits`` have moved on.

        That is, once each split is owned by another worker or finished, or once nobody is
        going to take the rest: no other worker is present, or every other worker's
        assignment fills its lanes and names none of them (a job with more splits than the
        fleet has lanes). A leaving process that waits for this before it exits leaves no
        window in which its released work sits unowned while someone could take it.
        Nothing is read from the store for it: the coordinator keeps watching after a
        departure, and the wait is answered from what it sees. It never gives up on its own
        (bound it with a cancel scope), and returns at once if the coordinator has stopped.
        """
        wanted = _split_ids(splits)
        machine = self._machine
        await self._runtime.wait_until(lambda: machine.handed_over(wanted))

    def _check_running(self) -> None:
        stopped = self._runtime.stopped
        if stopped is not None:
            raise stopped_error(stopped)


def _check_split(split: object) -> str:
    if not isinstance(split, str):
        raise ConfigError(f"a split id is a str, not {type(split).__name__}")
    return split


def _check_fence(fence: object) -> None:
    if fence is not None and (isinstance(fence, bool) or not isinstance(fence, int)):
        raise ConfigError(
            f"fence is the int of a tenancy (Gained.fence, SplitHandle.fence) or None, not "
            f"{fence!r}"
        )


def _split_ids(splits: Iterable[str]) -> list[str]:
    # One id passed bare is one split, not the characters of its name.
    return [_check_split(s) for s in ([splits] if isinstance(splits, str) else splits)]


# -- opening ---------------------------------------------------------------------------------


@asynccontextmanager
async def open_coordinator(
    store: Store,
    *,
    job: str,
    instance: str | None = None,
    planner: Planner,
    config: Config | None = None,
    fingerprint: str = "",
    metrics: MetricsHooks | None = None,
    locality: str = "",
    nonce: str | None = None,
) -> AsyncIterator[Coordinator]:
    """Join ``job`` on ``store`` as ``instance`` and coordinate until the block ends.

    ``planner`` is called (on whichever worker leads) with a :class:`~spate.PlanContext`
    and returns a :class:`~spate.Plan`; sync planners run in a thread, async ones as a
    task. ``fingerprint`` must be equal across the fleet (a worker with another one is
    refused). ``instance`` defaults to the host name. ``metrics`` receives every outcome;
    by default they are recorded on OpenTelemetry instruments (:mod:`spate.telemetry`: no-ops
    until an SDK meter provider is installed). ``locality`` is this worker's failure-domain
    path, coarsest tier first (``"zone-a/rack-3/host-7"``; empty means unknown): the leader
    spreads the job across the domains at ``config.isolation_tier`` (see
    ``docs/placement.md``). ``nonce`` tells this process apart from any other under the same
    instance id; it is drawn at random, and a caller passes one only to replay a run exactly
    (the simulator derives it from its seed): two live processes must never share one.

    Raises :class:`~spate.ConfigError` for invalid arguments,
    :class:`~spate.FatalCoordinationError` when the store fails the startup probe, the
    fingerprint differs, another live worker uses this instance id, or a watermark would
    regress, and :class:`~spate.PlanError` (on the leader) for an invalid plan.
    """
    validate_job(job)
    instance = validate_instance(default_instance_id() if instance is None else instance)
    locality = validate_locality(locality)
    if nonce is not None and not (
        isinstance(nonce, str) and nonce.isascii() and nonce.isalnum() and len(nonce) <= 64
    ):
        raise ConfigError(
            f"nonce must be 1 to 64 ASCII letters or digits (or None for a random one), not "
            f"{nonce!r}"
        )
    if not callable(planner):
        raise ConfigError(f"planner must be a function taking a PlanContext, not {planner!r}")
    if config is None:
        config = Config()
    elif not isinstance(config, Config):
        raise ConfigError(f"config must be a spate.Config, not {type(config).__name__}")
    if not isinstance(fingerprint, str):
        raise ConfigError(f"fingerprint must be a str, not {type(fingerprint).__name__}")
    if not isinstance(store, Store):
        raise ConfigError(
            f"store must implement spate.store.Store (use spate_stores.open_store), not "
            f"{type(store).__name__}"
        )
    hooks = None
    if metrics is None:
        metrics = hooks = metrics_for(job, instance)
    runtime = Runtime(
        store,
        job=job,
        instance=instance,
        planner=planner,
        config=config.resolve(store.ephemeral_ttl),
        fingerprint=fingerprint,
        metrics=metrics,
        locality=locality,
        nonce=nonce,
    )
    try:
        async with trio.open_nursery() as nursery:
            runtime.attach(nursery)
            try:
                await _startup(runtime)
                nursery.start_soon(runtime.run)
                nursery.start_soon(runtime.alarm_task)
                nursery.start_soon(watch_pumps, runtime)
                nursery.start_soon(heartbeat_ticker, runtime)
                nursery.start_soon(
                    interval_ticker,
                    runtime.machine.reconcile_interval(
                        expiry_reaches_watchers=store.capabilities.expiry_reaches_watchers
                    ),
                    lambda: runtime.post(runtime.machine.reconcile),
                )
                nursery.start_soon(
                    interval_ticker,
                    runtime.machine.replan_interval,
                    lambda: runtime.post(runtime.machine.replan_tick),
                )
                await runtime.ready.wait()
                yield Coordinator(runtime)
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        leaf = meaningful_leaf(group)
        if leaf is None:
            raise
        context = leaf.__context__
        try:
            raise leaf
        finally:
            leaf.__context__ = context
    finally:
        # The session ends with the coordinator, whatever ended it (the block left, a fatal
        # error, cancellation), even while the application keeps its store client open.
        await runtime.session.close()
        if runtime.stopped is None:
            runtime.stop(_Closed())
        if hooks is not None:
            hooks.close()  # a stopped worker's levels (leader, owned) stop being reported


class _Closed(Exception):
    """Marks a coordinator stopped by leaving its block."""


# -- startup ---------------------------------------------------------------------------------


async def _startup(runtime: Runtime) -> None:
    """Run the machine's startup sequence (its steps and tries: ``membership/startup.py``)."""
    steps: dict[str, Callable[[Runtime, StartupStep], Awaitable[None]]] = {
        "session": _open_session,
        "probe": _probe,
        "join": _machine_step,
        "announce": _machine_step,
    }
    for step in runtime.machine.startup_steps:
        await _tried(runtime, step, steps[step.name])


async def _tried(
    runtime: Runtime, step: StartupStep, run: Callable[[Runtime, StartupStep], Awaitable[None]]
) -> None:
    """Try ``step`` until it succeeds, sleeping the machine's backoff between tries."""
    tries = runtime.machine.startup_tries(step)
    timeout = runtime.machine.startup_timeout(runtime.op_timeout)
    while True:
        try:
            with trio.fail_after(timeout):
                await run(runtime, step)
            return
        except Retry as exc:
            delay = tries.failed(exc)  # a benign race: said as such, not as a failure
            logger.info("%s: %s (in %.1f s)", step.what, exc, delay)
        except (StoreUnavailable, trio.TooSlowError) as exc:
            delay = tries.failed(exc)  # the last try raises FatalCoordinationError
            logger.warning("%s failed (%s); retrying in %.1f s", step.what, exc, delay)
        await trio.sleep(delay)


async def _open_session(runtime: Runtime, step: StartupStep) -> None:
    if runtime.session.current is None:
        await runtime.session.open()


async def _probe(runtime: Runtime, step: StartupStep) -> None:
    machine = runtime.machine
    with write_spans.span(runtime.scope, "probe"):
        # Each try writes keys of its own (a lost reply may have left the last try's behind).
        runtime.probes += 1
        await probe_store(
            runtime.store,
            key_prefix=machine.probe_prefix,
            session=runtime.session.current,
            scratch=machine.probe_scratch(runtime.probes),
        )


async def _machine_step(runtime: Runtime, step: StartupStep) -> None:
    await runtime.driver.run_inline(runtime.machine.startup_flow(step))
