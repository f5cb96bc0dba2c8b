"""Load-aware balancing (docs/balancing.md): the decision core's figures, in virtual time.

Each scenario starts from today's placement (count-balanced: every split of weight 1, placed
by the reference model :func:`spate_testing._placement_model.desired_assignment`, the same
answer as the leader's index) and then runs balance rounds of
:func:`spate._core.balance.plan_balance_round` every ``balance_interval`` (60 s of virtual
time), applying each round's moves at once. Seeded: the seed draws the loads and the names.

* **static loads**, lognormal(0, 1) and Zipf(1), 64 splits x 8 workers and 1,024 x 32, equal
  capacity, lanes twice the even share: the hottest worker over the best any placement can do
  (the larger of the mean and the hottest split) before and after, the rounds until the first
  round without a move, the most one round moved over the job's load, and the moves in the 10
  rounds after that (loads stable);
* **the same with every lane full** (``max_in_flight`` equal to the even share, 8 at 64 x 8:
  the default ``max_in_flight``): no move fits a lane, so nothing changes;
* **a rotating hot set**: 64 x 8 lognormal, and every 10 minutes 8 other splits carry 4x
  their load; the owners report every 5 s into :class:`~spate._core.balance.LoadMeter`
  (half-life 60 s, trusted after a minute); the time-averaged hottest over the bound, with
  balancing and without;
* **capacities**: 8 workers, 2 of capacity 2.0, 64 lognormal splits: each worker's load over
  its capacity share after convergence;
* **a splittable skewed job**: 8 splits, one 16x the others, on 4 workers, each split asked
  to split halving as the runtime's recipe does (:func:`splittable`): hottest over mean after
  10 rounds at the defaults, against split requests off;
* **the tail**: 50 seeds each of 32 x 4, 64 x 8 and 1,024 x 32 lognormal(0, 1), the tail's
  settings (rounds every 10 s, half-life 5 s, band 10%), 60 rounds (:func:`tail_run`): beside
  the median, the worst seed's hottest over the bound and the share of seeds that moved a
  split after their first round within the band;
* **cost**: one round at 100,000 splits x 100 workers, CPU time (median of 3), on a
  count-balanced lognormal job and on one whose every fourth worker carries twice the load.

Nothing is asserted. Run alone with ``python -m bench --only balance``;
``python -m bench.balance --svg FILE`` writes the picture of each worker's load over time,
before and after balancing turns on (for ``docs/balancing.md``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence

import attrs

from bench._harness import Options, Row, percentile
from spate._core.balance import (
    BalanceConfig,
    BalanceSplit,
    BalanceState,
    BalanceWorker,
    plan_balance_round,
)
from spate._core.placement.split_load import measured_units, split_load, unmeasured_units
from spate._core.placement.vocabulary import Placement
from spate_testing._placement_model import desired_assignment

INTERVAL = 60.0
"""Seconds between balance rounds (the default ``balance_interval``)."""
REPORT_EVERY = 5.0
"""Seconds between two load reports of a split (about a presence renewal)."""
SEEDS = 20
QUICK_SEEDS = 5
CONFIG = BalanceConfig()
TAIL_CONFIG = BalanceConfig(balance_interval=10, load_half_life=5, load_band=0.10)
"""The tail's settings (an operator's fleet, as docs/performance.md says): rounds every 10 s,
half-life 5 s, band 10%."""
TAIL_SEEDS = 50
TAIL_SIZES = ((32, 4), (64, 8), (1024, 32))


@attrs.define
class Job:
    """A placed job: each split's true load and owner, the workers."""

    workers: list[BalanceWorker]
    loads: dict[str, float]
    owner: dict[str, str]

    def worker_loads(self) -> dict[str, float]:
        """Each worker's summed true load."""
        out = {w.name: 0.0 for w in self.workers}
        for split, load in self.loads.items():
            out[self.owner[split]] += load
        return out

    def hottest_over_bound(self) -> float:
        """The hottest worker's load per capacity over max(mean, hottest split)."""
        capacity = sum(w.capacity for w in self.workers)
        mean = sum(self.loads.values()) / capacity
        per = self.worker_loads()
        hottest = max(per[w.name] / w.capacity for w in self.workers)
        return hottest / max(mean, max(self.loads.values()))

    def splits(self, loads: dict[str, float] | None = None) -> list[BalanceSplit]:
        """The round's input, every load trusted."""
        loads = self.loads if loads is None else loads
        return [BalanceSplit(s, self.owner[s], loads[s], True) for s in self.loads]


