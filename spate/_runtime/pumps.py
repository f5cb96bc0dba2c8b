"""What feeds the loop: a watch pump per wanted watch, and the timers.

None of these write or decide anything; each posts inputs to the loop. The machine says which
watches it wants (:attr:`Machine.watches <spate._core.machine.Machine.watches>`: a follower's
few exact keys, or the leader's prefixes), and :func:`watch_pumps` keeps one pump open for
each, opening and closing pumps as that changes. A watch pump re-watches with backoff when
its stream breaks, and hands the loop each new snapshot as an authoritative listing of its
scope (rebuilding that part of the view). The heartbeat is jittered around a third of the
lease so workers started together do not renew in lockstep; reconcile and replan are plain
intervals.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from functools import partial

import trio

from spate._core.backoff import REWATCH_BACKOFF, Backoff
from spate._core.machine import Machine
from spate._core.view.scopes import WatchScope
from spate._errors import StoreUnavailable
from spate._runtime.bulk import collector_paused
from spate._runtime.loop import Runtime
from spate._store import Delete, Entry, Put, SnapshotDone

__all__ = ["heartbeat_ticker", "interval_ticker", "watch_pump", "watch_pumps"]

logger = logging.getLogger("spate.pumps")


async def watch_pumps(runtime: Runtime) -> None:
    """Keep one :func:`watch_pump` open for each watch the machine wants, forever."""
    running: dict[WatchScope, trio.CancelScope] = {}
    async with trio.open_nursery() as nursery:
        while True:
            wanted = runtime.machine.watches
            for scope in [s for s in running if s not in wanted]:
                running.pop(scope).cancel()
            for scope in wanted:
                if scope not in running:
                    running[scope] = await nursery.start(_cancellable_pump, runtime, scope)
            await runtime.watches_changed()


async def _cancellable_pump(
    runtime: Runtime, scope: WatchScope, *, task_status: trio.TaskStatus[trio.CancelScope]
) -> None:
    with trio.CancelScope() as cancel:
        task_status.started(cancel)
        await watch_pump(runtime, scope)


async def watch_pump(runtime: Runtime, scope: WatchScope) -> None:
    """Keep the watch ``scope`` open, forever, posting what it sees."""
    machine = runtime.machine
    keyspace = scope.keyspace
    backoff = Backoff.of(REWATCH_BACKOFF)
    while True:
        # Posted before opening, so the machine knows which keys it learned after the snapshot.
        runtime.post(partial(machine.watch_opening, scope))
        try:
            # Establishing the watch (up to its snapshot) is bounded; the live tail is not.
            with trio.CancelScope(deadline=trio.current_time() + runtime.op_timeout) as opening:
                async with runtime.store.watch(keyspace, scope.key, exact=scope.exact) as events:
                    snapshot: list[Entry] | None = []
                    async for event in events:
                        if snapshot is not None:
                            if isinstance(event, Put):
                                snapshot.append(event.entry)
                            elif isinstance(event, SnapshotDone):
                                opening.deadline = math.inf
                                runtime.post(partial(_fold_snapshot, machine, scope, snapshot))
                                snapshot = None
                                backoff.reset()
                        elif isinstance(event, Put | Delete):
                            runtime.watch_event(keyspace, event)
            if opening.cancelled_caught:
                logger.warning(
                    "opening the %s watch took longer than op_timeout; re-watching", keyspace.value
                )
            else:
                logger.warning("the %s watch ended; re-watching", keyspace.value)
        except StoreUnavailable as exc:
            logger.warning("the %s watch broke (%s); re-watching", keyspace.value, exc)
        await trio.sleep(backoff.delay())


def _fold_snapshot(machine: Machine, scope: WatchScope, snapshot: list[Entry]) -> None:
    with collector_paused(len(snapshot)):
        machine.watch_snapshot(scope, snapshot)


async def heartbeat_ticker(runtime: Runtime) -> None:
    """Post a heartbeat on the machine's schedule (a jittered third of the lease)."""
    machine = runtime.machine
    round_ = 0
    while True:
        await trio.sleep(machine.heartbeat_delay(round_))
        round_ += 1
        runtime.post(runtime.heartbeat)


async def interval_ticker(interval: float, post: Callable[[], None]) -> None:
    """Call ``post`` every ``interval`` seconds."""
    while True:
        await trio.sleep(interval)
        post()
