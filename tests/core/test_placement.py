"""Properties of the failure-domain placement: the leader's (a fresh index solved from scratch),
each answer held equal to the reference model's (spate_testing._placement_model.place)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spate import ConfigError
from spate._core.placement.index import solve_placement
from spate._core.placement.report import placement_report
from spate._core.placement.vocabulary import (
    Band,
    Placement,
    Worker,
    affinity_matches,
    domain_of,
    validate_locality,
)
from spate_testing._placement_model import desired_assignment
from spate_testing._placement_model import place as model_place

DEFAULT_CAP = 4
LOCALITIES = ["", "a", "a/r1", "a/r2", "b", "b/r1", "c/r1/h1", "c/r2"]
AFFINITIES = ["", "", "", "a", "b", "a/r1", "c", "zz"]

# A drawn fleet: workers, splits, the reserved splits, the seed and the isolation tier.
Fleet = tuple[dict[str, Worker], dict[str, Placement], frozenset[str], int, int]


@st.composite
def fleets(
    draw: st.DrawFn, *, unit: bool = False, affinity: bool = True, big_caps: bool = False
) -> Fleet:
    n_workers = draw(st.integers(1, 7))
    names = [f"m{i}" for i in range(n_workers)]
    workers = {
        name: Worker(
            draw(st.integers(40, 60) if big_caps else st.integers(0, 5)),
            draw(st.sampled_from(LOCALITIES[1:] if big_caps else LOCALITIES)),
        )
        for name in names
    }
    if not any(m.locality for m in workers.values()):
        workers[names[0]] = Worker(workers[names[0]].cap, "a/r1")
    n_splits = draw(st.integers(0, 30))
    splits = {
        f"s{i:02d}": Placement(
            1 if unit else draw(st.integers(1, 6)),
            draw(st.sampled_from([None, "ghost", *names])),
            draw(st.sampled_from(AFFINITIES)) if affinity else "",
        )
        for i in range(n_splits)
    }
    reserved = frozenset(draw(st.sets(st.sampled_from(sorted(splits)))) if splits else ())
    return workers, splits, reserved, draw(st.integers(0, 2**32)), draw(st.integers(0, 2))


def _cap(worker: Worker) -> int:
    return max(1, worker.cap if worker.cap > 0 else DEFAULT_CAP)


def _run(
    workers: dict[str, Worker],
    splits: dict[str, Placement],
    reserved: frozenset[str],
    seed: int,
    tier: int,
    *,
    rebalance: bool = True,
    held: frozenset[str] = frozenset(),
) -> dict[str, tuple[str, ...]]:
    return place(
        workers, splits, reserved=reserved, default_cap=DEFAULT_CAP, seed=seed,
        isolation_tier=tier, rebalance=rebalance, held=held,
    )  # fmt: skip


def place(
    workers: dict[str, Worker],
    splits: dict[str, Placement],
    *,
    reserved: frozenset[str] = frozenset(),
    default_cap: int,
    seed: int,
    isolation_tier: int = 0,
    rebalance: bool = True,
    held: frozenset[str] = frozenset(),
) -> dict[str, tuple[str, ...]]:
    """The leader's placement from scratch, checked against the reference model on the way."""
    out = solve_placement(
        workers, splits, reserved=reserved, default_cap=default_cap, seed=seed,
        isolation_tier=isolation_tier, rebalance=rebalance, held=held,
    )  # fmt: skip
    assert out == model_place(
        workers, splits, reserved=reserved, default_cap=default_cap, seed=seed,
        isolation_tier=isolation_tier, rebalance=rebalance, held=held,
    )  # fmt: skip
    return out


def _domain_loads(
    out: dict[str, tuple[str, ...]], workers: dict[str, Worker], splits: dict[str, Placement],
    tier: int,
) -> tuple[Counter[str], Counter[str], Counter[str]]:  # fmt: skip
    load: Counter[str] = Counter()
    count: Counter[str] = Counter()
    cap: Counter[str] = Counter()
    for m, held in out.items():
        d = domain_of(workers[m].locality, tier)
        load[d] += sum(splits[s].weight for s in held)
        count[d] += len(held)
        cap[d] += _cap(workers[m])
    return load, count, cap


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_caps_respected_and_every_split_placed_once_or_queued(fleet: Fleet) -> None:
    workers, splits, reserved, seed, tier = fleet
    out = _run(workers, splits, reserved, seed, tier)
    assert set(out) == set(workers)
    placed = [s for held in out.values() for s in held]
    assert len(placed) == len(set(placed))
    assert not set(placed) & reserved
    for m, held in out.items():
        assert len(held) <= _cap(workers[m])
        assert list(held) == sorted(held)
    # Never a split queued while a lane is free: an affinity never leaves a split unplaced.
    eligible = len(set(splits) - reserved)
    assert len(placed) == min(eligible, sum(_cap(m) for m in workers.values()))


