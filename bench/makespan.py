"""Makespan: how long a bounded job takes a fleet, against the ideal, and what it moves.

The "before" figures of the makespan issue, run as a new user would: the memory store under
Trio's ``MockClock`` (so every figure is exact virtual time), default :class:`spate.Config`
but ``max_in_flight``, every :func:`spate.run_worker` of the fleet started at the same virtual
instant. A split is a count of items, one item a second of virtual time (a 60 s split is 60
items, each a ``trio.sleep(1)``); the handler resumes from its split's committed watermark
(the items done), commits it every 15 items and at the end (``completed=True``), and returns
when ``revoke_requested`` is set, right after a commit. A split lost before it could commit
(a revocation whose drain outlasted ``drain_deadline``) replays its uncommitted items.

Per run: the *makespan* (virtual time from the start until every ``run_worker`` returned its
verdict), *ownership moves* (every gain of a split after its first), and *items replayed*
(items processed beyond the job's total). Each scenario runs over several seeds — the seed
picks the instance names, their process nonces and which splits are the long ones — and
reports the median and the worst. The scenarios and their targets:

* **started together** — equal splits of 60 s: 0 moves, 0 replayed, makespan ≤ 1.05x the
  ideal (the longest split, or total work / lanes if that is longer);
* **end of an uneven job** — 2 workers, 6 splits of 30 s and 6 of 120 s: makespan ≤ 1.05x
  the longest split;
* **a skewed job** — 8 splits, one 16x the others, 4 workers of 1 lane: ≤ 1.3x the ideal
  (total work / lanes), which needs splitting: the handler splits what is left in two at a
  commit point whenever the leader asks (``SplitHandle.split_requested``), and the suite also
  reports the store writes each accepted request cost (target ≤ 3).

Nothing is asserted. Run alone with ``python -m bench --only makespan --stores memory``.
"""

from __future__ import annotations

import collections
import random
import statistics
import time
from collections.abc import Sequence

import attrs
import trio
import trio.testing

from bench._harness import Options, Row, namespace
from spate import (
    AllComplete,
    Config,
    MetricsHooks,
    Plan,
    PlanContext,
    SplitHandle,
    SplitSpec,
    run_worker,
)
from spate._metrics import WriteOutcome
from spate_stores.memory import MemoryStore

COMMIT_EVERY = 15
"""Items (virtual seconds) between two commits of a split."""
SEEDS = 8
QUICK_SEEDS = 3
JOB = "makespan"


@attrs.frozen
class Scenario:
    """One fleet and job of the suite's scenarios (the module's docstring)."""

    label: str
    workers: int
    lanes: int
    lengths: tuple[int, ...]
    """Items of each split (its length in seconds)."""
    ideal_is_total: bool = False
    """Measure against total work / lanes alone (a job that needs splitting to reach it)."""
    target: float = 1.05
    together: bool = True
    """The targets of a fleet started together: no moves, nothing replayed."""

    @property
    def ideal(self) -> float:
        """The shortest makespan the fleet could reach without splitting splits."""
        spread = sum(self.lengths) / (self.workers * self.lanes)
        return spread if self.ideal_is_total else max(spread, max(self.lengths))


SCENARIOS = (
    Scenario("started together, 2 workers, 12 splits, 12 lanes each", 2, 12, (60,) * 12),
    Scenario("started together, 8 workers, 20 splits, 8 lanes each", 8, 8, (60,) * 20),
    Scenario("started together, 8 workers, 64 splits, 64 lanes each", 8, 64, (60,) * 64),
    Scenario("started together, 4 workers, 32 splits, 8 lanes each", 4, 8, (60,) * 32),
    Scenario(
        "end of an uneven job, 2 workers, 6 splits of 30 s + 6 of 120 s",
        2,
        Config().max_in_flight,
        (30,) * 6 + (120,) * 6,
        together=False,
    ),
    Scenario(
        "skewed job, 4 workers of 1 lane, 8 splits, one 16x",
        4,
        1,
        (60,) * 7 + (960,),
        ideal_is_total=True,
        target=1.3,
        together=False,
    ),
)


