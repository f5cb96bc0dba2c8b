"""Graceful leaves in the shapes programs take, run against every store: one body, three stores.

The shape that matters most is a cancel scope around the *store*, not around ``run_worker``:
``with trio.move_on_after(...): async with open_store(url) as store: await run_worker(...)``.
That is what a natural Trio program and ``spate worker`` on a signal do, and the store's own
tasks (a NATS connection's reader) must outlive the cancel until the hand-backs are sent.
"""

from __future__ import annotations

import logging
import math

import pytest
import trio

import spate
from spate_stores import open_store

SPLITS = [f"s{i}" for i in range(4)]
TTL = 15.0
"""The lease of these checks: a hand-back must beat it by far (half is the bound asserted)."""


def plan(ctx: spate.PlanContext) -> spate.Plan:
    """The checks' job: SPLITS, bounded (a verdict once every split is completed)."""
    return spate.Plan([spate.SplitSpec(s, descriptor=s.encode()) for s in SPLITS], final=True)


class Commits:
    """When each worker committed each split (the store-independent record of ownership)."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, str], list[float]] = {}
        self._changed = trio.Event()

    async def wait_all(self, instance: str, since: float) -> None:
        """Return once ``instance`` has committed every split after ``since``."""
        while len(self.first_after(instance, since)) < len(SPLITS):
            await self._changed.wait()

    async def wait_all_by_anyone(self) -> None:
        """Return once every split has been committed (by any worker)."""
        while {split for _, split in self.at} < set(SPLITS):
            await self._changed.wait()

    def handler(self, instance: str) -> spate.Handler:
        """A handler committing every 0.1 s, for ever (the job ends only by leaving)."""

        async def handle(split: spate.SplitHandle) -> None:
            position = split.progress.watermark or 0
            while True:
                await trio.sleep(0.1)
                position += 1
                await split.commit(position)
                self.at.setdefault((instance, split.id), []).append(trio.current_time())
                self._changed.set()
                self._changed = trio.Event()
                if split.revoke_requested.is_set():
                    return

        return handle

    def first_after(self, instance: str, since: float) -> dict[str, float]:
        """Each split's first commit by ``instance`` after ``since``."""
        found: dict[str, float] = {}
        for (who, split), times in self.at.items():
            later = [t for t in times if t > since]
            if who == instance and later:
                found[split] = min(later)
        return found


async def cancelled_around_the_store_hands_back(
    url: str, caplog: pytest.LogCaptureFixture
) -> float:
    """A worker cancelled around its own store hands back: another commits every split soon.

    Returns the seconds from the cancel until the other worker has committed every split.
    """
    commits = Commits()
    config = spate.Config(membership_debounce=0.5)
    left_at = math.inf
    with caplog.at_level(logging.WARNING, logger="spate"):
        async with trio.open_nursery() as nursery:

            async def staying() -> None:
                async with open_store(url) as store:
                    await spate.run_worker(
                        store, job="leave", instance="b", planner=plan,
                        handler=commits.handler("b"), config=config,
                    )  # fmt: skip

            async def leaving(cancel: trio.CancelScope) -> None:
                with cancel:  # the scope encloses the store, so cancelling it closes the store too
                    async with open_store(url) as store:
                        await spate.run_worker(
                            store, job="leave", instance="a", planner=plan,
                            handler=commits.handler("a"), config=config,
                        )  # fmt: skip

            cancel = trio.CancelScope()
            nursery.start_soon(leaving, cancel)
            with trio.fail_after(60):
                await commits.wait_all("a", 0)
            nursery.start_soon(staying)
            await trio.sleep(2)  # b is present (and perhaps leads) before a leaves
            left_at = trio.current_time()
            cancel.cancel()
            with trio.fail_after(60):
                await commits.wait_all("b", left_at)
            nursery.cancel_scope.cancel()
    taken = max(commits.first_after("b", left_at).values()) - left_at
    refusals = [
        r.getMessage()
        for r in caplog.records
        if "release failed" in r.getMessage() or "without handing back" in r.getMessage()
    ]
    assert not refusals, refusals
    # Well inside a lease: the splits were handed back, not left to expire.
    assert taken < TTL / 2, taken
    return taken
