"""A rolling restart on the memory store: each worker replaced in turn by a new one, new name.

The in-process version of the process fleets in ``tests/stores/*/test_*_deploys.py``: three
workers, each replaced one at a time by a worker with a new name (as a Deployment does), on
the virtual clock; every split's commits, whoever made them, must come at most a few seconds
apart. Run with ``-s`` to see the longest gap of each split.
"""

from __future__ import annotations

import itertools
import secrets

import trio
import trio.testing

import spate
from spate_stores import open_store
from tests.worker.leave_checks import SPLITS, TTL, Commits, plan


async def test_a_rolling_restart_idles_no_split_on_memory(
    autojump_clock: trio.testing.MockClock,
) -> None:
    url = f"memory://roll-{secrets.token_hex(4)}?ttl={TTL:g}"
    commits = Commits()
    config = spate.Config(membership_debounce=0.5)
    async with open_store(url) as store, trio.open_nursery() as nursery:

        async def worker(name: str, scope: trio.CancelScope) -> None:
            with scope:
                await spate.run_worker(
                    store, job="roll", instance=name, planner=plan,
                    handler=commits.handler(name), config=config,
                )  # fmt: skip

        scopes = []
        for number in range(3):
            scopes.append(trio.CancelScope())
            nursery.start_soon(worker, f"w{number}", scopes[-1])
        with trio.fail_after(60):
            await commits.wait_all_by_anyone()
        started = trio.current_time()
        for number in range(3):
            scopes.append(trio.CancelScope())
            nursery.start_soon(worker, f"w{number + 3}", scopes[-1])
            await trio.sleep(3)  # the new worker joins
            scopes[number].cancel()  # the old one leaves (a graceful leave)
            await trio.sleep(5)
        nursery.cancel_scope.cancel()
    gaps = {}
    for split in SPLITS:
        times = sorted(t for (_, s), seen in commits.at.items() if s == split for t in seen)
        times = [t for t in times if t >= started]
        gaps[split] = max(b - a for a, b in itertools.pairwise(times))
    print(f"memory: longest gap per split { ({s: round(g, 2) for s, g in gaps.items()}) }")
    assert max(gaps.values()) < TTL / 2, gaps
