"""``spate worker``: one real worker process of the demo job against any store.

Several of these, in terminals or under a supervisor, form a real fleet on etcd or NATS; the
chaos tests kill and stop them with signals. With ``--history`` each acknowledged commit is
appended as one JSON line, so an invariant checker can audit the fleet afterwards.
"""

from __future__ import annotations

import json
import os

import trio

from spate.config import Config
from spate.demo.workload import Dataset, DemoStats, make_handler, make_planner
from spate.events import AllComplete, Stalled
from spate.worker import SplitHandle, run_worker

__all__ = ["CRASH_EXIT", "run_demo_worker"]

CRASH_EXIT = 70
"""Exit status of a worker process that a ``crash_on`` poison split brought down."""


async def run_demo_worker(
    *,
    store_url: str,
    job: str,
    instance: str | None,
    splits: int,
    seed: int,
    batch_seconds: float,
    max_in_flight: int,
    history: str | None = None,
    locality: str = "",
    crash_on: frozenset[str] = frozenset(),
) -> AllComplete | Stalled:
    """Join ``job`` on the store at ``store_url`` and work the demo dataset until a verdict.

    ``crash_on`` names poison splits: a while after gaining one (three batches, so the
    splits gained beside it get to commit) the process ends at once (exit status
    :data:`CRASH_EXIT`), before the poison split's first commit, as a handler that crashes
    its host on bad data would.
    """
    from spate_stores import open_store

    dataset = Dataset(seed=seed, splits=splits)
    stats = DemoStats(on_event=lambda message: print(message, flush=True))
    log = await trio.open_file(history, "a", encoding="utf-8") if history else None

    async def audit(split: SplitHandle, watermark: int, completed: bool) -> None:
        assert log is not None
        record = {
            "at": trio.current_time(),
            "instance": instance,
            "split": split.id,
            "epoch": split.epoch,
            "watermark": watermark,
            "completed": completed,
        }
        await log.write(json.dumps(record) + "\n")
        await log.flush()

    work = make_handler(
        dataset,
        stats,
        instance or "worker",
        batch_seconds=batch_seconds,
        on_commit=audit if log is not None else None,
    )

    async def handler(split: SplitHandle) -> None:
        if split.id in crash_on:
            await trio.sleep(3 * batch_seconds)
            print(f"poison split {split.id}: crashing the process", flush=True)
            os._exit(CRASH_EXIT)
        await work(split)

    try:
        async with open_store(store_url) as store:
            return await run_worker(
                store,
                job=job,
                instance=instance,
                planner=make_planner(dataset),
                handler=handler,
                config=Config(max_in_flight=max_in_flight),
                fingerprint=f"demo-seed-{seed}",
                locality=locality,
            )
    finally:
        if log is not None:
            await log.aclose()