@attrs.frozen
class Outcome:
    """One run of a scenario."""

    makespan: float
    moves: int
    replayed: int
    complete: bool
    splits: int = 0
    """Splits the handlers made (each answering one of the leader's requests)."""
    split_writes: int = 0
    """Store writes the splits cost: the leader's requests, the splits, the residuals' seeds."""


def _planner(lengths: Sequence[int]) -> Plan:
    # A split's descriptor is the range of items it covers, ``start:end`` (each split its own
    # range of one job-wide item space), so a handler can split it at its position.
    specs = []
    start = 0
    for n, items in enumerate(lengths):
        specs.append(SplitSpec(f"s{n:03d}", descriptor=_range(start, start + items)))
        start += items
    return Plan(specs, final=True)


def _range(start: int, end: int) -> bytes:
    return f"{start}:{end}".encode()


def _bounds(descriptor: bytes) -> tuple[int, int]:
    start, _, end = descriptor.decode().partition(":")
    return int(start), int(end)


async def _run(scenario: Scenario, seed: int) -> Outcome:
    rng = random.Random(seed)
    lengths = list(scenario.lengths)
    rng.shuffle(lengths)  # which split ids are the long ones
    names = [f"w{rng.randrange(10**6):06d}x{n}" for n in range(scenario.workers)]
    rng.shuffle(names)
    plan = _planner(lengths)
    config = Config(max_in_flight=scenario.lanes)
    gains = 0
    processed = 0
    splits = 0
    counted = _SplitWrites()
    verdicts: list[bool] = []
    started = trio.current_time()

    def planner(ctx: PlanContext) -> Plan:
        return Plan([s for s in plan.splits if s.id not in ctx.known], final=True)

    async def handler(split: SplitHandle) -> None:
        nonlocal gains, processed, splits
        gains += 1
        start, end = _bounds(split.descriptor)
        pos = split.progress.watermark if split.progress.watermark is not None else start
        while pos < end:
            for _ in range(min(COMMIT_EVERY, end - pos)):
                await trio.sleep(1.0)
                processed += 1
                pos += 1
            await split.commit(pos, completed=pos >= end)
            if split.revoke_requested.is_set():
                return
            if split.split_requested.is_set() and end - pos >= 2 * COMMIT_EVERY:
                # The recipe: give the second half of what is left to an idle lane.
                mid = pos + (end - pos) // 2
                await split.split(primary=_range(start, mid), residual=_range(mid, end))
                splits += 1
                end = mid

    async with MemoryStore(namespace=namespace("makespan")) as store:

        async def worker(number: int) -> None:
            verdict = await run_worker(
                store,
                job=JOB,
                instance=names[number],
                planner=planner,
                handler=handler,
                config=config,
                nonce=f"{seed}n{number}",
                metrics=counted,
            )
            verdicts.append(isinstance(verdict, AllComplete))

        async with trio.open_nursery() as nursery:
            for number in range(scenario.workers):
                nursery.start_soon(worker, number)
        makespan = trio.current_time() - started
    return Outcome(
        makespan=makespan,
        moves=gains - len(lengths) - splits,
        replayed=processed - sum(lengths),
        complete=all(verdicts) and len(verdicts) == scenario.workers,
        splits=splits,
        # A planned split's two seeds are the plan's, not a split's.
        split_writes=counted.total() - 2 * len(lengths),
    )


class _SplitWrites(MetricsHooks):
    """Counts the landed writes splitting costs, by operation (the whole fleet shares one)."""

    OPERATIONS = frozenset({"split-request", "split", "seed-spec", "seed-split"})

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def write(self, operation: str, outcome: WriteOutcome, duration: float) -> None:
        if outcome == "won" and operation in self.OPERATIONS:
            self.counts[operation] += 1

    def total(self) -> int:
        return sum(self.counts.values())


