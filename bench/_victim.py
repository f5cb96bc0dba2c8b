"""A worker process for the failover benchmark to kill: it holds its splits and does nothing.

    python -m bench._victim STORE_URL INSTANCE SPLITS MAX_IN_FLIGHT     (from the repository root)

It joins job ``bench`` with the same plan and configuration as the benchmark's in-process
worker and prints one line per thing the benchmark waits for: ``leader`` (once it leads),
``gained <split>`` and ``lost <split>``. The benchmark ends it with SIGKILL, which is what a
crash is to etcd (the session's keepalives stop, nothing is revoked) and to NATS (renewals
stop): no hand-back, leases left to expire.
"""

from __future__ import annotations

import contextlib
import sys

import trio

from bench._fleet import JOB, failover_config, planner_of
from spate import Fenced, Gained, Lost, RevokeRequested, open_coordinator
from spate_stores import open_store


async def main(url: str, instance: str, splits: int, max_in_flight: int) -> None:
    async with (
        open_store(url) as store,
        open_coordinator(
            store,
            job=JOB,
            instance=instance,
            planner=planner_of(splits),
            config=failover_config(max_in_flight),
        ) as coord,
        trio.open_nursery() as nursery,
    ):

        async def announce_leadership() -> None:
            # Leadership has no event of its own; look until it comes.
            while not coord.is_leader:  # noqa: ASYNC110
                await trio.sleep(0.02)
            print("leader", flush=True)

        nursery.start_soon(announce_leadership)
        async for event in coord.events():
            if isinstance(event, Gained):
                print(f"gained {event.split}", flush=True)
            elif isinstance(event, Lost):
                print(f"lost {event.split}", flush=True)
            elif isinstance(event, RevokeRequested):
                # Nothing to drain: hand it back at once (and say so).
                with contextlib.suppress(Fenced):
                    await coord.release([event.split])
                print(f"lost {event.split}", flush=True)


if __name__ == "__main__":
    url, instance, splits, cap = sys.argv[1:5]
    trio.run(main, url, instance, int(splits), int(cap))
