"""``spate worker``: one real worker process of the demo job against any store.

Several of these, in terminals or under a supervisor, form a real fleet on etcd or NATS; the
chaos tests kill and stop them with signals. With ``--history`` each acknowledged commit is
appended as one JSON line, so an invariant checker can audit the fleet afterwards.
"""

from __future__ import annotations

import json

import trio

from spate.config import Config
from spate.demo.workload import Dataset, DemoStats, make_handler, make_planner
from spate.events import AllComplete, Stalled
from spate.worker import SplitHandle, run_worker

__all__ = ["run_demo_worker"]


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
) -> AllComplete | Stalled:
    """Join ``job`` on the store at ``store_url`` and work the demo dataset until a verdict."""
    from spate_stores import open_store

    dataset = Dataset(seed=seed, splits=splits)
    stats = DemoStats(on_event=lambda message: print(message, flush=True))
    inner = make_handler(dataset, stats, instance or "worker", batch_seconds=batch_seconds)
    log = await trio.open_file(history, "a", encoding="utf-8") if history else None

    async def handler(split: SplitHandle) -> None:
        if log is None:
            await inner(split)
            return
        commit = split.commit

        async def audited_commit(
            watermark: int | None, *, state: bytes = b"", completed: bool = False
        ) -> None:
            await commit(watermark, state=state, completed=completed)
            await log.write(
                json.dumps(
                    {
                        "at": trio.current_time(),
                        "instance": instance,
                        "split": split.id,
                        "epoch": split.epoch,
                        "watermark": watermark,
                        "completed": completed,
                    }
                )
                + "\n"
            )
            await log.flush()

        split.commit = audited_commit  # type: ignore[method-assign]
        await inner(split)

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
            )
    finally:
        if log is not None:
            await log.aclose()
