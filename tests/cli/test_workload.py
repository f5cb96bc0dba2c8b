from __future__ import annotations

from spate import PlanContext
from spate._cli.demo.workload import Dataset, DemoStats, Fold


def test_the_dataset_is_deterministic_and_contiguous() -> None:
    a, b = Dataset(seed=3, splits=10), Dataset(seed=3, splits=10)
    assert a.ranges() == b.ranges()
    ends = [end for _, _, end, _ in a.ranges()]
    starts = [start for _, start, _, _ in a.ranges()]
    assert starts[1:] == ends[:-1]
    assert {w for *_, w in a.ranges()} <= {1, 2, 3}
    assert a.total_records == ends[-1]
    assert Dataset(seed=4, splits=10).value(5) != a.value(5)


def test_a_fold_resumed_from_its_encoded_state_equals_one_pass() -> None:
    data = Dataset(seed=1, splits=1, unit=30)
    _, start, end, _ = data.ranges()[0]
    one_pass = Fold()
    for i in range(start, end):
        one_pass = one_pass.add(data.value(i))
    half = Fold()
    middle = (start + end) // 2
    for i in range(start, middle):
        half = half.add(data.value(i))
    resumed = Fold.decode(half.encode())
    for i in range(middle, end):
        resumed = resumed.add(data.value(i))
    assert resumed == one_pass == data.single_pass()["range-0000"]
    assert Fold.decode(b"") == Fold()


def test_a_replayed_record_changes_the_checksum() -> None:
    data = Dataset(seed=1, splits=1)
    fold = Fold().add(data.value(0)).add(data.value(1))
    assert fold.add(data.value(1)) != fold


def test_the_planner_plans_only_unknown_splits_and_is_final() -> None:
    from spate._cli.demo.workload import make_planner

    data = Dataset(seed=1, splits=4)
    plan = make_planner(data)(PlanContext(job="j", known=frozenset({"range-0001"}), generation=1))
    assert plan.final
    assert [s.id for s in plan.splits] == ["range-0000", "range-0002", "range-0003"]


def test_records_folded_again_count_as_replays_not_progress() -> None:
    stats = DemoStats()
    stats.fold("a", 0, 50)
    stats.fold("a", 50, 100)  # a tenancy folds up to 100 but its last commit was at 50
    stats.fold("a", 50, 120)  # the next owner resumes at 50: 50 replayed, 20 new
    stats.fold("b", 200, 210)  # splits are counted apart
    assert (stats.processed, stats.replayed) == (130, 50)


def test_the_straggler_is_the_datasets_longest_split_and_the_rest_stay_as_they_were() -> None:
    plain = Dataset(seed=3, splits=10)
    skewed = Dataset(seed=3, splits=10, straggler=4, straggler_units=16)
    assert skewed.straggler_id == "range-0004"
    sizes = {split: end - start for split, start, end, _ in skewed.ranges()}
    assert sizes["range-0004"] == 16 * skewed.unit == max(sizes.values())
    assert [w for n, (*_, w) in enumerate(skewed.ranges()) if n != 4] == [
        w for n, (*_, w) in enumerate(plain.ranges()) if n != 4
    ]
    assert skewed.fold(100, 200) == plain.fold(100, 200)  # the same records, shifted ranges


def test_the_fleets_straggler_alone_takes_several_times_the_jobs_ideal_length() -> None:
    from spate._cli.demo.fleet import STRAGGLER_FACTOR, DemoOptions, Fleet

    for splits, workers in [(64, 4), (24, 4), (12, 3), (6, 2)]:
        options = DemoOptions(workers=workers, splits=splits, chaos=False)
        fleet = Fleet(options, open_client=None, stats=DemoStats())  # type: ignore[arg-type]
        dataset = fleet.dataset
        assert dataset.straggler is not None
        units = [w for *_, w in dataset.ranges()]
        lanes = min(splits, workers * options.max_in_flight)
        ideal = sum(units) / lanes
        assert units[dataset.straggler] == max(units) >= 4
        assert STRAGGLER_FACTOR <= units[dataset.straggler] / ideal < STRAGGLER_FACTOR + 1
        # The same seed, the same straggler.
        again = Fleet(options, open_client=None, stats=DemoStats())  # type: ignore[arg-type]
        assert again.dataset == dataset


def test_the_poison_split_is_never_the_straggler() -> None:
    from spate._cli.demo.fleet import DemoOptions, Fleet

    for seed in range(40):
        fleet = Fleet(
            DemoOptions(seed=seed, splits=8, workers=3),
            open_client=None,  # type: ignore[arg-type]
            stats=DemoStats(),
        )
        assert fleet.poisoned
        assert fleet.dataset.straggler_id not in fleet.poisoned
        (bad,) = fleet.bad_records
        (poisoned,) = fleet.poisoned
        (start, end) = next((s, e) for i, s, e, _ in fleet.dataset.ranges() if i == poisoned)
        assert bad == (start + end) // 2  # halfway through it, as before
