"""A fleet of ``run_worker``s committing on a store cluster while a store member dies.

Used by ``tests/clusters``; usable for your own cluster tests::

    record, stored = await run_fleet(cluster.store_url("job"), workers=2, splits=6,
                                     seconds=3, chaos=kill_and_restart_the_leader)
    assert lost(record, stored) == [] and record.duplicates() == 0


Each worker (its own store client, as a process would have) commits watermark after
watermark on every split it holds and records each commit the store acknowledged. The test
kills a store member mid-run, restarts it, and then holds the records to the promises:
every acknowledged commit is in the store (the final watermark of each split is at least
the highest one acknowledged in the latest epoch), and no commit was acknowledged twice.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import attrs
import trio

from spate import (
    Config,
    Fenced,
    Plan,
    PlanContext,
    SplitHandle,
    SplitSpec,
    StoreError,
    StoreUnavailable,
    run_worker,
)
from spate.store import Store
from spate_stores import open_store, store_from_url
from spate_testing.sim._recorder import final_listing

__all__ = ["FleetRecord", "lost", "run_fleet"]

logger = logging.getLogger("spate_testing.cluster_fleet")

JOB = "cluster-fleet"
"""The job the fleet runs."""
OPEN_ATTEMPTS = 10
"""Tries to open a worker's store client before giving up (a supervisor's restarts)."""


@attrs.define
class FleetRecord:
    """What the fleet saw."""

    acked: list[tuple[str, int, int]] = attrs.Factory(list)
    """(split, epoch, watermark) of every acknowledged commit."""
    failed: int = 0
    """Commits that raised (StoreUnavailable: outcome unknown, retried by the handler)."""
    reopened: int = 0
    """Store clients that could not be opened at once (the cluster was electing) and were
    tried again, as a process supervisor would restart a worker whose connect failed."""

    def duplicates(self) -> int:
        """Commits acknowledged more than once."""
        counts = collections.Counter(self.acked)
        return sum(n - 1 for n in counts.values() if n > 1)


def _planner(splits: int) -> Callable[[PlanContext], Plan]:
    def plan(_: PlanContext) -> Plan:
        return Plan([SplitSpec(f"s{n:02d}") for n in range(splits)], final=True)

    return plan


async def run_fleet(
    url: str,
    *,
    workers: int,
    splits: int,
    seconds: float,
    chaos: Callable[[], Awaitable[None]],
) -> tuple[FleetRecord, dict[str, int]]:
    """Run the fleet for ``seconds`` after ``chaos``; the records and stored watermarks.

    The workers start, commit for 1.5 s, then ``chaos`` runs (it may kill and restart store
    members) and the fleet goes on for ``seconds`` more; the stored watermark of each split
    is read last.
    """
    record = FleetRecord()

    async def handler(split: SplitHandle) -> None:
        watermark = int(split.progress.watermark or 0)  # resume where the last owner stopped
        while True:
            watermark += 1
            try:
                await split.commit(watermark)
            except Fenced:
                return
            except (StoreUnavailable, StoreError):
                record.failed += 1
                await trio.sleep(0.01)
                continue
            record.acked.append((split.id, split.epoch, watermark))
            await trio.sleep(0.01)

    async def open_client(stack: AsyncExitStack) -> Store:
        # Opening a client is the application's step, outside run_worker's promises: it
        # raises StoreUnavailable while the cluster cannot answer (a stream election).
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            store = store_from_url(url)
            try:
                await store.__aenter__()
            except StoreUnavailable:
                if attempt == OPEN_ATTEMPTS:
                    raise
                record.reopened += 1
                await trio.sleep(0.5)
                continue
            stack.push_async_exit(store.__aexit__)
            return store
        raise AssertionError("unreachable")

    async def worker(number: int) -> None:
        try:
            async with AsyncExitStack() as stack:
                store = await open_client(stack)
                await run_worker(
                    store,
                    job=JOB,
                    instance=f"w{number}",
                    planner=_planner(splits),
                    handler=handler,
                    config=Config(max_in_flight=splits),
                )
        except Exception:
            # run_worker survives an unavailable store; anything out of it is a finding, and
            # the nursery's group would hide where it came from: log the whole traceback.
            logger.exception("fleet worker w%d stopped with an error", number)
            raise

    async with trio.open_nursery() as nursery:
        for number in range(workers):
            nursery.start_soon(worker, number)
        await trio.sleep(1.5)
        await chaos()
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    # The cluster may still be settling after the chaos (a restarted member catching up, an
    # election): retry the final read like any client would, for a while.
    with trio.fail_after(60):
        while True:
            try:
                async with open_store(url) as store:
                    final = await final_listing(store, JOB, terminated=False)
                break
            except StoreUnavailable:
                await trio.sleep(0.5)
    return record, {s.split: int(s.watermark or 0) for s in final.splits}


def lost(record: FleetRecord, stored: dict[str, int]) -> list[str]:
    """Acknowledged commits the store does not hold, as messages (empty: none lost).

    Per split, the highest acknowledged watermark of the latest epoch must be stored.
    """
    latest: dict[str, tuple[int, int]] = {}
    for split, epoch, watermark in record.acked:
        latest[split] = max(latest.get(split, (0, 0)), (epoch, watermark))
    return [
        f"{split}: acknowledged {watermark} (epoch {epoch}), stored {stored.get(split)}"
        for split, (epoch, watermark) in sorted(latest.items())
        if stored.get(split, 0) < watermark
    ]
