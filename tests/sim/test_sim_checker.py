"""The invariant checker flags each invariant's violation in a hand-made history, and nothing
in a clean one."""

from __future__ import annotations

import attrs
import pytest

from spate._core.records import PlanRecord, ProgressRecord, Status, encode
from spate_testing.sim._checker import INVARIANTS, check
from spate_testing.sim._history import (
    Acked,
    Balanced,
    BalanceMove,
    Delivered,
    Final,
    FinalSplit,
    Gained,
    History,
    HistoryEvent,
    Leading,
    Revocations,
    StoreWrite,
    Verdict,
)

JOB = "j"


class Builder:
    """Writes a history the way a fleet would, one progress write at a time."""

    def __init__(self) -> None:
        self.history = History(job=JOB, seed=None)
        self.t = 0.0
        self.revisions = 0
        self.records: dict[str, ProgressRecord] = {}

    def add(self, event: HistoryEvent) -> None:
        self.history.append(event)

    def tick(self) -> float:
        self.t += 1.0
        return self.t

    def write(self, actor: str, split: str, **changes: object) -> ProgressRecord:
        previous = self.records.get(split)
        record = (
            attrs.evolve(previous, **changes)  # type: ignore[arg-type]
            if previous is not None
            else ProgressRecord(id=split, **changes)  # type: ignore[arg-type]
        )
        self.revisions += 1
        self.add(
            StoreWrite(
                at=self.tick(),
                actor=actor,
                op="create" if previous is None else "update",
                keyspace="durable",
                key=f"{JOB}.split.{split}",
                expected=None if previous is None else self.revisions - 1,
                outcome="won",
                revision=self.revisions,
                value=encode(record),
            )
        )
        self.records[split] = record
        return record

    def claim(self, actor: str, split: str) -> int:
        epoch = self.records[split].epoch + 1
        self.write(actor, split, epoch=epoch, owner=actor.split("#")[0])
        self.add(
            Gained(
                at=self.tick(),
                actor=actor,
                split=split,
                epoch=epoch,
                watermark=self.records[split].watermark,
            )
        )
        return epoch

    def commit(self, actor: str, split: str, watermark: int, completed: bool = False) -> None:
        changes: dict[str, object] = {"watermark": watermark, "completed": completed}
        if completed:
            changes.update(status=Status.COMPLETED, owner=None)
        self.write(actor, split, **changes)
        self.ack(actor, split, watermark, completed)

    def ack(self, actor: str, split: str, watermark: int, completed: bool = False) -> None:
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

    def final(self, *, terminated: bool = True, expected: tuple[str, ...] | None = None) -> None:
        self.add(
            Final(
                at=self.tick(),
                plan_final=True,
                expected=expected if expected is not None else tuple(sorted(self.records)),
                splits=tuple(
                    FinalSplit(
                        split=r.id,
                        status=r.status.value,
                        epoch=r.epoch,
                        watermark=r.watermark,
                        completed=r.completed,
                        owner=r.owner,
                    )
                    for r in sorted(self.records.values(), key=lambda r: r.id)
                ),
                terminated=terminated,
                bound=60.0,
            )
        )


def clean_run(b: Builder, *, finish: bool = True) -> None:
    """Two splits: `a` moves from w1 to w2 and completes; `b` is quarantined."""
    b.write("w1#1", "a")
    b.write("w1#1", "b")
    b.claim("w1#1", "a")
    b.commit("w1#1", "a", 5)
    b.claim("w2#1", "a")  # w1 expired: w2 takes over at epoch 2
    b.commit("w2#1", "a", 8)
    b.commit("w2#1", "a", 10, completed=True)
    b.claim("w2#1", "b")
    b.write("w2#1", "b", owner=None, attempts=1)  # failed
    b.write("w1#2", "b", epoch=2, status=Status.QUARANTINED, attempts=2)
    b.add(
        Revocations(
            at=b.tick(), actor="w2#1", requested=2, drained=1, forced=1, cancelled=0, settled=True
        )
    )
    if finish:
        b.add(Verdict(at=b.tick(), actor="w1#2", all_complete=False, completed=1, quarantined=1))
        b.final()


