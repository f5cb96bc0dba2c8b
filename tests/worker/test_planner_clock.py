"""Where a synchronous planner runs: inline under a MockClock, in a thread otherwise."""

from __future__ import annotations

import threading
import time

import pytest
import trio
import trio.testing

import spate
from spate_stores.memory import MemoryStore

RUNS = 20


def run_one_job(config: spate.Config, clock: trio.abc.Clock | None) -> list[str]:
    """One worker, two splits, a sync planner: returns the names of the planner's threads."""
    threads: list[str] = []

    def plan(ctx: spate.PlanContext) -> spate.Plan:
        threads.append(threading.current_thread().name)
        time.sleep(0.01)  # real work takes real time (reading a catalogue, listing files)
        ids = [i for i in ("a", "b") if i not in ctx.known]
        return spate.Plan([spate.SplitSpec(i) for i in ids], final=True)

    async def handle(split: spate.SplitHandle) -> None:
        await split.commit(1, completed=True)

    async def main() -> spate.AllComplete | spate.Stalled:
        async with MemoryStore() as store:
            with trio.fail_after(300):
                return await spate.run_worker(
                    store, job="j", instance="w", planner=plan, handler=handle, config=config
                )

    assert trio.run(main, clock=clock) == spate.AllComplete()
    return threads


def test_a_sync_planner_under_the_autojump_clock_makes_progress_in_every_run() -> None:
    # Planning in a thread here let the virtual clock run ahead while the thread worked: with
    # a planner taking 10 ms, every run stalled past the 300 virtual seconds allowed.
    main_thread = threading.current_thread().name
    for _ in range(RUNS):
        threads = run_one_job(spate.Config(), trio.testing.MockClock(autojump_threshold=0))
        assert threads
        assert set(threads) == {main_thread}


def test_a_sync_planner_runs_in_a_thread_on_the_real_clock() -> None:
    threads = run_one_job(spate.Config(), None)
    assert threads
    assert threading.current_thread().name not in threads


def test_planner_thread_true_keeps_a_thread_even_under_a_mock_clock() -> None:
    # Autojump paused, so the thread cannot lose the race this setting opts into.
    threads = run_one_job(
        # (No join window: a clock that never jumps would never end it.)
        spate.Config(planner_thread=True, membership_debounce=0.0),
        trio.testing.MockClock(autojump_threshold=float("inf")),
    )
    assert threads
    assert threading.current_thread().name not in threads


@pytest.mark.parametrize("value", [0, "yes"])
def test_planner_thread_must_be_a_bool_or_none(value: object) -> None:
    with pytest.raises(spate.ConfigError, match="planner_thread"):
        spate.Config(planner_thread=value)  # type: ignore[arg-type]