def lognormal(rng: random.Random, count: int) -> list[float]:
    """Loads drawn lognormal(0, 1)."""
    return [rng.lognormvariate(0.0, 1.0) for _ in range(count)]


def zipf(rng: random.Random, count: int) -> list[float]:
    """Loads 1/k for ranks k = 1..count (Zipf, exponent 1), in random order."""
    loads = [1.0 / (k + 1) for k in range(count)]
    rng.shuffle(loads)
    return loads


def placed_job(
    loads: Sequence[float],
    workers: int,
    *,
    seed: int,
    lanes: int | None = None,
    capacities: Sequence[float] = (),
) -> Job:
    """Today's placement of ``loads`` over ``workers``: count-balanced, blind to load."""
    even = -(-len(loads) // workers)
    lanes = lanes or 2 * even
    names = [f"w{i:03d}" for i in range(workers)]
    ids = [f"s{i:06d}" for i in range(len(loads))]
    placed = desired_assignment(
        dict.fromkeys(names, lanes),
        {s: Placement(1, None) for s in ids},
        default_cap=lanes,
        seed=seed,
    )
    caps = list(capacities) or [1.0] * workers
    return Job(
        workers=[BalanceWorker(n, lanes, capacity=c) for n, c in zip(names, caps, strict=True)],
        loads=dict(zip(ids, loads, strict=True)),
        owner={s: m for m, splits in placed.items() for s in splits},
    )


@attrs.frozen
class Convergence:
    """What one job's rounds did with stable loads."""

    before: float
    after: float
    rounds: int
    """Rounds that moved before the first one that did not."""
    most_moved: float
    """The largest share of the job's load one round moved."""
    later_moves: int
    """Moves in the 10 rounds after the first quiet one."""
    worst_band: float
    """The largest |load / mean - 1| over the workers after convergence."""


def converge(job: Job, config: BalanceConfig = CONFIG, limit: int = 30) -> Convergence:
    """Run rounds until one moves nothing, then 10 more."""
    before = job.hottest_over_bound()
    state, rounds, most, later, quiet_at = BalanceState(), 0, 0.0, 0, None
    result = None
    for round_ in range(1, limit + 1):
        result = plan_balance_round(
            job.workers, job.splits(), config, state, round=round_, now=round_ * INTERVAL
        )
        state = result.state
        for move in result.moves:
            job.owner[move.split] = move.target
        most = max(most, result.moved_load / result.job_load if result.job_load else 0.0)
        if quiet_at is None:
            if result.moves:
                rounds = round_
            else:
                quiet_at = round_
        else:
            later += len(result.moves)
            if round_ >= quiet_at + 10:
                break
    assert result is not None
    targets = result.targets
    per = job.worker_loads()
    worst = max((abs(per[w] / targets[w] - 1) for w in targets), default=0.0)
    return Convergence(before, job.hottest_over_bound(), rounds, most, later, worst)


@attrs.frozen
class Tail:
    """What one seed's rounds did with the tail's settings (:func:`tail_run`)."""

    hottest_over_bound: float
    """The hottest worker over max(mean, hottest split) after the last round."""
    moved_after_settling: int
    """Moves in the rounds from the first one that found the fleet within the band."""


def tail_run(seed: int, splits: int, workers: int, rounds: int = 60) -> Tail:
    """One seed of the tail sweep: today's placement, lognormal(0, 1) loads that hold still.

    Lanes twice the even share; every round's moves applied at once; ``rounds`` rounds of
    :data:`TAIL_CONFIG` (10 s apart, far past any worker's new-worker window).
    """
    rng = random.Random(seed)
    job = placed_job(lognormal(rng, splits), workers, seed=seed, lanes=2 * splits // workers)
    state, settled, late = BalanceState(), False, 0
    for round_ in range(1, rounds + 1):
        result = plan_balance_round(
            job.workers, job.splits(), TAIL_CONFIG, state, round=round_, now=1e6 + 10 * round_
        )
        state = result.state
        settled = settled or result.reason == "within band"
        if settled:
            late += len(result.moves)
        for move in result.moves:
            job.owner[move.split] = move.target
    return Tail(job.hottest_over_bound(), late)


def _tail_rows(seeds: int) -> list[Row]:
    rows = []
    for splits, workers in TAIL_SIZES:
        runs = [tail_run(seed, splits, workers) for seed in range(seeds)]
        ratios = [r.hottest_over_bound for r in runs]
        worst = max(ratios)
        moved = sum(1 for r in runs if r.moved_after_settling)
        rows.append(
            Row(
                bench=f"balance tail: worst seed's hottest / bound; seeds moved once settled, "
                f"{splits:,} x {workers}",
                store="—",
                measured=f"{worst:.3f}; {moved / seeds:.0%}",
                baseline="—",
                ratio=None,
                target="≤ 1.10; 0%",
                met=worst <= 1.10 and moved == 0,
                note=f"{seeds} seeds, lognormal(0,1), rounds every 10 s, band 10%, 60 rounds; "
                f"median {statistics.median(ratios):.3f}",
            )
        )
    return rows


def _static_rows(seeds: int) -> list[Row]:
    rows: list[Row] = []
    cases: list[tuple[str, Callable[[random.Random, int], list[float]], int, int, bool]] = [
        (name, draw, n, w, full)
        for name, draw in (("lognormal(0,1)", lognormal), ("Zipf(1)", zipf))
        for n, w in ((64, 8), (1024, 32))
        for full in (False, True)
        if not (full and name == "Zipf(1)")
    ]
    for name, draw, n, w, full in cases:
        runs = []
        for seed in range(seeds):
            rng = random.Random(seed)
            lanes = n // w if full else None
            runs.append(converge(placed_job(draw(rng, n), w, seed=seed, lanes=lanes)))
        label = f"{name}, {n:,} x {w}" + (", every lane full" if full else "")
        before = statistics.median(r.before for r in runs)
        after = statistics.median(r.after for r in runs)
        rows.append(
            Row(
                bench=f"balance: hottest / bound after convergence, {label}",
                store="—",
                measured=f"{after:.2f}",
                baseline=f"{before:.2f} (today's placement)",
                ratio=after / before,
                target="≤ 1.10",
                met=after <= 1.10,
                note=(
                    f"median of {seeds} seeds; 90th percentile "
                    f"{percentile([r.after for r in runs], 0.9):.2f} (today "
                    f"{percentile([r.before for r in runs], 0.9):.2f}), worst "
                    f"{max(r.after for r in runs):.2f}"
                ),
            )
        )
        if full:
            continue
        rounds = [r.rounds for r in runs]
        rows.append(
            Row(
                bench=f"balance: rounds to converge, {label}",
                store="—",
                measured=f"{statistics.median(rounds):g}",
                baseline="—",
                ratio=None,
                target="≤ 3",
                met=statistics.median(rounds) <= 3,
                note=f"median of {seeds} seeds; 90th percentile {percentile(rounds, 0.9)}, "
                f"worst {max(rounds)}",
            )
        )
        most = max(r.most_moved for r in runs)
        later = sum(r.later_moves for r in runs)
        rows.append(
            Row(
                bench=f"balance: load moved per round / job load; moves in 10 more rounds, {label}",
                store="—",
                measured=f"{most:.3f}; {later}",
                baseline="—",
                ratio=None,
                target=f"≤ {CONFIG.max_moved_load:g}; 0",
                met=most <= CONFIG.max_moved_load + 1e-9 and later == 0,
                note=f"the largest round of {seeds} seeds; moves summed over them",
            )
        )
    return rows


def rotating(
    seed: int,
    *,
    balance_from: float,
    minutes: int,
    trace: list[tuple[float, dict[str, float]]] | None = None,
) -> float:
    """The rotating hot set: the time-averaged hottest / bound (true loads, every 5 s)."""
    rng = random.Random(seed)
    base = lognormal(rng, 64)
    job = placed_job(base, 8, seed=seed)
    ids = sorted(job.loads)
    meters = {s: CONFIG.meter(0.0) for s in ids}
    state, round_, ratios = BalanceState(), 0, []
    hot: set[str] = set()
    now = 0.0
    while now < minutes * 60:
        now += REPORT_EVERY
        if int((now - REPORT_EVERY) // 600) != int(now // 600) or not hot:
            hot = set(rng.sample(ids, 8))
        for s in ids:
            job.loads[s] = base[ids.index(s)] * (4.0 if s in hot else 1.0)
            meters[s].report(job.loads[s] * REPORT_EVERY, now)
        ratios.append(job.hottest_over_bound())
        if trace is not None:
            trace.append((now, job.worker_loads()))
        if now >= balance_from and now % INTERVAL == 0:
            round_ += 1
            measured = {s: meters[s].rate(now) for s in ids}
            splits = [
                BalanceSplit(s, job.owner[s], measured[s], meters[s].trusted(now)) for s in ids
            ]
            result = plan_balance_round(job.workers, splits, CONFIG, state, round=round_, now=now)
            state = result.state
            for move in result.moves:
                job.owner[move.split] = move.target
    return statistics.fmean(ratios)


def _rotating_rows(seeds: int) -> list[Row]:
    minutes = 120
    on = [rotating(seed, balance_from=0.0, minutes=minutes) for seed in range(seeds)]
    off = [rotating(seed, balance_from=float("inf"), minutes=minutes) for seed in range(seeds)]
    measured, baseline = statistics.median(on), statistics.median(off)
    return [
        Row(
            bench="balance: hot set rotating every 10 min, time-averaged hottest / bound, 64 x 8",
            store="—",
            measured=f"{measured:.2f}",
            baseline=f"{baseline:.2f} (no balancing)",
            ratio=measured / baseline,
            target="≤ 1.25",
            met=measured <= 1.25,
            note=(
                f"median of {seeds} seeds over {minutes} min; worst {max(on):.2f}; loads "
                "smoothed (half-life 60 s), reported every 5 s, a meter travels with its split"
            ),
        )
    ]


def _capacity_rows(seeds: int) -> list[Row]:
    worst = []
    for seed in range(seeds):
        rng = random.Random(seed)
        job = placed_job(
            lognormal(rng, 64), 8, seed=seed, lanes=32, capacities=[2.0, 2.0] + [1.0] * 6
        )
        worst.append(converge(job).worst_band)
    measured = statistics.median(worst)
    return [
        Row(
            bench="balance: 8 workers, 2 of capacity 2.0: worst |load / capacity share - 1|",
            store="—",
            measured=f"{measured:.3f}",
            baseline="—",
            ratio=None,
            target=f"≤ {CONFIG.load_band:g} (the band)",
            met=measured <= CONFIG.load_band,
            note=f"median of {seeds} seeds of 64 lognormal splits; worst {max(worst):.3f}",
        )
    ]


def splittable(config: BalanceConfig = CONFIG, rounds: int = 10, *, asks: bool = True) -> Split:
    """A skewed job whose handler splits when asked, modelled as the runtime runs it.

    8 splits, one 16x the others, on 4 workers of 8 lanes, placed by count. Each split's owner
    reports its load every 5 s into a meter of its tenancy (half-life 60 s, trusted after a
    minute); a round every 60 s reads what :mod:`spate._core.leader.balance_rounds` reads: the
    trusted
    rates, a moved split's last trusted load until its new owner's meter is trusted, a
    residual's parent. A split asked splits as the recipe of ``docs/splitting.md`` does: at
    its next commit (the next report), once, in halves; the primary keeps its tenancy and its
    meter (its smoothed load falls with the half-life), and the residual (weight 1, half its
    parent's rounded up) goes where placement's fill puts a new split: the worker with a free
    lane of least load in placement's units as the last round set them (ties by name, where
    the runtime breaks them by a seeded hash), and is measured afresh there. A moved split
    is measured afresh by its new owner too. ``asks=False``: split requests off.
    """
    job = placed_job([16.0] + [1.0] * 7, 4, seed=0, lanes=8)
    lanes = {w.name: w.lanes for w in job.workers}
    meters = {s: config.meter(0.0) for s in job.loads}
    parent: dict[str, str] = {}
    weight = dict.fromkeys(job.loads, 1)
    carried: dict[str, float] = {}
    units: dict[str, int] = {}
    state, made, now = BalanceState(), 0, 0.0
    asked: tuple[str, ...] = ()
    ratios: list[float] = []
    for round_ in range(1, rounds + 1):
        for _ in range(int(INTERVAL // REPORT_EVERY)):
            now += REPORT_EVERY
            for split in asked:
                made += 1
                rid = f"{split}.r{made}"
                job.loads[split] = job.loads[rid] = job.loads[split] / 2
                parent[rid], weight[rid] = split, -(-weight[split] // 2)
                held = {w: 0 for w in lanes}
                count = dict(held)
                for s, owner in job.owner.items():
                    held[owner] += units.get(s, 10 * weight[s])
                    count[owner] += 1
                job.owner[rid] = min((w for w in lanes if count[w] < lanes[w]),
                                     key=lambda w: (held[w], w))  # fmt: skip
                meters[rid] = config.meter(now)
            asked = ()
            for split, meter in meters.items():
                meter.report(job.loads[split] * REPORT_EVERY, now)
        splits = []
        for split, meter in meters.items():
            load: float | None = None
            if meter.trusted(now):
                load = meter.rate(now)
                carried.pop(split, None)
            else:
                load = carried.get(split)
            splits.append(
                BalanceSplit(split, job.owner[split], load or 0.0, load is not None,
                             weight[split], parent=parent.get(split, ""))
            )  # fmt: skip
        result = plan_balance_round(job.workers, splits, config, state, round=round_, now=now)
        state = result.state
        for move in result.moves:
            job.owner[move.split] = move.target
            meters[move.split] = config.meter(now)
            carried[move.split] = move.load
        trusted = [s for s in splits if s.trusted]
        # (the leader's own unit rule: placement weighs by what its balance rounds pass it)
        per_weight = sum(s.load for s in trusted) / max(
            1, sum(split_load(s.weight) for s in trusted)
        )
        units = {
            s.id: measured_units(s.load, per_weight) if s.trusted else unmeasured_units(s.weight)
            for s in splits
        }
        asked = result.split_requests if asks else ()
        per = job.worker_loads()
        ratios.append(max(per.values()) / (sum(per.values()) / len(per)))
    return Split(ratios[-1], made, ratios)


@attrs.frozen
class Split:
    """What the splittable job's rounds did."""

    hottest_over_mean: float
    """The hottest worker's true load over the mean after the last round."""
    made: int
    """Residuals split off."""
    ratios: list[float]
    """The same figure after each round."""

    def settled_at(self, bound: float) -> int | None:
        """The round from which the figure stayed within ``bound`` (None: it did not)."""
        at = None
        for round_, ratio in enumerate(self.ratios, 1):
            if ratio > bound:
                at = None
            elif at is None:
                at = round_
        return at


def _splitting_rows() -> list[Row]:
    on, off = splittable(), splittable(asks=False)
    return [
        Row(
            bench="balance: a splittable skewed job (one split 16x), hottest / mean, defaults",
            store="—",
            measured=f"{on.hottest_over_mean:.2f}",
            baseline=f"{off.hottest_over_mean:.2f} (split requests off)",
            ratio=on.hottest_over_mean / off.hottest_over_mean,
            target="≤ 1.15",
            met=on.hottest_over_mean <= 1.15,
            note=(
                f"8 splits on 4 workers, after 10 rounds; within 1.15 from round "
                f"{on.settled_at(1.15)}; {on.made} residuals split off (halves, at the next "
                "commit; residuals placed by load, measured afresh). The 16 is asked at twice "
                "the mean (11.5), its pieces while one exceeds the band (6.33)"
            ),
        )
    ]


def _cost_rows(repeat: int) -> list[Row]:
    rows = []
    for label, skew in (("count-balanced lognormal", False), ("every 4th worker at 2x", True)):
        rng = random.Random(7)
        job = placed_job(lognormal(rng, 100_000), 100, seed=7)
        if skew:
            for s, w in job.owner.items():
                if int(w[1:]) % 4 == 0:
                    job.loads[s] *= 2
        splits = job.splits()
        times, moves = [], 0
        for _ in range(repeat):
            began = time.process_time()
            result = plan_balance_round(
                job.workers, splits, CONFIG, BalanceState(), round=1, now=0.0
            )
            times.append(time.process_time() - began)
            moves = len(result.moves)
        took = statistics.median(times)
        rows.append(
            Row(
                bench=f"balance: one round, 100,000 splits x 100 workers, {label}",
                store="—",
                measured=f"{took * 1e3:.1f} ms",
                baseline="50 ms (target)",
                ratio=took / 0.050,
                target="≤ 50 ms",
                met=took <= 0.050,
                note=f"CPU time, median of {repeat}; {moves} moves ({result.reason})",
            )
        )
    return rows


def run(options: Options) -> list[Row]:
    """Every scenario of the module text."""
    seeds = QUICK_SEEDS if options.quick else SEEDS
    rows = _static_rows(seeds) + _rotating_rows(seeds) + _capacity_rows(seeds)
    rows += _splitting_rows()
    rows += _tail_rows(QUICK_SEEDS if options.quick else TAIL_SEEDS)
    rows += _cost_rows(1 if options.quick else 3)
    for row in rows:
        print(row.line(), flush=True)
    return rows


def write_svg(path: str, seed: int = 1) -> None:
    """Each worker's load over time (rotating hot set), balancing off for 30 min, then on."""
    trace: list[tuple[float, dict[str, float]]] = []
    turn_on = 30 * 60.0
    rotating(seed, balance_from=turn_on, minutes=90, trace=trace)
    trace = trace[2::3]  # a point every 15 s: the picture is the same, the file a third
    names = sorted(trace[0][1])
    mean = [sum(loads.values()) / len(loads) for _, loads in trace]
    width, height, pad = 900, 360, 50
    end = trace[-1][0]
    top = max(max(loads.values()) / m for (_, loads), m in zip(trace, mean, strict=True))
    top = max(2.0, round(top + 0.25, 1))

    def x(t: float) -> float:
        return pad + (width - 2 * pad) * t / end

    def y(v: float) -> float:
        return height - pad - (height - 2 * pad) * v / top

    colours = [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
    ]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{pad}" y="20">Each worker\'s load / the mean, 64 lognormal splits on 8 '
        f"workers, a hot set rotating every 10 min; balancing turns on at 30 min</text>",
    ]
    for v in (0.0, 0.9, 1.0, 1.1, top):
        parts.append(
            f'<line x1="{pad}" x2="{width - pad}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            f'stroke="{"#bbb" if v in (0.9, 1.1) else "#eee"}" '
            f'stroke-dasharray="{"4 3" if v in (0.9, 1.1) else ""}"/>'
        )
        parts.append(f'<text x="{pad - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    for minute in range(0, int(end // 60) + 1, 10):
        parts.append(
            f'<text x="{x(minute * 60):.1f}" y="{height - pad + 16}" '
            f'text-anchor="middle">{minute} min</text>'
        )
    parts.append(
        f'<line x1="{x(turn_on):.1f}" x2="{x(turn_on):.1f}" y1="{pad}" y2="{height - pad}" '
        'stroke="black"/>'
    )
    parts.append(f'<text x="{x(turn_on) + 4:.1f}" y="{pad + 12}">balancing on</text>')
    for i, name in enumerate(names):
        points = " ".join(
            f"{x(t):.1f},{y(loads[name] / m):.1f}"
            for (t, loads), m in zip(trace, mean, strict=True)
        )
        parts.append(
            f'<polyline fill="none" stroke="{colours[i % len(colours)]}" stroke-width="1.2" '
            f'points="{points}"/>'
        )
    parts.append("</svg>")
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n".join(parts) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.balance", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--svg", default="", help="write the load-over-time picture here")
    parser.add_argument("--quick", action="store_true", help="fewer seeds: a smoke run")
    args = parser.parse_args()
    if args.svg:
        write_svg(args.svg)
        print(f"wrote {args.svg}")
        return
    run(Options(stores=(), quick=args.quick))


if __name__ == "__main__":
    main()
