"""The simulator splits running splits under faults, and its checker catches a broken partition.

A splittable workload's descriptors are ranges of one item space; the checker's
``range-partition`` and ``residual-origin`` invariants hold the committed ranges to tiling it
exactly and every residual to a won split write. The first tests run splittable seeds (clean,
and each strike of the split chaos); the rest feed the checker doctored histories, by hand and
cut out of real runs, and show it flags each way the rule can break.
"""

from __future__ import annotations

import functools
import itertools

import attrs
import pytest

from spate._core.records import ProgressRecord, Residual, SpecRecord, Status, encode
from spate._core.tenancy.splitting import residual_id
from spate_testing.sim._checker import check
from spate_testing.sim._history import (
    Acked,
    Final,
    FinalSplit,
    Gained,
    HandlerEnded,
    History,
    HistoryEvent,
    ItemSpace,
    Split,
    StoreWrite,
    Verdict,
)
from spate_testing.sim._runner import Engine, SeedResult, run_checked
from spate_testing.sim._scenario import Scenario, SplitFaults
from spate_testing.sim._workload import Workload

JOB = "j"


@functools.cache
def splittable_seeds(count: int) -> tuple[int, ...]:
    """The first ``count`` seeds whose scenario splits (and is short enough to be quick)."""
    found: list[int] = []
    seed = 0
    while len(found) < count:
        scenario = Scenario.from_seed(seed)
        if scenario.workload.splittable and scenario.chaos_seconds <= 20:
            found.append(seed)
        seed += 1
    return tuple(found)


@functools.cache
def run(seed: int, engine: Engine = "machines") -> SeedResult:
    return run_checked(Scenario.from_seed(seed), engine=engine, wall_budget=60)


# -- real runs --------------------------------------------------------------------------------


def test_half_the_seeds_draw_a_splittable_workload_with_requests_on() -> None:
    scenarios = [Scenario.from_seed(seed) for seed in range(200)]
    splittable = [s for s in scenarios if s.workload.splittable]
    assert 70 <= len(splittable) <= 130
    assert all(s.config.split_requests for s in splittable)
    assert {s.config.split_request_delay for s in splittable} > {1.0}
    for s in splittable:
        start, end = s.workload.item_space
        ranges = sorted(s.workload.ranges.values())
        assert ranges[0][0] == start
        assert ranges[-1][1] == end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


@pytest.mark.parametrize("engine", ["machines", "trio"])
def test_splittable_seeds_split_and_keep_every_invariant(engine: Engine) -> None:
    results = [run(seed, engine) for seed in splittable_seeds(4)]
    for result in results:
        assert result.ok, (result.seed, result.violations)
    assert sum(r.splits.get("split", 0) for r in results) > 0
    # Residuals ran to completion: the final listings hold splits nobody planned.
    finals = [r.history.final for r in results]
    assert any(
        f is not None and f.expected is not None and {s.split for s in f.splits} - set(f.expected)
        for f in finals
    )


def test_split_faults_are_probabilities() -> None:
    with pytest.raises(ValueError, match=r"SplitFaults.zombie must be within \[0, 1\]"):
        SplitFaults(zombie=1.5)


STRIKES = {
    "kill_before_reply": "split_kill_before_reply",
    "kill_after": "split_kill_after",
    "lost_reply": "split_lost_reply",
    "zombie": "split_zombie",
    "leader": "leader_fault_on_request",
}


@pytest.mark.parametrize("kind", sorted(STRIKES))
def test_each_strike_around_splitting_lands_and_the_fleet_stays_correct(kind: str) -> None:
    # A straggler in a fleet of idle lanes: the leader asks, the owner splits, and the chaos
    # driver strikes around every split (or request) it can.
    workload = Workload(
        batches=((("s00", 40, 1), ("s01", 2, 1), ("s02", 2, 1)),),
        step_seconds=0.25,
        splittable=True,
        split_rate=0.1,
        seed=7,
    )
    base = Scenario.from_seed(splittable_seeds(1)[0])
    scenario = attrs.evolve(
        base,
        workload=workload,
        initial_workers=3,
        max_workers=4,
        chaos_seconds=10.0,
        weights=(("restart", 2), ("join", 1)),
        split_faults=SplitFaults(**{kind: 1.0}),
    )
    result = run_checked(scenario, engine="machines", wall_budget=60)
    assert result.ok, result.violations
    assert result.faults.get(STRIKES[kind], 0) > 0, result.faults
    assert result.splits.get("split", 0) > 0


# -- doctored histories, by hand ---------------------------------------------------------------