def names(b: Builder) -> set[str]:
    return {v.invariant for v in check(b.history)}


def verdict(b: Builder, completed: int = 1, quarantined: int = 0) -> None:
    all_complete = quarantined == 0
    b.add(
        Verdict(
            at=b.tick(),
            actor="w1#2",
            all_complete=all_complete,
            completed=None if all_complete else completed,
            quarantined=None if all_complete else quarantined,
        )
    )


def test_a_clean_history_passes() -> None:
    b = Builder()
    clean_run(b)
    assert check(b.history) == []


def test_a_write_at_a_lower_epoch_is_flagged_as_stale() -> None:
    b = Builder()
    clean_run(b, finish=False)
    b.write("w1#1", "a", epoch=1)
    b.final()
    assert "stale-epoch" in names(b)


def test_a_zombie_write_at_the_current_epoch_by_another_incarnation_is_flagged_as_stale() -> None:
    b = Builder()
    b.write("w1#1", "a")
    b.claim("w1#1", "a")
    b.commit("w1#1", "a", 3)
    b.write("w1#2", "a", watermark=4)  # a restarted w1 writes without claiming the split
    b.commit("w1#1", "a", 5, completed=True)
    verdict(b)
    b.final()
    assert names(b) == {"stale-epoch"}


def test_acknowledged_commits_out_of_epoch_order_are_flagged_as_stale_without_store_writes() -> (
    None
):
    history = History(job=JOB)
    history.extend(
        [
            Acked(at=1, actor="w1", split="a", epoch=2, watermark=5, completed=False),
            Acked(at=2, actor="w2", split="a", epoch=1, watermark=7, completed=False),
        ]
    )
    assert "stale-epoch" in {v.invariant for v in check(history)}


def test_two_gains_of_one_epoch_are_flagged() -> None:
    b = Builder()
    clean_run(b, finish=False)
    b.add(Gained(at=b.tick(), actor="w3#1", split="a", epoch=2, watermark=5))
    verdict(b, 1, 1)
    b.final()
    assert names(b) == {"two-owners"}


def test_acknowledgements_to_two_actors_at_one_epoch_are_flagged() -> None:
    history = History(job=JOB)
    history.extend(
        [
            Acked(at=1, actor="w1", split="a", epoch=3, watermark=5, completed=False),
            Acked(at=2, actor="w2", split="a", epoch=3, watermark=6, completed=False),
        ]
    )
    assert "two-owners" in {v.invariant for v in check(history)}


def test_an_acknowledged_commit_that_never_landed_is_flagged_as_lost() -> None:
    b = Builder()
    clean_run(b, finish=False)
    b.claim("w1#2", "a")
    b.ack("w1#2", "a", 12)  # told it landed; the store never saw it
    verdict(b, 1, 1)
    b.final()
    assert names(b) == {"lost-ack"}


def test_a_final_watermark_below_an_acknowledged_commit_is_flagged_as_lost() -> None:
    b = Builder()
    clean_run(b)
    final = b.history.events[-1]
    assert isinstance(final, Final)
    lowered = tuple(attrs.evolve(s, watermark=9) if s.split == "a" else s for s in final.splits)
    b.history.events[-1] = attrs.evolve(final, splits=lowered)
    assert names(b) == {"lost-ack"}


def test_a_watermark_moving_back_in_the_store_is_flagged() -> None:
    b = Builder()
    b.write("w1#1", "a")
    b.claim("w1#1", "a")
    b.commit("w1#1", "a", 5)
    b.write("w1#1", "a", watermark=4)
    b.write("w1#1", "a", watermark=6, completed=True, status=Status.COMPLETED)
    verdict(b)
    b.final()
    assert names(b) == {"watermark-regression"}


def test_an_uncompleted_split_is_flagged_as_a_regression() -> None:
    b = Builder()
    clean_run(b, finish=False)
    b.write("w2#1", "a", completed=False, status=Status.RUNNABLE)
    b.write("w2#1", "a", completed=True, status=Status.COMPLETED)
    verdict(b, 1, 1)
    b.final()
    assert names(b) == {"watermark-regression"}


