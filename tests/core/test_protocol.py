"""The pure rules: claim candidates, the attempt rule, placement without localities
(properties of the leader's, held equal to the reference model's), hashing and jitter."""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spate._core.placement.index import solve_placement
from spate._core.placement.vocabulary import (
    INSORT_AT_MOST,
    Band,
    Placement,
    WeightBins,
    Worker,
    merge_sorted,
)
from spate._core.protocol import (
    FAIL,
    Candidate,
    ClaimKind,
    SplitFacts,
    attempts_after,
    claim_candidates,
    exhausts_attempts,
    fingerprint_hash,
    jitter,
    live_workers,
    stable_hash,
    stable_hash_str,
)
from spate._core.records import Status
from spate_testing._placement_model import desired_assignment as model_assignment

# -- placement without localities ------------------------------------------------------------


def desired_assignment(
    workers: Mapping[str, int],
    splits: Mapping[str, Placement],
    *,
    reserved: Collection[str] = (),
    default_cap: int,
    seed: int,
) -> dict[str, tuple[str, ...]]:
    """The leader's placement from scratch, checked against the reference model on the way."""
    out = solve_placement(
        {m: Worker(cap) for m, cap in workers.items()},
        splits,
        reserved=reserved,
        default_cap=default_cap,
        seed=seed,
    )
    assert out == model_assignment(
        workers, splits, reserved=reserved, default_cap=default_cap, seed=seed
    )
    return out


worker_names = st.sampled_from([f"w{i}" for i in range(6)])


@st.composite
def fleets(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Placement], frozenset[str], int]:
    workers = draw(st.dictionaries(worker_names, st.integers(0, 5), min_size=1, max_size=6))
    n = draw(st.integers(0, 30))
    owners = st.one_of(st.none(), worker_names, st.just("gone"))
    splits = {f"s{i:02d}": Placement(draw(st.integers(1, 50)), draw(owners)) for i in range(n)}
    reserved = draw(st.frozensets(st.sampled_from(sorted(splits)) if splits else st.nothing()))
    seed = draw(st.integers(0, 2**64 - 1))
    return workers, splits, reserved, seed


def caps(workers: dict[str, int], default: int) -> dict[str, int]:
    return {m: max(1, c if c > 0 else default) for m, c in workers.items()}


DEFAULT_CAP = 3


@given(fleets())
def test_assignment_is_deterministic_and_independent_of_who_computes_it(fleet) -> None:  # type: ignore[no-untyped-def]
    workers, splits, reserved, seed = fleet
    first = desired_assignment(
        workers, splits, reserved=reserved, default_cap=DEFAULT_CAP, seed=seed
    )
    shuffled_workers = dict(random.Random(1).sample(sorted(workers.items()), len(workers)))
    shuffled_splits = dict(random.Random(2).sample(sorted(splits.items()), len(splits)))
    again = desired_assignment(
        shuffled_workers,
        shuffled_splits,
        reserved=set(reserved),
        default_cap=DEFAULT_CAP,
        seed=seed,
    )
    assert first == again


@given(fleets())
def test_assignment_places_each_split_once_within_every_cap(fleet) -> None:  # type: ignore[no-untyped-def]
    workers, splits, reserved, seed = fleet
    out = desired_assignment(workers, splits, reserved=reserved, default_cap=DEFAULT_CAP, seed=seed)
    assert set(out) == set(workers)
    placed = [s for ids in out.values() for s in ids]
    assert len(placed) == len(set(placed))
    assert set(placed) <= set(splits) - reserved
    cap = caps(workers, DEFAULT_CAP)
    for worker, ids in out.items():
        assert len(ids) <= cap[worker]
        assert list(ids) == sorted(ids)
    # Totality: a split is left in the queue only when every worker is full.
    if len(placed) < len(set(splits) - reserved):
        assert all(len(out[m]) == cap[m] for m in workers)


@given(fleets())
def test_assignment_is_balanced_within_the_band(fleet) -> None:  # type: ignore[no-untyped-def]
    workers, splits, reserved, seed = fleet
    out = desired_assignment(workers, splits, reserved=reserved, default_cap=DEFAULT_CAP, seed=seed)
    cap = caps(workers, DEFAULT_CAP)
    load = {m: sum(splits[s].weight for s in ids) for m, ids in out.items()}
    open_ = [m for m in out if len(out[m]) < cap[m]]
    held = [splits[s].weight for ids in out.values() for s in ids]
    if not open_ or not held:
        return
    band = Band(sum(load.values()), len(out), min(held))
    target = min(open_, key=lambda m: (load[m], m))
    for a, ids in out.items():
        if not ids or not (band.under(load[target]) or band.over(load[a])):
            continue  # inside the band: moving a running split is not worth its drain
        # No single split could move to the least-loaded worker with spare budget and lower
        # the imbalance.
        assert load[a] - load[target] <= min(splits[s].weight for s in ids), (a, target)