class Builder:
    """Writes a splittable job's history the way a fleet would: specs, records, calls."""

    def __init__(self, end: int = 10) -> None:
        self.history = History(job=JOB, seed=None)
        self.t = 0.0
        self.revision = 0
        self.records: dict[str, ProgressRecord] = {}
        self.history.append(ItemSpace(at=0.0, start=0, end=end))

    def add(self, event: HistoryEvent) -> None:
        self.history.append(event)

    def tick(self) -> float:
        self.t += 1.0
        return self.t

    def _store(self, key: str, value: bytes, op: str = "create") -> None:
        self.revision += 1
        self.add(
            StoreWrite(
                at=self.tick(),
                actor="w0#1",
                op=op,  # type: ignore[arg-type]
                keyspace="durable",
                key=key,
                expected=None if op == "create" else self.revision - 1,
                outcome="won",
                revision=self.revision,
                value=value,
            )
        )

    def seed(self, split: str, descriptor: bytes, parent: str = "") -> None:
        """The leader seeds a split: its spec, then its progress record."""
        spec = SpecRecord(id=split, generation=1, descriptor=descriptor, parent=parent)
        self._store(f"{JOB}.spec.{split}", encode(spec))
        self.write("w0#1", split)

    def write(self, actor: str, split: str, **changes: object) -> ProgressRecord:
        previous = self.records.get(split)
        record = (
            attrs.evolve(previous, **changes)  # type: ignore[arg-type]
            if previous is not None
            else ProgressRecord(id=split, **changes)  # type: ignore[arg-type]
        )
        self.revision += 1
        self.add(
            StoreWrite(
                at=self.tick(),
                actor=actor,
                op="create" if previous is None else "update",
                keyspace="durable",
                key=f"{JOB}.split.{split}",
                expected=None if previous is None else self.revision - 1,
                outcome="won",
                revision=self.revision,
                value=encode(record),
            )
        )
        self.records[split] = record
        return record

    def claim(self, actor: str, split: str) -> None:
        record = self.records[split]
        self.write(actor, split, epoch=record.epoch + 1, owner=actor.split("#")[0])
        self.add(
            Gained(
                at=self.tick(),
                actor=actor,
                split=split,
                epoch=record.epoch + 1,
                watermark=record.watermark,
            )
        )

    def commit(self, actor: str, split: str, watermark: int, completed: bool = False) -> None:
        changes: dict[str, object] = {"watermark": watermark, "completed": completed}
        if completed:
            changes.update(status=Status.COMPLETED, owner=None)
        self.write(actor, split, **changes)
        self.add(
            Acked(
                at=self.tick(),
                actor=actor,
                split=split,
                epoch=self.records[split].epoch,
                watermark=watermark,
                completed=completed,
            )
        )

    def split(
        self,
        actor: str,
        split: str,
        primary: bytes,
        residual: bytes,
        *,
        land: bool = True,
        outcome: str = "split",
    ) -> str:
        """The owner's split: its fenced write (if it lands) and the call's end."""
        record = self.records[split]
        rid = residual_id(split, record.epoch, record.splits)
        if land:
            self.write(
                actor,
                split,
                descriptor=primary,
                splits=record.splits + 1,
                residuals=(*record.residuals, Residual(id=rid, descriptor=residual, weight=1)),
            )
        self.add(
            Split(
                at=self.tick(),
                actor=actor,
                split=split,
                epoch=record.epoch,
                primary=primary,
                residual=residual,
                outcome=outcome,  # type: ignore[arg-type]
                residual_id=rid if outcome == "split" else None,
            )
        )
        return rid

    def run_to_end(self, actor: str, split: str, end: int) -> None:
        self.claim(actor, split)
        self.commit(actor, split, end, completed=True)
        self.add(
            HandlerEnded(
                at=self.tick(),
                actor=actor,
                split=split,
                epoch=self.records[split].epoch,
                how="completed",
            )
        )

    def final(self, planned: tuple[str, ...] = ("a", "b")) -> None:
        records = sorted(self.records.values(), key=lambda r: r.id)
        all_done = all(r.completed for r in records)
        self.add(
            Verdict(
                at=self.tick(),
                actor="w0#1",
                all_complete=all_done,
                completed=None if all_done else sum(r.completed for r in records),
                quarantined=None if all_done else 0,
            )
        )
        self.add(
            Final(
                at=self.tick(),
                plan_final=True,
                expected=planned,
                splits=tuple(
                    FinalSplit(
                        split=r.id,
                        status=r.status.value,
                        epoch=r.epoch,
                        watermark=r.watermark,
                        completed=r.completed,
                        owner=r.owner,
                    )
                    for r in records
                ),
                terminated=True,
                bound=60.0,
            )
        )


def planned(b: Builder) -> None:
    """Items 0:10 in two planned splits, ``a`` (0:4) and ``b`` (4:10)."""
    b.seed("a", b"0:4")
    b.seed("b", b"4:10")