def test_a_deleted_progress_record_is_flagged_as_a_regression() -> None:
    b = Builder()
    clean_run(b, finish=False)
    b.add(
        StoreWrite(
            at=b.tick(),
            actor="w1#2",
            op="delete",
            keyspace="durable",
            key=f"{JOB}.split.a",
            expected=None,
            outcome="won",
            revision=99,
        )
    )
    verdict(b, 1, 1)
    b.final()
    assert "watermark-regression" in names(b)


def test_a_runnable_split_at_the_end_of_a_final_plan_is_flagged() -> None:
    b = Builder()
    clean_run(b, finish=False)
    b.write("w1#2", "c")
    verdict(b, 1, 1)
    b.final()
    assert "unfinished-split" in names(b)


def test_a_planned_split_missing_from_the_listing_is_flagged() -> None:
    b = Builder()
    clean_run(b, finish=False)
    verdict(b, 1, 1)
    b.final(expected=("a", "b", "c"))
    assert names(b) == {"unfinished-split"}


@pytest.mark.parametrize(
    ("completed", "quarantined"), [(2, 0), (1, 2), (0, 1)], ids=["all", "more-q", "fewer-c"]
)
def test_a_verdict_that_disagrees_with_the_listing_is_flagged(
    completed: int, quarantined: int
) -> None:
    b = Builder()
    clean_run(b, finish=False)
    verdict(b, completed, quarantined)
    b.final()
    assert names(b) == {"verdict-mismatch"}


@pytest.mark.parametrize(
    ("counts", "problem"),
    [
        ({"requested": 1, "drained": 1, "forced": 1, "cancelled": 0, "settled": False}, None),
        ({"requested": 2, "drained": 1, "forced": 0, "cancelled": 0, "settled": True}, None),
        (
            {"requested": 1, "drained": 0, "forced": 0, "cancelled": 0, "settled": False},
            "1 revocation(s) in flight but only 0 drain(s) reported",
        ),
    ],
    ids=["over-settled", "open-at-close", "live-problem"],
)
def test_a_broken_revocation_identity_is_flagged(
    counts: dict[str, int | bool], problem: str | None
) -> None:
    b = Builder()
    clean_run(b)
    b.add(Revocations(at=b.tick(), actor="w3#1", problem=problem, **counts))  # type: ignore[arg-type]
    assert names(b) == {"revocation-identity"}


def test_a_job_cut_off_at_its_bound_is_flagged() -> None:
    b = Builder()
    clean_run(b, finish=False)
    verdict(b, 1, 1)
    b.final(terminated=False)
    assert names(b) == {"termination"}


def test_a_history_without_an_ending_is_flagged() -> None:
    b = Builder()
    clean_run(b, finish=False)
    assert names(b) == {"termination"}


def test_a_run_that_ends_without_any_verdict_is_flagged() -> None:
    b = Builder()
    clean_run(b, finish=False)
    b.final()
    assert names(b) == {"termination"}


def delivered(b: Builder, actor: str, keyspace: str, *keys: str, snapshot: bool = False) -> None:
    b.add(Delivered(at=b.tick(), actor=actor, keyspace=keyspace, keys=keys, snapshot=snapshot))


def leading(b: Builder, actor: str, leads: bool) -> None:
    b.add(Leading(at=b.tick(), actor=actor, leading=leads))


def test_what_each_role_watches_is_not_flagged() -> None:
    b = Builder()
    clean_run(b)
    leading(b, "w1#1", True)
    delivered(b, "w1#1", "ephemeral", f"{JOB}.split.a", f"{JOB}.split.b", snapshot=True)
    delivered(b, "w1#1", "ephemeral", f"{JOB}.split.a")  # the leader hears leases
    delivered(b, "w1#1", "durable", f"{JOB}.lease.a")  # (durable ones, on per-key stores)
    delivered(b, "w1#1", "durable", f"{JOB}.assign.w2")  # ... and may hear assignments
    delivered(b, "w2#1", "durable", f"{JOB}.assign.w2")  # a follower its own assignment
    assert check(b.history) == []


