"""A failing sink is not a poison split: a handler that raised runs again after a backoff.

Each failure consumes an attempt while the worker keeps the split; the next run waits a
backoff that doubles from ``Config.failure_backoff`` (jittered upwards) to
``Config.failure_backoff_max``, so a short outage downstream quarantines nothing, and
``spate status`` and the ``retry_waiting`` level show the split waiting.
"""

from __future__ import annotations

import itertools
import json

import pytest
import trio
import trio.testing

import spate
from spate._ops import read_status
from spate_stores.memory import MemoryServer
from tests.worker.test_worker import JOB, client, config, planner, progress_of


async def test_a_five_second_sink_outage_quarantines_nothing_at_the_defaults(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())
    runs = 0
    outage_ends = trio.current_time() + 5.0

    async def handle(split: spate.SplitHandle) -> None:
        nonlocal runs
        runs += 1
        if trio.current_time() < outage_ends:
            raise ConnectionError("the sink's database is restarting")
        await split.commit(1, completed=True)

    with trio.fail_after(120):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle, config=config()
        )
    assert verdict == spate.AllComplete()
    record = await progress_of(store, "s00")
    assert record.completed
    assert record.epoch == 1  # one tenancy throughout: the worker kept the split
    assert 1 <= record.attempts < 4
    assert record.attempts == runs - 1  # every failed run charged one attempt, no more
    assert "ConnectionError" in record.reason


class Levels(spate.MetricsHooks):
    """Keeps every ``retry_waiting`` level reported."""

    def __init__(self) -> None:
        self.waiting: list[int] = []

    def retry_waiting(self, count: int) -> None:
        self.waiting.append(count)


async def test_a_split_waiting_to_retry_shows_in_status_and_metrics(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())
    levels = Levels()
    failed = trio.Event()
    seen: list[tuple[str, bool, int]] = []

    async def handle(split: spate.SplitHandle) -> None:
        if not failed.is_set():
            failed.set()
            raise ConnectionError("the sink is down")
        await split.commit(1, completed=True)

    async def look() -> None:
        await failed.wait()
        with trio.fail_after(30):
            while levels.waiting[-1:] != [1]:  # noqa: ASYNC110
                await trio.sleep(0.01)
        status = await read_status(store, JOB)
        (split,) = status.splits.values()
        seen.append((split.display_status, split.retrying(status.read_at_ms), split.attempts))
        assert json.loads(json.dumps(status.to_json()))["splits"][0]["retrying"] is True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(look)
        with trio.fail_after(120):
            verdict = await spate.run_worker(
                store, job=JOB, instance="a", planner=planner(1), handler=handle,
                config=config(failure_backoff=30.0, failure_backoff_max=30.0), metrics=levels,
            )  # fmt: skip
    assert verdict == spate.AllComplete()
    assert seen == [("held", True, 1)]
    assert levels.waiting == [1, 0]


async def test_the_waits_double_to_the_cap_and_the_split_is_quarantined_at_max_attempts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())
    starts: list[float] = []

    async def handle(split: spate.SplitHandle) -> None:
        starts.append(trio.current_time())
        raise ConnectionError("down for good")

    with trio.fail_after(300):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle,
            config=config(max_attempts=5, failure_backoff=2.0, failure_backoff_max=5.0),
        )  # fmt: skip
    assert isinstance(verdict, spate.Stalled)
    record = await progress_of(store, "s00")
    assert (record.status.value, record.attempts, record.epoch) == ("quarantined", 5, 2)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # 2, 4, then the cap of 5 twice, each with up to a quarter added.
    for gap, base in zip(gaps, [2.0, 4.0, 5.0, 5.0], strict=True):
        assert base <= gap <= base * 1.25 + 0.5


async def test_a_failure_backoff_of_zero_fails_and_hands_back_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = client(MemoryServer())

    async def handle(split: spate.SplitHandle) -> None:
        raise ConnectionError("down")

    with trio.fail_after(120):
        verdict = await spate.run_worker(
            store, job=JOB, instance="a", planner=planner(1), handler=handle,
            config=config(failure_backoff=0),
        )  # fmt: skip
    assert isinstance(verdict, spate.Stalled)
    record = await progress_of(store, "s00")
    assert record.epoch > 2  # every failure was a new ownership (claim, fail, claim...)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"failure_backoff": -1.0}, "failure_backoff must be zero or positive"),
        ({"failure_backoff": float("nan")}, "failure_backoff must be a finite number"),
        ({"failure_backoff": "1"}, "failure_backoff must be a finite number"),
        ({"failure_backoff": 5.0, "failure_backoff_max": 2.0}, "must be at least"),
    ],
)
def test_bad_failure_backoffs_are_config_errors(fields: dict[str, object], complaint: str) -> None:
    with pytest.raises(spate.ConfigError, match=complaint):
        spate.Config(**fields)  # type: ignore[arg-type]