def clean_split(b: Builder, *, residual: bytes = b"7:10") -> str:
    """``b`` commits 5, is split at 7, finishes 4:7; its residual runs 7:10; ``a`` runs."""
    planned(b)
    b.claim("w1#1", "b")
    b.commit("w1#1", "b", 5)
    rid = b.split("w1#1", "b", b"4:7", residual)
    b.seed(rid, residual, parent="b")
    b.commit("w1#1", "b", 6)
    b.commit("w1#1", "b", 7, completed=True)
    b.run_to_end("w2#1", "a", 4)
    return rid


def flagged(b: Builder) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for v in check(b.history):
        found.setdefault(v.invariant, []).append(v.detail)
    return found


def test_a_clean_split_history_passes() -> None:
    b = Builder()
    rid = clean_split(b)
    b.run_to_end("w2#1", rid, 10)
    b.final()
    assert check(b.history) == []


def test_a_range_counted_twice_is_flagged() -> None:
    b = Builder()
    rid = clean_split(b, residual=b"6:10")  # overlaps the primary 4:7
    b.run_to_end("w2#1", rid, 10)
    b.final()
    found = flagged(b)
    assert any("not a partition" in d for d in found["range-partition"])
    assert any(
        "items 6:7 are in two splits" in d and "counted twice" in d
        for d in found["range-partition"]
    )


def test_a_residual_never_seeded_is_a_lost_range() -> None:
    b = Builder()
    planned(b)
    b.claim("w1#1", "b")
    b.commit("w1#1", "b", 5)
    rid = b.split("w1#1", "b", b"4:7", b"7:10")
    b.commit("w1#1", "b", 7, completed=True)
    b.run_to_end("w2#1", "a", 4)
    b.final()  # (and nobody noticed: the verdict says AllComplete)
    found = flagged(b)
    assert any("items 7:10 are in no split at the end: lost" in d for d in found["range-partition"])
    assert any(rid in d and "never seeded" in d for d in found["residual-origin"])


def test_a_split_that_drops_items_is_a_lost_range() -> None:
    b = Builder()
    planned(b)
    b.claim("w1#1", "b")
    b.commit("w1#1", "b", 5)
    rid = b.split("w1#1", "b", b"4:7", b"8:10")  # items 7:8 in neither part
    b.seed(rid, b"8:10", parent="b")
    b.commit("w1#1", "b", 7, completed=True)
    b.run_to_end("w2#1", "a", 4)
    b.run_to_end("w2#1", rid, 10)
    b.final()
    found = flagged(b)
    assert any("not a partition" in d for d in found["range-partition"])
    assert any("items 7:8 are in no split at the end: lost" in d for d in found["range-partition"])


def test_a_completion_short_of_its_range_end_is_flagged() -> None:
    b = Builder()
    rid = clean_split(b)
    b.run_to_end("w2#1", rid, 9)  # completes 7:10 at 9
    b.final()
    found = flagged(b)
    assert any("items 9:10 were never committed" in d for d in found["range-partition"])


def test_a_residual_split_off_below_the_committed_watermark_is_flagged() -> None:
    b = Builder()
    planned(b)
    b.claim("w1#1", "b")
    b.commit("w1#1", "b", 8)
    rid = b.split("w1#1", "b", b"4:7", b"7:10")  # items 7:8 were committed already
    b.seed(rid, b"7:10", parent="b")
    b.run_to_end("w2#1", "a", 4)
    b.run_to_end("w2#1", rid, 10)
    b.final()
    found = flagged(b)
    assert any("below the committed watermark 8" in d for d in found["range-partition"])
    assert any("lies outside its range 4:7" in d for d in found["range-partition"])


def test_a_residual_run_after_a_fenced_split_is_flagged() -> None:
    b = Builder()
    planned(b)
    b.claim("w1#1", "b")
    b.commit("w1#1", "b", 5)
    # The call raised Fenced, yet its write had landed, and the residual ran.
    rid = b.split("w1#1", "b", b"4:7", b"7:10", outcome="fenced")
    b.seed(rid, b"7:10", parent="b")
    b.claim("w2#1", "b")
    b.commit("w2#1", "b", 7, completed=True)
    b.run_to_end("w2#1", "a", 4)
    b.run_to_end("w3#1", rid, 10)
    b.final()
    found = flagged(b)
    assert list(found) == ["residual-origin"]
    assert any(
        "raised Fenced, yet its write landed" in d and rid in d for d in found["residual-origin"]
    )


def test_a_split_that_lost_and_raised_fenced_passes() -> None:
    b = Builder()
    planned(b)
    b.claim("w1#1", "b")
    b.commit("w1#1", "b", 5)
    b.claim("w2#1", "b")  # the zombie's successor
    b.split("w1#1", "b", b"4:7", b"7:10", land=False, outcome="fenced")
    b.commit("w2#1", "b", 10, completed=True)
    b.run_to_end("w2#1", "a", 4)
    b.final()
    assert check(b.history) == []