@settings(max_examples=300, deadline=None)
@given(fleets(unit=True, affinity=False))
def test_largest_domain_share_is_the_minimum_capacities_allow(fleet: Fleet) -> None:
    workers, splits, reserved, seed, tier = fleet
    out = _run(workers, splits, reserved, seed, tier)
    load, _, cap = _domain_loads(out, workers, splits, tier)
    placed = sum(load.values())
    # Water-filling: the least L such that domains holding at most min(cap, L) fit everything.
    best = next(L for L in range(placed + 1) if sum(min(c, L) for c in cap.values()) >= placed)
    assert max(load.values(), default=0) == best


@settings(max_examples=300, deadline=None)
@given(fleets(affinity=False))
def test_balanced_within_a_split_across_domains_and_within_the_band_inside_each(
    fleet: Fleet,
) -> None:
    workers, splits, reserved, seed, tier = fleet
    out = _run(workers, splits, reserved, seed, tier)
    load, count, cap = _domain_loads(out, workers, splits, tier)
    weights_in: dict[str, list[int]] = {}
    for m, held in out.items():
        weights_in.setdefault(domain_of(workers[m].locality, tier), []).extend(
            splits[s].weight for s in held
        )
    open_domains = [d for d in cap if count[d] < cap[d]]
    for d, ws in weights_in.items():
        for t in open_domains:
            if ws and t != d:
                assert load[d] - load[t] <= min(ws), (d, t)
    # Inside each domain, balanced within the band: no split of a worker over the band (or of
    # any worker, while the least-loaded open one is under it) fits the gap to that worker.
    groups: dict[str, list[str]] = {}
    for m in out:
        groups.setdefault(domain_of(workers[m].locality, tier), []).append(m)
    for group in groups.values():
        loads = {m: sum(splits[s].weight for s in out[m]) for m in group}
        open_ = [m for m in group if len(out[m]) < _cap(workers[m])]
        weights = [splits[s].weight for m in group for s in out[m]]
        if not open_ or not weights:
            continue
        band = Band(sum(loads.values()), len(group), min(weights))
        target = min(open_, key=lambda m: loads[m])
        for a in group:
            if out[a] and (band.under(loads[target]) or band.over(loads[a])):
                gap = loads[a] - loads[target]
                assert gap <= min(splits[s].weight for s in out[a]), (a, target)


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_affinity_is_honoured_whenever_a_matching_worker_has_room(fleet: Fleet) -> None:
    workers, splits, reserved, seed, tier = fleet
    out = _run(workers, splits, reserved, seed, tier)
    holder = {s: m for m, held in out.items() for s in held}

    def honoured(s: str) -> bool:
        return s in holder and affinity_matches(splits[s].locality, workers[holder[s]].locality)

    for s, p in splits.items():
        if s in reserved or not p.locality:
            continue
        matches = [m for m in workers if affinity_matches(p.locality, workers[m].locality)]
        if not matches or honoured(s):
            continue
        # Ignored only when every matching worker is full of honoured affinities.
        for m in matches:
            assert len(out[m]) == _cap(workers[m])
            assert all(honoured(other) for other in out[m]), (s, m)


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_sticky_fixpoint_deterministic_and_identical_on_every_leader(fleet: Fleet) -> None:
    workers, splits, reserved, seed, tier = fleet
    out = _run(workers, splits, reserved, seed, tier)
    # Another leader builds its maps in another order: same answer.
    shuffled_workers = dict(reversed(list(workers.items())))
    shuffled_splits = dict(reversed(list(splits.items())))
    assert _run(shuffled_workers, shuffled_splits, reserved, seed, tier) == out
    owner = {s: m for m, held in out.items() for s in held}
    settled = {s: Placement(p.weight, owner.get(s, p.owner), p.locality) for s, p in splits.items()}
    assert _run(workers, settled, reserved, seed, tier) == out


@settings(max_examples=300, deadline=None)
@given(fleets(affinity=False))
def test_without_a_rebalance_a_running_split_moves_only_off_an_owner_over_its_budget(
    fleet: Fleet,
) -> None:
    workers, splits, reserved, seed, tier = fleet
    out = _run(workers, splits, reserved, seed, tier, rebalance=False)
    holder = {s: m for m, held in out.items() for s in held}
    owned: dict[str, list[str]] = {}
    for s, p in splits.items():
        if s not in reserved and p.owner in workers:
            owned.setdefault(p.owner, []).append(s)
    for m, held in owned.items():
        if len(held) <= _cap(workers[m]):
            assert all(holder.get(s) == m for s in held), m
    # Still every lane filled that can be, and a fixpoint, deterministic.
    placed = len(holder)
    assert placed == min(len(set(splits) - reserved), sum(_cap(m) for m in workers.values()))
    settled = {
        s: Placement(p.weight, holder.get(s, p.owner), p.locality) for s, p in splits.items()
    }
    assert _run(workers, settled, reserved, seed, tier, rebalance=False) == out
    assert _run(workers, settled, reserved, seed, tier) == _run(
        workers, settled, reserved, seed, tier
    )


