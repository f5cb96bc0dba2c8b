"""`spate demo` run twice on one store namespace computes each result anew.

An earlier run's job, finished or left behind, used to lend the next run its records: the
check "matched" data nobody computed, in no time, with nothing folded.
"""

from __future__ import annotations

import trio
import trio.testing

from spate._cli.demo.display import PlainDisplay, print_result
from spate._cli.demo.fleet import DemoOptions, run_demo
from spate_stores import open_store

URL = "memory://demo-reruns?ttl=3"


async def test_the_demo_run_twice_on_one_namespace_computes_each_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    jobs = []
    # The namespace stays open between the runs, as a real store's does.
    async with open_store(URL):
        for _ in range(2):
            lines: list[str] = []
            options = DemoOptions(
                store_url=URL, workers=2, splits=6, seed=3, chaos=False, duration=4
            )
            result = await run_demo(options, PlainDisplay(lines.append))
            print_result(result, lines.append)
            assert result.ok, result.problems
            assert result.splits_checked == 6
            assert result.stats.processed > 0, "every run folds its own records"
            assert result.seconds > 1.0
            assert f"job: {options.job}" in lines
            jobs.append(options.job)
    assert jobs[0] != jobs[1]
    assert all(job.startswith("spate-demo-") for job in jobs)