@pytest.mark.parametrize(
    ("actor", "keyspace", "key", "wrong"),
    [
        ("w1#1", "durable", f"{JOB}.split.a", "a progress record"),  # even to the leader
        ("w2#1", "durable", f"{JOB}.split.a", "a progress record"),
        ("w2#1", "durable", f"{JOB}.spec.a", "a spec"),
        ("w2#1", "ephemeral", f"{JOB}.split.a", "a lease while not leading"),
        ("w2#1", "durable", f"{JOB}.lease.a", "a lease while not leading"),
        ("w2#1", "durable", f"{JOB}.assign.w3", "another instance's assignment record"),
        ("w3#1", "ephemeral", f"{JOB}.split.a", "a lease while not leading"),  # w3 stepped down
    ],
)
def test_a_delivery_nobody_should_hear_is_flagged(
    actor: str, keyspace: str, key: str, wrong: str
) -> None:
    b = Builder()
    clean_run(b)
    leading(b, "w1#1", True)
    leading(b, "w3#1", True)
    leading(b, "w3#1", False)
    delivered(b, actor, keyspace, key)
    delivered(b, actor, keyspace, key, snapshot=True)
    violations = check(b.history)
    assert [v.invariant for v in violations] == ["foreign-delivery"]
    assert wrong in violations[0].detail
    assert "2 time(s)" in violations[0].detail  # one violation per worker and kind


def balanced(
    at: float,
    actor: str,
    *moves: tuple[str, str, str, float],
    job_load: float = 10.0,
    budget: float = 0.25,
    cooldown: float = 30.0,
) -> Balanced:
    return Balanced(
        at=at,
        actor=actor,
        round=1,
        reason="moved" if moves else "within band",
        moves=tuple(BalanceMove(split=s, source=a, target=b, load=x) for s, a, b, x in moves),
        moved_load=sum(m[3] for m in moves),
        job_load=job_load,
        budget=budget,
        cooldown=cooldown,
    )


def test_balance_rounds_within_their_rules_are_not_flagged() -> None:
    b = Builder()
    clean_run(b)
    b.add(balanced(100.0, "w1#1", ("a", "w1", "w2", 1.5), ("b", "w1", "w3", 1.0)))  # 2.5 of 10
    b.add(balanced(110.0, "w1#1", ("c", "w2", "w1", 2.0)))
    b.add(Leading(at=115.0, actor="w1#1", leading=False))
    b.add(Leading(at=116.0, actor="w2#1", leading=True))
    b.add(balanced(130.0, "w2#1", ("a", "w2", "w3", 1.5)))  # a full cooldown after its move
    assert check(b.history) == []


def test_a_split_moved_again_within_its_cooldown_is_flagged() -> None:
    b = Builder()
    clean_run(b)
    b.add(balanced(100.0, "w1#1", ("a", "w1", "w2", 1.5)))
    b.add(balanced(129.0, "w1#1", ("a", "w2", "w3", 1.5)))
    violations = check(b.history)
    assert [v.invariant for v in violations] == ["balance-cooldown"]
    assert "'a'" in violations[0].detail
    assert "29.000 s after" in violations[0].detail


def test_a_new_leader_moving_a_split_within_the_old_leaders_cooldown_is_flagged() -> None:
    # The failover case: the cooldown is the split's, not the leader's.
    b = Builder()
    clean_run(b)
    b.add(balanced(100.0, "w1#1", ("a", "w1", "w2", 1.5)))
    b.add(Leading(at=101.0, actor="w1#1", leading=False))
    b.add(Leading(at=104.0, actor="w2#1", leading=True))
    b.add(balanced(105.0, "w2#1", ("a", "w2", "w1", 1.5)))
    violations = check(b.history)
    assert [v.invariant for v in violations] == ["balance-cooldown"]
    assert "w2#1's round" in violations[0].detail
    assert "w1#1's round" in violations[0].detail


def bump(b: Builder, actor: str, generation: int) -> None:
    """``actor``'s generation bump lands: it leads at ``generation``."""
    b.revisions += 1
    b.add(
        StoreWrite(
            at=b.tick(),
            actor=actor,
            op="update",
            keyspace="durable",
            key=f"{JOB}.plan",
            expected=b.revisions - 1,
            outcome="won",
            revision=b.revisions,
            value=encode(PlanRecord(fingerprint="f", generation=generation)),
        )
    )