@settings(max_examples=300, deadline=None)
@given(fleets(affinity=False), st.data())
def test_a_rebalance_never_moves_a_held_split_off_an_owner_within_its_budget(
    fleet: Fleet, data: st.DataObject
) -> None:
    workers, splits, reserved, seed, tier = fleet
    held = frozenset(data.draw(st.sets(st.sampled_from(sorted(splits) or ["none"]))))
    out = _run(workers, splits, reserved, seed, tier, held=held)
    holder = {s: m for m, ids in out.items() for s in ids}
    owned: dict[str, list[str]] = {}
    for s, p in splits.items():
        if s not in reserved and p.owner in workers:
            owned.setdefault(p.owner, []).append(s)
    for m, ids in owned.items():
        if len(ids) <= _cap(workers[m]):
            assert all(holder.get(s) == m for s in ids if s in held), m
    # Still every lane filled that can be.
    assert len(holder) == min(len(set(splits) - reserved), sum(_cap(m) for m in workers.values()))


@settings(max_examples=200, deadline=None)
@given(fleets(unit=True, affinity=False, big_caps=True))
def test_a_lost_domain_moves_only_its_own_splits(fleet: Fleet) -> None:
    workers, splits, reserved, seed, tier = fleet
    out = _run(workers, splits, reserved, seed, tier)
    owner = {s: m for m, held in out.items() for s in held}
    settled = {s: Placement(p.weight, owner.get(s), p.locality) for s, p in splits.items()}
    domains = sorted({domain_of(m.locality, tier) for m in workers.values()})
    lost = domains[0]
    survivors = {m: v for m, v in workers.items() if domain_of(v.locality, tier) != lost}
    if not survivors:
        return
    after = _run(survivors, settled, reserved, seed, tier)
    for m, held in after.items():
        for s in held:
            assert owner.get(s) == m or owner.get(s) not in survivors, s


@settings(max_examples=200, deadline=None)
@given(fleets())
def test_workers_without_a_locality_place_exactly_as_before(fleet: Fleet) -> None:
    workers, splits, reserved, seed, tier = fleet
    blind = {m: Worker(v.cap) for m, v in workers.items()}
    expected = desired_assignment(
        {m: v.cap for m, v in workers.items()}, splits, reserved=reserved,
        default_cap=DEFAULT_CAP, seed=seed,
    )  # fmt: skip
    assert _run(blind, splits, reserved, seed, tier) == expected


def test_a_zone_heavy_fleet_spreads_the_job_evenly_across_zones() -> None:
    # docs/placement.md's example: 4 workers in zone a, one each in b and c.
    workers = {f"a{i}": Worker(100, f"a/h{i}") for i in range(4)}
    workers |= {"b0": Worker(100, "b/h0"), "c0": Worker(100, "c/h0")}
    splits = {f"s{i:02d}": Placement(1, None) for i in range(60)}
    out = place(workers, splits, default_cap=8, seed=1)
    locs = {m: v.locality for m, v in workers.items()}
    report = placement_report(out, locs, dict.fromkeys(splits, 1), 0)
    assert {d.domain: d.splits for d in report.domains} == {"a": 20, "b": 20, "c": 20}
    assert report.blast_radius == pytest.approx(1 / 3)
    assert sorted(len(out[f"a{i}"]) for i in range(4)) == [5, 5, 5, 5]
    # Without localities the same fleet puts two thirds of the job in zone a.
    blind = place({m: Worker(100) for m in workers}, splits, default_cap=8, seed=1)
    assert placement_report(blind, locs, dict.fromkeys(splits, 1), 0).blast_radius == (
        pytest.approx(2 / 3)
    )


def test_the_isolation_tier_picks_the_domains() -> None:
    assert domain_of("zone-a/rack-3/host-7", 0) == "zone-a"
    assert domain_of("zone-a/rack-3/host-7", 1) == "zone-a/rack-3"
    assert domain_of("zone-a", 2) == "zone-a"
    assert domain_of("", 1) == ""
    assert affinity_matches("zone-b", "zone-b/rack-1")
    assert not affinity_matches("zone-b", "zone-bb")
    assert not affinity_matches("", "zone-b")


@pytest.mark.parametrize("bad", ["/a", "a/", "a//b", "zone a", "-a", "a" * 201, 7])
def test_invalid_localities_are_refused_with_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="locality"):
        validate_locality(bad)


def test_valid_localities_pass() -> None:
    for good in ["", "a", "zone-a/rack-3/host-7", "eu.west_1/r.2"]:
        assert validate_locality(good) == good


def test_a_join_moves_only_what_lies_outside_the_band() -> None:
    # Ten workers hold 20 splits each; an eleventh joins. Exact balance would move 18 running
    # splits; the band (10% of the mean) stops once the newcomer is within it: fewer moves.
    workers = {f"w{n:02d}": Worker(64) for n in range(10)}
    splits = {f"s{n:03d}": Placement(1, f"w{n % 10:02d}") for n in range(200)}
    workers["w10"] = Worker(64)
    out = place(workers, splits, default_cap=8, seed=1)
    moved = len(out["w10"])
    assert 200 / 11 * 0.9 <= moved < 18
    assert all(len(held) <= 20 for held in out.values())
