from __future__ import annotations

import re

import trio
import trio.testing

from spate import AllComplete
from spate._cli.demo.display import PlainDisplay, print_result
from spate._cli.demo.fleet import DemoOptions, run_demo
from spate._cli.demo.workload import Dataset


async def test_the_demo_without_chaos_completes_and_checks_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lines: list[str] = []
    result = await run_demo(
        DemoOptions(workers=3, splits=12, seed=5, chaos=False, duration=10),
        PlainDisplay(lines.append),
    )
    assert result.ok, result.problems
    assert isinstance(result.verdict, AllComplete)
    assert result.splits_checked == 12
    assert result.replayed == 0


async def test_the_demo_with_chaos_recovers_from_every_fault_and_checks_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lines: list[str] = []
    result = await run_demo(
        DemoOptions(workers=4, splits=24, seed=1, chaos=True, duration=10),
        PlainDisplay(lines.append),
    )
    print_result(result, lines.append)
    print("\n".join(lines))
    assert result.ok, result.problems
    assert isinstance(result.verdict, AllComplete)
    assert result.requeued  # the poison split was quarantined, then requeued and finished
    assert result.faults["partition"] == 2  # a whole zone (the victim and the joiner)
    assert result.blast_radius is not None
    before, after = result.blast_radius
    assert before < 0.5  # spread over three zones
    assert after is not None
    assert after >= 0.5  # two zones left
    assert result.faults["freeze"] == 1
    assert result.handover_seconds
    assert result.late_writes.get("refused", 0) >= 1
    # Replays are counted apart: the folded total is the dataset's, never more.
    assert result.stats.processed == Dataset(seed=1, splits=24).total_records
    assert result.replayed == result.stats.replayed
    assert any(
        re.fullmatch(
            rf"records folded: {result.stats.processed}, and \d+ replayed after failures", ln
        )
        for ln in lines
    )