def test_a_deposed_leaders_round_neither_breaks_nor_starts_a_cooldown() -> None:
    # w1 led at generation 1; w2's bump to 2 landed while w1 was cut off. Back, w1 runs one
    # more round before it hears (its moves are fenced), and w2 moves the same split: no
    # violation, whichever way round. Double leadership may cost balance, never a cooldown.
    b = Builder()
    clean_run(b)
    bump(b, "w1#1", 1)
    b.add(balanced(100.0, "w1#1", ("a", "w1", "w2", 1.5)))
    bump(b, "w2#1", 2)
    b.add(balanced(140.0, "w1#1", ("b", "w1", "w2", 1.0)))  # deposed, not yet aware
    b.add(balanced(141.0, "w2#1", ("b", "w1", "w3", 1.0)))
    assert check(b.history) == []
    # The current leader's own rounds are still held to it.
    b.add(balanced(142.0, "w2#1", ("b", "w3", "w1", 1.0)))
    assert [v.invariant for v in check(b.history)] == ["balance-cooldown"]


@pytest.mark.parametrize("reported", [None, 3.0])
def test_a_round_over_its_budget_is_flagged(reported: float | None) -> None:
    # By the moves' loads (2.0 + 1.0 of 10 at a budget of 0.25), or by the round's own account.
    b = Builder()
    clean_run(b)
    if reported is None:
        b.add(balanced(100.0, "w1#1", ("a", "w1", "w2", 2.0), ("b", "w1", "w3", 1.0)))
    else:
        b.add(
            attrs.evolve(
                balanced(100.0, "w1#1", ("a", "w1", "w2", 2.0), ("b", "w3", "w2", 0.2)),
                moved_load=reported,
            )
        )
    violations = check(b.history)
    assert [v.invariant for v in violations] == ["balance-budget"]
    assert "more than its budget of 0.25" in violations[0].detail


@pytest.mark.parametrize(
    "moves",
    [
        [("a", "w1", "w2", 5.0)],  # a move
        [("a", "w1", "w2", 5.0), ("b", "w2", "w1", 1.0), ("c", "w2", "w1", 0.5)],  # one for two
    ],
)
def test_one_step_past_the_budget_alone_is_not_flagged(
    moves: list[tuple[str, str, str, float]],
) -> None:
    # rule 8: a round that moves nothing else may make one step costing more than its budget
    b = Builder()
    clean_run(b)
    b.add(balanced(100.0, "w1#1", *moves))
    assert check(b.history) == []


@pytest.mark.parametrize(
    "moves",
    [
        [("a", "w1", "w2", 5.0), ("b", "w3", "w1", 4.0)],  # a second step past the budget
        [("a", "w1", "w2", 5.0), ("b", "w1", "w2", 4.0)],  # two splits one way
        [("a", "w1", "w2", 5.0), ("b", "w3", "w4", 0.1)],  # beside another move
        [("a", "w1", "w2", 5.0), ("b", "w2", "w1", 1.0), ("c", "w2", "w3", 0.1)],
    ],
)
def test_a_step_past_the_budget_beside_another_move_is_flagged(
    moves: list[tuple[str, str, str, float]],
) -> None:
    b = Builder()
    clean_run(b)
    b.add(balanced(100.0, "w1#1", *moves))
    assert [v.invariant for v in check(b.history)] == ["balance-budget"]


def test_a_round_at_its_budget_is_not_flagged() -> None:
    b = Builder()
    clean_run(b)
    b.add(balanced(100.0, "w1#1", ("a", "w1", "w2", 0.1 * 3), ("b", "w1", "w3", 0.1 * 7 / 3)))
    b.add(balanced(101.0, "w1#1", ("c", "w1", "w2", 1.0), job_load=10.0, budget=0.1))
    assert check(b.history) == []


def settled_round(
    at: float,
    actor: str,
    round_: int,
    loads: dict[str, float],
    *moves: tuple[str, str, str, float],
    reason: str = "",
) -> Balanced:
    """A round whose workers carry ``loads`` after ``moves`` (band 10%)."""
    return attrs.evolve(
        balanced(at, actor, *moves),
        round=round_,
        reason=reason or ("moved" if moves else "within band"),
        loads=tuple(sorted(loads.items())),
        band=0.10,
    )