@given(fleets())
def test_a_balanced_fleet_maps_to_itself(fleet) -> None:  # type: ignore[no-untyped-def]
    workers, splits, reserved, seed = fleet
    out = desired_assignment(workers, splits, reserved=reserved, default_cap=DEFAULT_CAP, seed=seed)
    owner_of = {s: m for m, ids in out.items() for s in ids}
    settled = {
        s: Placement(p.weight, owner_of.get(s)) for s, p in splits.items() if s not in reserved
    }
    assert desired_assignment(workers, settled, default_cap=DEFAULT_CAP, seed=seed) == out


@given(fleets(), st.sampled_from([f"w{i}" for i in range(6)]))
def test_sticky_owner_keeps_its_split_when_under_cap(fleet, worker) -> None:  # type: ignore[no-untyped-def]
    workers, _splits, _, seed = fleet
    workers = {**workers, worker: 0}
    heavy = {"only": Placement(7, worker)}
    out = desired_assignment(workers, heavy, default_cap=DEFAULT_CAP, seed=seed)
    assert out[worker] == ("only",)


def test_a_heavy_split_ends_alone_against_light_ones() -> None:
    splits = {"big": Placement(100, None)} | {f"small{i}": Placement(1, None) for i in range(4)}
    out = desired_assignment({"a": 0, "b": 0}, splits, default_cap=8, seed=7)
    assert sorted(out.values(), key=len) == [("big",), ("small0", "small1", "small2", "small3")]


def test_a_worker_advertising_cap_one_gets_one_split() -> None:
    splits = {f"s{i}": Placement(1, None) for i in range(6)}
    out = desired_assignment({"tiny": 1, "big": 0}, splits, default_cap=8, seed=3)
    assert len(out["tiny"]) == 1
    assert len(out["big"]) == 5


def test_an_owner_that_left_loses_its_splits_and_reserved_splits_are_withheld() -> None:
    splits = {"a": Placement(1, "gone"), "b": Placement(1, "gone")}
    out = desired_assignment({"w": 0}, splits, reserved={"b"}, default_cap=8, seed=0)
    assert out == {"w": ("a",)}


def test_no_workers_means_no_assignment() -> None:
    assert desired_assignment({}, {"a": Placement(1, None)}, default_cap=8, seed=0) == {}


@settings(max_examples=20)
@given(st.integers(0, 2**64 - 1))
def test_ties_break_by_fingerprint_seed_not_by_worker_name(seed: int) -> None:
    # Two empty workers and one split: which worker gets it depends only on the seed.
    out = desired_assignment({"a": 0, "b": 0}, {"s": Placement(1, None)}, default_cap=1, seed=seed)
    winner = "a" if out["a"] else "b"
    expected = min(("a", "b"), key=lambda m: stable_hash_str(seed, m))
    assert winner == expected


# -- claim_candidates -------------------------------------------------------------------------


def facts(
    *,
    status: Status = Status.RUNNABLE,
    owner: str | None = None,
    epoch: int = 0,
    attempts: int = 0,
    lease: str | None = None,
    spec: bool = True,
) -> SplitFacts:
    return SplitFacts(status, owner, epoch, attempts, lease, spec)


def candidates(
    splits: dict[str, SplitFacts], held: set[str] | None = None, max_attempts: int = 4
) -> list[Candidate]:
    return claim_candidates(
        sorted(splits.items()), held=held or set(), instance="me", max_attempts=max_attempts
    )


def test_claim_kinds_follow_the_table_and_order_by_priority() -> None:
    out = candidates(
        {
            "e": facts(owner="dead", epoch=3),
            "r": facts(lease="me", owner="me", epoch=2),
            "n": facts(),
            "h": facts(epoch=5),
            "f": facts(lease="peer", owner="peer", epoch=1),
            "done": facts(status=Status.COMPLETED),
            "q": facts(status=Status.QUARANTINED),
        }
    )
    assert out == [
        Candidate("n", ClaimKind.CREATE, False),
        Candidate("h", ClaimKind.RELEASED, False),
        Candidate("r", ClaimKind.RECLAIM, False),
        Candidate("e", ClaimKind.EXPIRED, False),
    ]


def test_held_splits_and_splits_without_spec_are_not_claimed() -> None:
    out = candidates({"held": facts(), "nospec": facts(spec=False)}, held={"held"})
    assert out == []


