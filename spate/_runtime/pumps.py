"""What feeds the loop: a watch pump per keyspace, and the timers.

None of these write or decide anything; each posts inputs to the loop. A watch pump
re-watches with backoff when its stream breaks, and hands the loop each new snapshot as an
authoritative listing (rebuilding the view). The heartbeat is jittered around a third of the
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
from spate._errors import StoreUnavailable
from spate._runtime.bulk import collector_paused
from spate._runtime.loop import Runtime
from spate._store import Delete, Entry, Keyspace, Put, SnapshotDone

__all__ = ["heartbeat_ticker", "interval_ticker", "watch_pump"]

logger = logging.getLogger("spate.pumps")


async def watch_pump(runtime: Runtime, keyspace: Keyspace) -> None:
    """Keep a watch of the job's keys in ``keyspace`` open, forever, posting what it sees."""
    machine = runtime.machine
    backoff = Backoff.of(REWATCH_BACKOFF)
    while True:
        # Posted before opening, so the machine knows which keys it learned after the snapshot.
        runtime.post(partial(machine.watch_opening, keyspace))
        try:
            # Establishing the watch (up to its snapshot) is bounded; the live tail is not.
            with trio.CancelScope(deadline=trio.current_time() + runtime.op_timeout) as opening:
                async with runtime.store.watch(keyspace, machine.watch_prefix) as events:
                    snapshot: list[Entry] | None = []
                    async for event in events:
                        if snapshot is not None:
                            if isinstance(event, Put):
                                snapshot.append(event.entry)
                            elif isinstance(event, SnapshotDone):
                                opening.deadline = math.inf
                                runtime.post(partial(_fold_snapshot, machine, keyspace, snapshot))
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


def _fold_snapshot(machine: Machine, keyspace: Keyspace, snapshot: list[Entry]) -> None:
    with collector_paused(len(snapshot)):
        machine.watch_snapshot(keyspace, snapshot)


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