def _measure(scenario: Scenario, seeds: int) -> list[Outcome]:
    outcomes = []
    for seed in range(seeds):
        clock = trio.testing.MockClock(autojump_threshold=0)
        outcomes.append(trio.run(_run, scenario, seed, clock=clock))
    return outcomes


def run(options: Options) -> list[Row]:
    """Every scenario over its seeds (memory store only: the figures are virtual time)."""
    if not options.wants("memory"):
        return []
    seeds = QUICK_SEEDS if options.quick else SEEDS
    rows = []
    for scenario in SCENARIOS:
        began = time.monotonic()
        outcomes = _measure(scenario, seeds)
        row = _row(scenario, outcomes, time.monotonic() - began)
        print(row.line(), flush=True)
        rows.append(row)
        if any(o.splits for o in outcomes):
            rows.append(_split_writes_row(scenario, outcomes))
            print(rows[-1].line(), flush=True)
    return rows


def _split_writes_row(scenario: Scenario, outcomes: list[Outcome]) -> Row:
    splits = sum(o.splits for o in outcomes)
    per = sum(o.split_writes for o in outcomes) / splits
    return Row(
        bench=f"makespan, store writes per split request accepted ({scenario.label})",
        store="memory",
        measured=f"{per:.2f} writes",
        baseline="1 split",
        ratio=None,
        target="≤ 3",
        met=per <= 3,
        note=(
            f"{splits} splits over {len(outcomes)} seeds; counted: the leader's request (its "
            "rewrite of the owner's assignment record), the owner's split (one CAS on the "
            "parent's progress record), and the leader's seeding of the residual (its spec, "
            "then its progress record); the residual's placement is an assignment write like "
            "any split's, not counted"
        ),
    )


def _row(scenario: Scenario, outcomes: list[Outcome], wall: float) -> Row:
    spans = [o.makespan for o in outcomes]
    moves = [o.moves for o in outcomes]
    replayed = [o.replayed for o in outcomes]
    total = sum(scenario.lengths)
    median_span, worst_span = statistics.median(spans), max(spans)
    ideal = scenario.ideal
    ideal_text = (
        "total work / lanes"
        if scenario.ideal_is_total
        else ("the longest split" if not scenario.together else "ideal")
    )
    if scenario.together:
        target = f"0 moves, 0 replayed, ≤ {scenario.target:g}x"
        met = max(moves) == 0 and max(replayed) == 0 and worst_span <= scenario.target * ideal
    else:
        target = f"≤ {scenario.target:g}x" + (
            " (needs splitting)" if scenario.ideal_is_total else ""
        )
        met = worst_span <= scenario.target * ideal
    runs_over = sum(1 for s in spans if s > scenario.target * ideal)
    failed = sum(1 for o in outcomes if not o.complete)
    return Row(
        bench=f"makespan, {scenario.label}",
        store="memory",
        measured=f"{median_span:.0f} s (worst {worst_span:.0f} s)",
        baseline=f"{ideal:.0f} s {ideal_text}",
        ratio=median_span / ideal,
        target=target,
        met=met,
        note=(
            f"median of {len(outcomes)} seeds (worst {worst_span / ideal:.2f}x; {runs_over} "
            f"over the target); ownership moves median {statistics.median(moves):g} (worst "
            f"{max(moves)}); replayed median {statistics.median(replayed):g} of {total:,} items "
            f"({statistics.median(replayed) / total:.0%}; worst {max(replayed)}); "
            f"longest split {max(scenario.lengths)} s, {scenario.lanes} "
            f"lane{'s' if scenario.lanes != 1 else ''} each, a commit "
            f"every {COMMIT_EVERY} s, default Config but "
            f"max_in_flight; virtual time (MockClock), {wall:.0f} s of wall time"
            + (f"; {failed} runs did not end AllComplete" if failed else "")
        ),
    )