def test_only_non_graceful_kinds_consume_attempts_and_quarantine_at_the_cap() -> None:
    assert ClaimKind.EXPIRED.consumes_attempt
    assert ClaimKind.RECLAIM.consumes_attempt
    assert not ClaimKind.CREATE.consumes_attempt
    assert not ClaimKind.RELEASED.consumes_attempt
    out = candidates(
        {
            "poison": facts(owner="dead", epoch=4, attempts=3, spec=False),
            "handed-back": facts(epoch=4, attempts=9),
            "young": facts(owner="dead", epoch=1, attempts=2),
        }
    )
    assert out == [
        Candidate("handed-back", ClaimKind.RELEASED, False),
        Candidate("poison", ClaimKind.EXPIRED, True),
        Candidate("young", ClaimKind.EXPIRED, False),
    ]


def test_the_attempt_rule_blames_fairly() -> None:
    # A hand-back and a first claim never charge; a takeover charges only a tenancy that moved
    # nothing; an explicit fail always charges.
    for kind in (ClaimKind.CREATE, ClaimKind.RELEASED):
        assert attempts_after(kind, 2, advanced=False) == 2
    for kind in (ClaimKind.EXPIRED, ClaimKind.RECLAIM):
        assert attempts_after(kind, 2, advanced=False) == 3
        assert attempts_after(kind, 2, advanced=True) == 2
    assert attempts_after(FAIL, 2, advanced=True) == 3


def test_only_a_charged_end_exhausts_the_attempts() -> None:
    assert exhausts_attempts(ClaimKind.EXPIRED, 2, False, max_attempts=3)
    assert not exhausts_attempts(ClaimKind.EXPIRED, 1, False, max_attempts=3)
    # Already at the cap, but charged nothing: no new evidence of poison.
    assert not exhausts_attempts(ClaimKind.EXPIRED, 5, True, max_attempts=3)
    assert not exhausts_attempts(ClaimKind.RELEASED, 5, False, max_attempts=3)
    assert exhausts_attempts(FAIL, 2, True, max_attempts=3)


def test_max_attempts_one_quarantines_the_first_takeover() -> None:
    out = candidates({"x": facts(owner="dead", epoch=1)}, max_attempts=1)
    assert out == [Candidate("x", ClaimKind.EXPIRED, True)]


# -- hashing, jitter, counts --------------------------------------------------------------------


def test_stable_hashes_are_pinned() -> None:
    # Pinned values: changing the hash would re-break every tie of every running fleet.
    assert stable_hash_str(0, "a") != stable_hash_str(1, "a")
    assert fingerprint_hash("schema-v3") == stable_hash_str(0, "schema-v3")
    assert stable_hash(0, 0) == PINNED_INT
    assert stable_hash_str(0, "spate") == PINNED_STR


PINNED_INT = 11168919776225494047
PINNED_STR = 4238296424844127533


@given(st.integers(0, 2**64 - 1), st.integers(0, 10**6))
def test_jitter_stays_within_twenty_percent(seed: int, round_: int) -> None:
    value = jitter(seed, round_, 9.0)
    assert 0.8 * 9.0 <= value < 1.2 * 9.0


def test_live_workers_counts_self_once() -> None:
    assert live_workers({"a", "b"}, "c") == 3
    assert live_workers({"a", "c"}, "c") == 2


# -- the sorted groups the placement passes search ----------------------------------------


@pytest.mark.parametrize("added", [0, 1, INSORT_AT_MOST, INSORT_AT_MOST + 1, 400])
def test_merge_sorted_keeps_the_run_sorted_either_way(added: int) -> None:
    # A few new entries are inserted one by one, many are sorted in: the result is the same.
    rng = random.Random(added)
    entries = [(rng.randrange(100), f"s{n}") for n in range(300 + added)]
    run = sorted(entries[added:])
    merge_sorted(run, entries[:added])
    assert run == sorted(entries)


@settings(max_examples=60)
@given(st.randoms(use_true_random=False), st.sampled_from([1, 5, INSORT_AT_MOST + 40]))
def test_weight_bins_answer_as_a_plain_model_does(rng: random.Random, burst: int) -> None:
    # Bursts of adds between reads take the insert path (one or a few) or the sort path
    # (more than INSORT_AT_MOST); either way removals and best_move see every split.
    first = [(w, rng.randrange(1000), f"s{n}") for n, w in enumerate([1, 2, 2, 3])]
    bins = WeightBins(first)
    present = {split: (weight, h) for weight, h, split in first}
    serial = 4
    for _ in range(6):
        for _ in range(burst):
            weight, h = rng.randint(1, 6), rng.randrange(1000)
            bins.add(weight, (h, f"s{serial}"))
            present[f"s{serial}"] = (weight, h)
            serial += 1
        for split in rng.sample(sorted(present), k=min(len(present), burst // 2 + 1)):
            weight, h = present.pop(split)
            bins.remove(weight, (h, split))
        for gap in range(1, 14):
            movable = [(w * (gap - w), h, s, w) for s, (w, h) in present.items() if w < gap]
            want = max(movable, key=lambda o: o[:3], default=None)
            assert bins.best_move(gap) == want
        assert bins.weights == sorted({w for w, _ in present.values()})