def test_a_residual_no_split_write_named_is_flagged() -> None:
    b = Builder()
    planned(b)
    b.run_to_end("w1#1", "a", 4)
    b.claim("w1#1", "b")
    b.commit("w1#1", "b", 7)
    b.seed("b.rzzzzzzzzzzzzz", b"7:10", parent="b")  # out of thin air
    b.commit("w1#1", "b", 10, completed=True)
    b.run_to_end("w2#1", "b.rzzzzzzzzzzzzz", 10)
    b.final()
    found = flagged(b)
    assert any("no won split write of any record named it" in d for d in found["residual-origin"])
    assert any("in two splits" in d for d in found["range-partition"])


def test_an_acknowledged_split_that_never_landed_is_flagged() -> None:
    b = Builder()
    planned(b)
    b.claim("w1#1", "b")
    b.commit("w1#1", "b", 5)
    b.split("w1#1", "b", b"4:7", b"7:10", land=False)  # told it split; nothing landed
    b.commit("w1#1", "b", 10, completed=True)
    b.run_to_end("w2#1", "a", 4)
    b.final()
    found = flagged(b)
    assert any(
        "no write of its naming that residual had landed" in d for d in found["residual-origin"]
    )


def test_a_write_that_drops_a_named_residual_is_flagged() -> None:
    b = Builder()
    rid = clean_split(b)
    b.run_to_end("w2#1", rid, 10)
    b.write("w1#1", "b", residuals=())
    b.final()
    found = flagged(b)
    assert any("dropped or rewrote residuals" in d for d in found["residual-origin"])


# -- doctored histories, cut out of real runs ------------------------------------------------------


def a_run_with_residuals() -> tuple[SeedResult, str]:
    """A clean splittable run, and one residual of it that completed."""
    for seed in splittable_seeds(8):
        result = run(seed)
        final = result.history.final
        assert result.ok
        assert final is not None
        assert final.expected is not None
        done = sorted(
            s.split for s in final.splits if s.completed and s.split not in final.expected
        )
        if done:
            return result, done[0]
    raise AssertionError("no residual completed in the first splittable seeds")


def about(event: HistoryEvent, split: str) -> bool:
    """Whether ``event`` is one of ``split``'s own (its keys, its handlers)."""
    if isinstance(event, StoreWrite):
        return event.key.endswith((f".split.{split}", f".spec.{split}", f".lease.{split}"))
    return getattr(event, "split", None) == split and not isinstance(event, Split)


def test_a_real_run_whose_residual_never_ran_is_caught() -> None:
    result, rid = a_run_with_residuals()
    history = History(job=result.history.job, seed=result.seed)
    for event in result.history:
        if isinstance(event, Final):
            event = attrs.evolve(event, splits=tuple(s for s in event.splits if s.split != rid))
        if not about(event, rid):
            history.append(event)
    found = {v.invariant for v in check(history)}
    assert {"range-partition", "residual-origin"} <= found


def test_a_real_run_whose_landed_split_said_fenced_is_caught() -> None:
    result, rid = a_run_with_residuals()
    history = History(job=result.history.job, seed=result.seed)
    for event in result.history:
        if isinstance(event, Split) and event.residual_id == rid:
            event = attrs.evolve(event, outcome="fenced", residual_id=None)
        history.append(event)
    violations = check(history)
    assert [v.invariant for v in violations] == ["residual-origin"]
    assert "raised Fenced, yet its write landed" in violations[0].detail


def test_a_real_run_that_ran_a_residual_twice_is_caught() -> None:
    # The residual's items given to a second, made-up split: completed twice.
    result, rid = a_run_with_residuals()
    twin = rid[:-1] + ("a" if rid[-1] != "a" else "b")
    history = History(job=result.history.job, seed=result.seed)
    for event in result.history:
        history.append(event)
        if about(event, rid) and isinstance(event, StoreWrite):
            history.append(
                attrs.evolve(
                    event,
                    key=event.key.replace(rid, twin),
                    value=(
                        event.value.replace(rid.encode(), twin.encode()) if event.value else None
                    ),
                )
            )
        if isinstance(event, Final):
            listed = {s.split: s for s in event.splits}
            history.events[-1] = attrs.evolve(
                event, splits=(*event.splits, attrs.evolve(listed[rid], split=twin))
            )
    found: dict[str, list[str]] = {}
    for v in check(history):
        found.setdefault(v.invariant, []).append(v.detail)
    assert any("counted twice" in d for d in found["range-partition"])
    assert any(twin in d and "no won split write" in d for d in found["residual-origin"])
