"""SplitHandle.fence, SplitHandle.decline_revoke and run_worker(metrics=...)."""

from __future__ import annotations

import trio
import trio.testing

import spate
from spate._core.records import EPOCH_BITS
from spate_stores.memory import MemoryServer
from tests.worker.test_worker import JOB, client, config, planner, wait_until


async def test_every_new_ownership_of_a_split_gets_a_larger_fence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    fences: list[int] = []

    async def handle(split: spate.SplitHandle) -> None:
        fences.append(split.fence)
        # The job's incarnation above the epoch, within a signed 64-bit integer.
        assert split.fence & (2**EPOCH_BITS - 1) == split.epoch
        assert split.fence >> EPOCH_BITS > 0
        assert split.fence < 2**63
        if len(fences) < 3:
            await split.commit(len(fences))
            raise RuntimeError("fail it: the next tenancy is a new ownership")
        await split.commit(len(fences), completed=True)

    with trio.fail_after(120):
        verdict = await spate.run_worker(
            client(server), job=JOB, instance="a", planner=planner(1), handler=handle,
            config=config(failure_backoff=0),  # a raise hands the split back at once
        )  # fmt: skip
    assert verdict == spate.AllComplete()
    assert len(fences) == 3
    assert all(type(f) is int for f in fences)
    assert fences == sorted(set(fences))  # strictly increasing


async def test_decline_revoke_forces_the_revocation_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = MemoryServer()
    revoked_at: dict[str, float] = {}
    cancelled_at: dict[str, float] = {}

    async def declining(split: spate.SplitHandle) -> None:
        try:
            await split.revoke_requested.wait()
            revoked_at[split.id] = trio.current_time()
            await split.decline_revoke()
            await trio.sleep_forever()
        finally:
            cancelled_at[split.id] = trio.current_time()

    async def idle(split: spate.SplitHandle) -> None:
        await trio.sleep_forever()

    drain_deadline = 30.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server), job=JOB, instance="a", planner=planner(4), handler=declining,
                config=config(drain_deadline=drain_deadline),
            )
        )  # fmt: skip
        await trio.sleep(5)
        nursery.start_soon(
            lambda: spate.run_worker(
                client(server), job=JOB, instance="b", planner=planner(4), handler=idle,
                config=config(drain_deadline=drain_deadline),
            )
        )  # fmt: skip
        await wait_until(lambda: len(revoked_at) == 2 and len(cancelled_at) == 2)
        nursery.cancel_scope.cancel()
    for split, revoked in revoked_at.items():
        # Without the decline the handler would run until the drain deadline.
        assert cancelled_at[split] - revoked < 1.0


async def test_decline_revoke_without_a_revocation_does_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hooks = Outcomes()
    declined: list[str] = []

    async def handle(split: spate.SplitHandle) -> None:
        await split.decline_revoke()
        declined.append(split.id)
        assert not split.revoke_requested.is_set()
        await split.commit(1, completed=True)  # still the owner: the commit lands

    with trio.fail_after(120):
        verdict = await spate.run_worker(
            client(MemoryServer()), job=JOB, instance="a", planner=planner(2), handler=handle,
            config=config(), metrics=hooks,
        )  # fmt: skip
    assert verdict == spate.AllComplete()
    # Each split was held once, never lost and never revoked: nothing was forced.
    assert sorted(declined) == ["s00", "s01"]
    assert len(hooks.acquired_reasons) == 2
    assert hooks.lost_reasons == []
    assert hooks.revocations == []


class Outcomes(spate.MetricsHooks):
    def __init__(self) -> None:
        self.acquired_reasons: list[str] = []
        self.lost_reasons: list[str] = []
        self.revocations: list[str] = []

    def acquired(self, reason: str) -> None:
        self.acquired_reasons.append(reason)

    def lost(self, reason: str) -> None:
        self.lost_reasons.append(reason)

    def revocation(self, outcome: str) -> None:
        self.revocations.append(outcome)


class Counting(spate.MetricsHooks):
    def __init__(self) -> None:
        self.acquired_reasons: list[str] = []
        self.levels: spate.Gauges | None = None

    def acquired(self, reason: str) -> None:
        self.acquired_reasons.append(reason)

    def gauges(self, levels: spate.Gauges) -> None:
        self.levels = levels


async def test_run_worker_reports_to_the_metrics_hooks_it_is_given(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hooks = Counting()

    async def handle(split: spate.SplitHandle) -> None:
        await split.commit(1, completed=True)

    with trio.fail_after(120):
        await spate.run_worker(
            client(MemoryServer()), job=JOB, instance="a", planner=planner(3), handler=handle,
            config=config(), metrics=hooks,
        )  # fmt: skip
    assert hooks.acquired_reasons == ["create"] * 3
    assert hooks.levels is not None
    assert hooks.levels.completed == 3
