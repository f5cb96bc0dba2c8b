"""examples/splittable_backfill.py: the long range is split for the idle workers, each row once.

The example runs as a script on the real clock (as a reader runs it), and in-process under the
autojump clock, where its sink shows which split wrote each row: every row exactly once, by the
split whose final range holds it, and the job shorter than the long range alone (which is what
it takes with the leader's requests turned off).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trio.testing

EXAMPLE = Path(__file__).parents[2] / "examples" / "splittable_backfill.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("splittable_backfill_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import examples.splittable_backfill as example  # what the file loaded below is, for mypy
else:
    example = load_example()


def final_ranges(table: example.Table, sizes: tuple[int, ...]) -> dict[str, tuple[int, int]]:
    """Every split's rows at the end: its planned (or residual) range, cut at each split."""
    ranges = {}
    start = 0
    for n, size in enumerate(sizes):
        ranges[f"rows-{n:02d}"] = (start, start + size)
        start += size
    for parent, residual, first, end in table.residuals:
        assert ranges[parent][0] < first < end <= ranges[parent][1]
        assert end == ranges[parent][1], "a residual takes the rest of its parent's range"
        ranges[residual] = (first, end)
        ranges[parent] = (ranges[parent][0], first)
    return ranges


def test_the_example_runs_as_a_script_and_backfills_every_row_once() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "every row exactly once: yes" in out
    residuals = re.findall(r"^  rows-07\S* split: residual (rows-07\.r[a-z2-7]{13}) ", out, re.M)
    assert residuals, out
    makespan = re.search(r"^makespan \(first row to last\): (\d+\.\d) s; the longest", out, re.M)
    assert makespan is not None, out
    assert float(makespan[1]) < max(example.SIZES) * example.ROW_SECONDS


async def test_each_row_is_written_once_by_the_split_whose_final_range_holds_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = await example.main()
    sizes = example.SIZES
    assert example.exactly_once(table, sizes)
    assert table.residuals, "the leader asked, and the long range was split"
    assert {parent.partition(".")[0] for parent, *_ in table.residuals} == {"rows-07"}
    ranges = final_ranges(table, sizes)
    for row, writer in table.writers.items():
        start, end = ranges[writer]
        assert start <= row < end, (row, writer, ranges[writer])
    work = sum(sizes) * example.ROW_SECONDS
    assert table.first_row_at is not None, "a row was written"
    makespan = table.last_row_at - table.first_row_at
    assert makespan < max(sizes) * example.ROW_SECONDS  # shorter than the long range alone
    assert makespan >= work / 4  # and no shorter than the work spread over the lanes


async def test_without_split_requests_the_long_range_sets_the_makespan(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = attrs.evolve(example.CONFIG, split_requests=False)
    table = await example.main(config=config)
    assert example.exactly_once(table, example.SIZES)
    assert table.residuals == []
    assert table.first_row_at is not None, "a row was written"
    makespan = table.last_row_at - table.first_row_at
    assert makespan == pytest.approx(max(example.SIZES) * example.ROW_SECONDS, abs=0.1)


def test_the_report_names_every_residual_and_the_exactly_once_check() -> None:
    table = example.Table()
    sizes = (4, 8)
    for row in range(12):
        table.writes[row] = 1
    table.residuals.append(("rows-01", "rows-01.rabcdefghijklm", 8, 12))
    table.first_row_at, table.last_row_at = 1.0, 3.5
    lines = example.report(table, sizes, 2)
    assert lines[0] == "2 ranges, 12 rows, 2 workers"
    assert lines[1] == "  rows-01 split: residual rows-01.rabcdefghijklm takes rows 8-12"
    assert lines[2].startswith("makespan (first row to last): 2.5 s;")
    assert lines[3] == "every row exactly once: yes"
    table.writes[3] = 2
    assert example.report(table, sizes, 2)[-1] == "every row exactly once: NO"
