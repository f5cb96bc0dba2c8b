"""``spate worker``: one real worker process of the demo job against any store.

Several of these, in terminals or under a supervisor, form a real fleet on etcd or NATS; the
chaos tests kill and stop them with signals. With ``--history`` each acknowledged commit is
appended as one JSON line, so an invariant checker can audit the fleet afterwards.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import AsyncExitStack

import trio

from spate._cli.demo.workload import Dataset, DemoStats, make_handler, make_planner
from spate._config import Config
from spate._core.backoff import STARTUP_BACKOFF
from spate._errors import StoreUnavailable
from spate._events import AllComplete, Stalled
from spate._runtime.worker import Left, SplitHandle, run_worker
from spate._store import Store

__all__ = ["CRASH_EXIT", "run_demo_worker"]

CRASH_EXIT = 70
"""Exit status of a worker process that a ``crash_on`` poison split brought down."""

logger = logging.getLogger("spate.demo")


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
    handle_signals: bool = False,
) -> AllComplete | Stalled | Left:
    """Join ``job`` on the store at ``store_url`` and work the demo dataset until a verdict.

    ``crash_on`` names poison splits: a while after gaining one (three batches, so the
    splits gained beside it get to commit) the process ends at once (exit status
    :data:`CRASH_EXIT`), before the poison split's first commit, as a handler that crashes
    its host on bad data would.

    ``handle_signals``: as for :func:`~spate.run_worker` (``spate worker`` passes True, so
    SIGINT and SIGTERM hand its splits over, and :class:`~spate.Left` comes back).
    """
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

    config = Config(max_in_flight=max_in_flight)
    try:
        async with AsyncExitStack() as stack:
            store = await _open_store(stack, store_url, config.startup_max_attempts)
            return await run_worker(
                store,
                job=job,
                instance=instance,
                planner=make_planner(dataset),
                handler=handler,
                config=config,
                fingerprint=f"demo-seed-{seed}",
                locality=locality,
                handle_signals=handle_signals,
            )
    finally:
        if log is not None:
            await log.aclose()


async def _open_store(stack: AsyncExitStack, url: str, attempts: int) -> Store:
    """Open the store like the coordinator's startup steps: retried with capped backoff.

    Connecting is this process's first startup step: a worker (re)started while a store
    cluster elects a leader (4-9 s on JetStream) must not exit on the first unanswered
    request, any more than ``run_worker`` does in its own startup.
    """
    from spate_stores import store_from_url

    low, high = STARTUP_BACKOFF
    delay = low
    for attempt in range(1, attempts + 1):
        store = store_from_url(url)
        try:
            await store.__aenter__()
        except StoreUnavailable as exc:
            if attempt == attempts:
                raise StoreUnavailable(
                    f"opening the store did not succeed in {attempts} attempts (last: {exc}); "
                    "check that the store is reachable (a cluster may still be electing a "
                    "leader), then start the worker again"
                ) from exc
            logger.warning("opening the store failed (%s); retrying in %.1f s", exc, delay)
            await trio.sleep(delay)
            delay = min(high, delay * 2)
            continue
        stack.push_async_exit(store.__aexit__)
        return store
    raise AssertionError("attempts must be at least 1")  # Config validates it
