"""The tail of load-aware balancing: every seed reaches the band, and a settled fleet stays put.

Sweeps of seeds through the decision core alone (pure, virtual time): the placement each
starts from is today's count-balanced one (``bench/balance.py``), loads lognormal(0, 1), the
tail's settings (rounds every 10 s, band 10%).
"""

from __future__ import annotations

import pytest

from bench.balance import TAIL_CONFIG, placed_job, tail_run
from spate._core.balance import BalanceConfig, BalanceSplit, BalanceState, plan_balance_round

CONFIG = TAIL_CONFIG


def _run(seed: int, splits: int, workers: int) -> tuple[float, int]:
    """(hottest over the bound at the end, moves after the first round within the band)."""
    run = tail_run(seed, splits, workers)
    return run.hottest_over_bound, run.moved_after_settling


@pytest.mark.parametrize(("splits", "workers"), [(32, 4), (64, 8), (1024, 32)])
def test_every_seed_reaches_the_band_and_moves_nothing_once_settled(
    splits: int, workers: int
) -> None:
    # Before: 22 of 50 runs of 32 x 4 still moved splits after settling; seeds 6 and 24 of
    # 32 x 4 stayed at 1.30 and 1.28 of the bound, 4, 43 and 47 of 64 x 8 at 1.59, 1.20 and
    # 2.16: a worker holding two splits no receiver's band took alone, and no exchange or
    # two-step shed was tried. With those but a budget that held for them, seeds 6, 24 and 31
    # of 32 x 4 and 40 and 43 of 64 x 8 still stayed over 1.10 (seed 6 of 32 x 4 holds a 14.05
    # and a 6.57 split against a budget of 6.36): rule 8 lets one step past the budget.
    runs = {seed: _run(seed, splits, workers) for seed in range(50)}
    assert {s: late for s, (_, late) in runs.items() if late} == {}
    assert {s: round(h, 3) for s, (h, _) in runs.items() if h > 1.10} == {}


def test_a_step_past_the_budget_is_made_alone_in_a_round_that_moved_nothing_else() -> None:
    # rule 8: w0 holds 6 and 5 (mean 4); no step within a budget of 10% of 12 helps, so the
    # round makes the best one past it, and only that one
    workers = placed_job([1.0], 3, seed=0).workers
    a, b, c = (w.name for w in workers)
    splits = [
        BalanceSplit("x", a, 6.0, True),
        BalanceSplit("y", a, 5.0, True),
        BalanceSplit("z", b, 0.5, True),
        BalanceSplit("u", c, 0.5, True),
    ]
    result = plan_balance_round(workers, splits, CONFIG, BalanceState(), round=10, now=1e6)
    assert result.moved_load > CONFIG.max_moved_load * result.job_load
    assert len({m.split for m in result.moves if not m.exchange}) == 1
    assert {(m.source, m.target) for m in result.moves} <= {(a, b), (b, a), (a, c), (c, a)}
    assert len({m.target for m in result.moves if m.source == a}) == 1


def test_a_split_is_not_moved_back_while_loads_hold_still() -> None:
    # a moved x off w0; the memory of the move keeps it off w0 while its load holds
    workers = placed_job([1.0], 2, seed=0).workers
    state = BalanceState(left={"x": (workers[0].name, 5.0)})
    splits = [
        BalanceSplit("x", workers[1].name, 5.0, True),
        BalanceSplit("y", workers[1].name, 5.0, True),
    ]
    config = BalanceConfig(max_moved_load=1.0)
    moved = plan_balance_round(workers, splits, config, state, round=10, now=1e6).moves
    assert [m.split for m in moved] == ["y"]
    # a load that changed beyond half a band is forgotten
    changed = [BalanceSplit("x", workers[1].name, 8.0, True), splits[1]]
    later = plan_balance_round(workers, changed, config, state, round=10, now=1e6).state
    assert later.left.get("x") != (workers[0].name, 5.0)


def test_loads_within_half_a_band_of_a_settled_round_move_nothing() -> None:
    workers = placed_job([1.0], 2, seed=0).workers
    a, b = workers[0].name, workers[1].name
    splits = [BalanceSplit("x", a, 6.0, True), BalanceSplit("y", b, 4.0, True)]
    splits += [BalanceSplit("z", a, 0.5, True)]
    settled = BalanceState(settled={a: 6.4, b: 4.1})  # within half of 10% of the mean, 5.25
    result = plan_balance_round(workers, splits, CONFIG, settled, round=10, now=1e6)
    assert result.moves == ()
    assert result.reason == "within band"
    result = plan_balance_round(workers, splits, CONFIG, BalanceState(), round=10, now=1e6)
    assert result.moves
