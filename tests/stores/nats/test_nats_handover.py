"""A graceful hand-over on a real nats-server: the survivor claims every split without a pause.

The leaver drops its leases beside its presence, so the leader can see the session end before
a lease's delete and take that lease over by CAS on a revision the delete has just moved. The
claim then reads the key again and claims at once; before, the split was held back for the
pause after an error (one second), in about half of the 16-split hand-overs.
"""

from __future__ import annotations

import logging
import secrets

import pytest
import trio

from spate import Config, Plan, PlanContext, SplitHandle, SplitSpec, run_worker
from spate_stores import open_store
from spate_testing.servers.nats import NatsServer

pytestmark = pytest.mark.nats

HELD = 16
"""Splits each worker holds before the leave."""
RUNS = 20


def _plan(ctx: PlanContext) -> Plan:
    ids = [f"s{n:02d}" for n in range(2 * HELD)]
    return Plan([SplitSpec(i) for i in ids if i not in ctx.known], final=True)


async def _hand_over(url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Two workers share the job; the follower leaves; the leader owns everything again."""
    config = Config(max_in_flight=2 * HELD, rebalance_delay=0.0, membership_debounce=0.5)
    held: dict[str, set[str]] = {"survivor": set(), "victim": set()}
    changed = trio.Event()

    def handler_of(name: str):  # type: ignore[no-untyped-def]
        async def handler(split: SplitHandle) -> None:
            nonlocal changed
            held[name].add(split.id)
            changed.set()
            try:
                await split.revoke_requested.wait()
            finally:
                held[name].discard(split.id)
                changed.set()

        return handler

    async def until(condition, seconds: float) -> None:  # type: ignore[no-untyped-def]
        nonlocal changed
        with trio.fail_after(seconds):
            while not condition():
                changed = trio.Event()
                await changed.wait()

    async with (
        open_store(url) as survivor_store,
        open_store(url) as victim_store,
        trio.open_nursery() as nursery,
    ):
        victim_scope = trio.CancelScope()

        async def worker(name: str, store, scope: trio.CancelScope) -> None:  # type: ignore[no-untyped-def]
            with scope:
                await run_worker(
                    store, job="ho", instance=name, planner=_plan, handler=handler_of(name),
                    config=config,
                )  # fmt: skip

        nursery.start_soon(worker, "survivor", survivor_store, trio.CancelScope())
        await until(lambda: len(held["survivor"]) == 2 * HELD, 30)  # it leads and holds all
        nursery.start_soon(worker, "victim", victim_store, victim_scope)

        def shared() -> bool:  # both hold a share, each split once
            survivor, victim = held["survivor"], held["victim"]
            return len(victim) >= HELD // 2 and len(survivor | victim) == 2 * HELD

        await until(shared, 60)
        caplog.clear()  # (a claim refused while the join moved splits is not the hand-over)
        victim_scope.cancel()
        await until(lambda: len(held["survivor"]) == 2 * HELD, 30)
        nursery.cancel_scope.cancel()


async def test_a_followers_hand_over_is_claimed_without_a_retry_pause_in_every_run(
    spate_nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="spate.claims")
    for run in range(RUNS):
        url = spate_nats_server.store_url(f"ho-{secrets.token_hex(4)}", ttl=6.0)
        await _hand_over(url, caplog)
        paused = [r.getMessage() for r in caplog.records if "held back" in r.getMessage()]
        assert not paused, f"run {run}: {paused}"
