from __future__ import annotations

import re

import trio
import trio.testing

from spate import AllComplete
from spate._cli.demo.display import PlainDisplay, print_result
from spate._cli.demo.fleet import DemoOptions, DemoResult, Straggler, run_demo
from spate._cli.demo.workload import DemoStats

SAVING = re.compile(
    r"splitting: straggler (range-\d{4}) was split (once|twice|\d+ times)(; .*)?; the job took "
    r"(\d+\.\d) s instead of at least ~(\d+) s without splitting"
)
PACE = re.compile(
    r"  \(without splitting: (range-\d{4}) started at \d+\.\d s, and its \d+ records take "
    r"\d+\.\d s alone at the demo's pace of 50 records per \d\.\d{3} s(, then the operator's "
    r"fix took \d+\.\d s)?; failovers would only add to that\)"
)


def assert_the_straggler_was_split_and_the_saving_printed(
    result: DemoResult, lines: list[str]
) -> None:
    """The straggler ended in several splits, all checked, and the closing lines say so."""
    straggler = result.straggler
    assert straggler is not None
    assert straggler.pieces > 1, "the leader asked, and the straggler's handler split it"
    assert result.residuals_checked >= straggler.pieces - 1
    assert straggler.least_without_splitting is not None
    assert straggler.least_without_splitting > result.seconds  # splitting saved time
    (saving,) = [m for m in map(SAVING.fullmatch, lines) if m is not None]
    assert saving[1] == straggler.id
    assert float(saving[4]) == round(result.seconds, 1)
    assert int(saving[5]) == round(straggler.least_without_splitting)
    (pace,) = [m for m in map(PACE.fullmatch, lines) if m is not None]
    assert pace[1] == straggler.id
    n = result.residuals_checked
    check = (
        f"check: {result.splits_checked} splits match a single-pass computation (with their "
        f"{n} residual{'' if n == 1 else 's'}: the completed ranges tile every split's range "
        "exactly)"
    )
    assert check in lines


async def test_the_demo_without_chaos_completes_and_checks_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lines: list[str] = []
    result = await run_demo(
        DemoOptions(workers=3, splits=12, seed=5, chaos=False, duration=10),
        PlainDisplay(lines.append),
    )
    print_result(result, lines.append)
    assert result.ok, result.problems
    assert isinstance(result.verdict, AllComplete)
    assert result.splits_checked == 12
    assert result.replayed == 0
    assert_the_straggler_was_split_and_the_saving_printed(result, lines)


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
    # A whole zone is killed (the victim and the joiner): kills, not partitions.
    assert result.faults["kill"] == 2
    assert "partition" not in result.faults
    assert "faults injected: freeze 1, kill 2" in lines
    assert result.blast_radius is not None
    before, after = result.blast_radius
    assert before < 0.5  # spread over three zones
    assert after is not None
    assert after >= 0.5  # two zones left
    assert result.faults["freeze"] == 1
    assert result.handover_seconds
    assert result.late_writes.get("refused", 0) >= 1
    # Replays are counted apart: the folded total is the dataset's, never more.
    assert result.dataset is not None
    assert result.stats.processed == result.dataset.total_records
    assert result.replayed == result.stats.replayed
    assert any(
        re.fullmatch(
            rf"records folded: {result.stats.processed}, and \d+ replayed after failures", ln
        )
        for ln in lines
    )
    assert_the_straggler_was_split_and_the_saving_printed(result, lines)


def _result(seconds: float, pieces: int, others: int = 0, fix: float = 0.0) -> DemoResult:
    straggler = Straggler(
        id="range-0007",
        records=6400,
        pieces=pieces,
        started=2.0,
        alone=25.6,
        batch=50,
        batch_seconds=0.2,
        others_split=others,
        fix=fix,
    )
    return DemoResult(
        verdict=AllComplete(),
        ok=True,
        problems=[],
        seconds=seconds,
        stats=DemoStats(),
        splits_checked=8,
        handover_seconds=[],
        resumed=0,
        replayed=0,
        requeued=[],
        faults={},
        late_writes={},
        residuals_checked=pieces - 1,
        straggler=straggler,
    )


def _closing(result: DemoResult) -> list[str]:
    lines: list[str] = []
    print_result(result, lines.append)
    return [ln for ln in lines if ln.startswith(("splitting:", "  ("))]


def test_the_closing_lines_claim_a_saving_only_when_the_unsplit_straggler_ends_later() -> None:
    assert _closing(_result(12.3, pieces=4, others=1, fix=1.5)) == [
        "splitting: straggler range-0007 was split 3 times; 1 other split was split too; the "
        "job took 12.3 s instead of at least ~29 s without splitting",
        "  (without splitting: range-0007 started at 2.0 s, and its 6400 records take 25.6 s "
        "alone at the demo's pace of 50 records per 0.200 s, then the operator's fix took "
        "1.5 s; failovers would only add to that)",
    ]
    # The faults made the job longer than the straggler alone would have: no saving claimed.
    slow = _closing(_result(31.0, pieces=2))
    assert slow[0] == (
        "splitting: straggler range-0007 was split once; the job took 31.0 s, and without "
        "splitting it would have taken at least ~28 s (the faults, not the straggler, set its "
        "length)"
    )
    unsplit = _closing(_result(28.0, pieces=1))
    assert unsplit[0] == (
        "splitting: straggler range-0007 was not split; the job took 28.0 s, and the straggler "
        "alone could not have ended before ~28 s"
    )
    assert unsplit[1].startswith("  (unsplit: range-0007 started at 2.0 s")


def test_the_closing_lines_explain_late_writes_that_landed() -> None:
    result = _result(12.3, pieces=2)
    result.late_writes = {"refused": 4, "landed": 3}
    result.stats.fenced = 1
    lines: list[str] = []
    print_result(result, lines.append)
    (counts,) = [ln for ln in lines if ln.startswith("commits:")]
    assert counts.endswith("(late store writes refused 4, landed 3; commits fenced 1)")
    (landed,) = [ln for ln in lines if ln.startswith("  landed 3: ")]
    # Said plainly: the landed writes were legal, so nobody reads them as a safety failure.
    assert "were still legal" in landed
    assert "no other worker had written those keys in between" in landed
    assert "every late write over a newer owner was refused" in landed
    # Nothing landed, nothing to explain.
    quiet: list[str] = []
    result.late_writes = {"refused": 4}
    print_result(result, quiet.append)
    assert not [ln for ln in quiet if "landed" in ln and not ln.startswith("commits:")]