# Three workers of mean 2.0: half a band is 0.1 of load.
SETTLED = {"w1": 2.05, "w2": 1.95, "w3": 2.0}


def test_a_move_after_the_fleet_settled_with_loads_holding_still_is_flagged() -> None:
    b = Builder()
    clean_run(b)
    b.add(settled_round(100.0, "w1#1", 5, SETTLED))
    b.add(settled_round(105.0, "w1#1", 6, {"w1": 2.1, "w2": 1.9, "w3": 2.0}))
    # loads within 0.08 of the settled round's before the move: the move is flagged
    b.add(
        settled_round(110.0, "w1#1", 7, {"w1": 1.98, "w2": 2.02, "w3": 2.0}, ("a", "w1", "w2", 0.1))
    )
    violations = check(b.history)
    assert [v.invariant for v in violations] == ["balance-settled"]
    assert "'a' (w1 -> w2)" in violations[0].detail


def test_a_move_once_loads_moved_on_or_after_another_judgement_is_not_flagged() -> None:
    b = Builder()
    clean_run(b)
    b.add(settled_round(100.0, "w1#1", 5, SETTLED))
    # w1 went 0.3 up (more than half a band): loads did not hold still
    b.add(
        settled_round(105.0, "w1#1", 6, {"w1": 2.1, "w2": 2.0, "w3": 2.0}, ("a", "w1", "w2", 0.25))
    )
    b.add(settled_round(110.0, "w1#1", 7, SETTLED))
    # a worker joined: another fleet
    b.add(settled_round(115.0, "w1#1", 8, {**SETTLED, "w4": 0.0}, ("b", "w1", "w4", 0.5)))
    b.add(settled_round(120.0, "w1#1", 9, SETTLED))
    # a round that judged the fleet otherwise (it went idle) ends the spell
    b.add(settled_round(125.0, "w1#1", 10, SETTLED, reason="idle"))
    b.add(settled_round(130.0, "w1#1", 11, SETTLED, ("c", "w1", "w2", 0.05)))
    # and a new leadership remembers nothing of the last one's settled round
    b.add(settled_round(135.0, "w1#1", 12, SETTLED))
    b.add(settled_round(140.0, "w2#1", 1, SETTLED, ("d", "w1", "w2", 0.05)))
    b.add(settled_round(145.0, "w1#1", 1, SETTLED, ("e", "w1", "w2", 0.05)))
    assert check(b.history) == []


def test_rounds_without_loads_are_not_judged_for_settling() -> None:
    b = Builder()
    clean_run(b)
    b.add(balanced(100.0, "w1#1"))
    b.add(balanced(110.0, "w1#1", ("a", "w1", "w2", 0.1)))
    assert check(b.history) == []


def test_every_invariant_is_exercised_by_a_violating_history() -> None:
    # Pins the list: a new invariant needs a test above that shows the checker can fail it.
    tested = {
        "stale-epoch",
        "two-owners",
        "lost-ack",
        "watermark-regression",
        "unfinished-split",
        "verdict-mismatch",
        "revocation-identity",
        "termination",
        "range-partition",  # (test_sim_splitting.py)
        "residual-origin",  # (test_sim_splitting.py)
        "foreign-delivery",
        "balance-cooldown",
        "balance-budget",
        "balance-settled",
    }
    assert tested == set(INVARIANTS)


def test_skip_drops_the_named_invariant() -> None:
    b = Builder()
    clean_run(b, finish=False)
    verdict(b, 1, 1)
    b.final(terminated=False)
    assert check(b.history, skip=["termination"]) == []


def test_skip_rejects_unknown_invariants() -> None:
    with pytest.raises(ValueError, match="unknown invariant"):
        check(History(job=JOB), skip=["no-such-rule"])


def test_a_history_survives_a_round_trip_through_json_lines() -> None:
    b = Builder()
    clean_run(b)
    b.add(balanced(100.0, "w1#1", ("a", "w1", "w2", 1.5)))
    b.add(settled_round(110.0, "w1#1", 2, SETTLED))
    again = History.from_jsonl(b.history.to_jsonl())
    assert again.events == b.history.events
    assert again.digest() == b.history.digest()
