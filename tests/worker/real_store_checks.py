"""Checks the etcd and NATS suites both run against their real store: one body, two stores."""

from __future__ import annotations

import json

import pytest
import trio

from spate import AllComplete
from spate._cli.demo.display import PlainDisplay, print_result
from spate._cli.demo.fleet import DemoOptions, run_demo
from spate._cli.main import main
from spate_stores import open_store
from tests.ops.test_ops import JOB, seed_job


async def demo_fleet_checks_out(url: str, *, chaos: bool) -> None:
    """The demo fleet (kill, zombie, scale-down, join, poison split) finishes and checks out.

    Its straggler is split for the idle lanes at the end, every residual's range is checked
    with the rest, and the closing lines say how long the job took against the unsplit least.
    """
    # (Under chaos the leadership moves, perhaps to the straggler's owner: a new leader asks
    # its own running splits too, test_a_new_leader_asks_its_own_running_split_when_lanes_sit_idle.)
    lines: list[str] = []
    result = await run_demo(
        DemoOptions(store_url=url, workers=4, splits=16, seed=3, chaos=chaos, duration=8),
        PlainDisplay(lines.append),
    )
    print_result(result, lines.append)
    assert result.ok, (result.problems, lines)
    assert isinstance(result.verdict, AllComplete)
    assert result.splits_checked == 16
    assert result.straggler is not None
    assert result.residuals_checked >= result.straggler.pieces - 1
    assert result.straggler.pieces > 1, lines
    assert any(
        line.startswith(f"splitting: straggler {result.straggler.id} was split ") for line in lines
    ), lines


def status_and_requeue_work(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`spate status --json` shows a seeded job; `spate requeue` moves its quarantined split."""

    async def seed() -> None:
        async with open_store(url) as store:
            await seed_job(store)

    trio.run(seed)
    assert main(["status", "--store", url, "--job", JOB, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["counts"]["quarantined"] == 1
    assert [s["id"] for s in document["splits"]] == ["b", "c", "a"]  # quarantined first
    assert main(["requeue", "--store", url, "--job", JOB, "b"]) == 0
    assert main(["requeue", "--store", url, "--job", JOB, "b"]) == 2
    assert "not quarantined" in capsys.readouterr().err


async def oversize_commit_fails_only_its_split(url: str) -> None:
    """A commit over the store's value size raises to the handler; escaping, it fails the split.

    The worker keeps its other split, which completes; the oversized one is quarantined at
    ``max_attempts`` with nothing of its state written.
    """
    import spate  # (a local import: this module's other checks need none of it)

    refused: list[str] = []

    async def handle(split: spate.SplitHandle) -> None:
        if split.id == "big":
            try:
                await split.commit(1, state=b"x" * (10 << 20))
            except spate.ValueTooLarge as exc:
                refused.append(str(exc))
                raise  # escapes: the split fails, the worker goes on
        for step in range(1, 6):
            await trio.sleep(0.1)
            await split.commit(step, completed=step == 5)

    def plan(ctx: spate.PlanContext) -> spate.Plan:
        return spate.Plan([spate.SplitSpec("big"), spate.SplitSpec("small")], final=True)

    config = spate.Config(max_attempts=2, membership_debounce=0.0, rebalance_delay=0.0)
    async with open_store(url) as store:
        with trio.fail_after(60):
            verdict = await spate.run_worker(
                store, job="oversize", instance="a", planner=plan, handler=handle, config=config
            )
    assert verdict == spate.Stalled(completed=1, quarantined=1)
    assert len(refused) == 2
    assert all("nothing was written" in r for r in refused)
