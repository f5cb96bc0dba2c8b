"""Election, the generation fence, deposition, and planning, machine by machine."""

from __future__ import annotations

import attrs
import pytest

from spate import Lost, Plan, PlanContext, PlanError, RevokeRequested, SplitSpec
from spate._core.records import AssignmentRecord, Finality, LeaderRecord, PlanRecord, decode, encode
from spate.store import Keyspace, Won

from .world import JOB, KEYS, LEASE, World, config, planner_of


def plan_record(world: World) -> tuple[PlanRecord, int]:
    entry = world.get(Keyspace.DURABLE, KEYS.plan)
    assert entry is not None
    return decode(PlanRecord, entry.key, entry.value), entry.revision


def test_single_leader() -> None:
    world = World()
    workers = [world.start(f"w{i}") for i in range(3)]
    world.run_for(3 * LEASE)
    leaders = [w for w in workers if w.leading]
    assert len(leaders) == 1
    entry = world.get(Keyspace.EPHEMERAL, KEYS.leader)
    assert entry is not None
    assert decode(LeaderRecord, entry.key, entry.value).owner == leaders[0].instance
    plan, _ = plan_record(world)
    assert plan.generation == 1


def test_leader_failover_bumps_generation() -> None:
    world = World()
    workers = [world.start(f"w{i}") for i in range(3)]
    world.run_for(LEASE)
    (leader,) = [w for w in workers if w.leading]
    before, _ = plan_record(world)
    leader.kill()
    survivors = [w for w in workers if w is not leader]
    world.run_until(lambda: any(w.leading for w in survivors), within=2 * LEASE)
    world.settle()  # the election's generation bump lands at the same instant
    after, _ = plan_record(world)
    assert after.generation == before.generation + 1


def test_deposed_leader_steps_down_and_a_stale_generation_assignment_is_ignored() -> None:
    world = World()
    a = world.start("a")
    world.run_until(lambda: a.leading)
    b = world.start("b")
    world.run_for(LEASE)
    a.freeze()  # a stops: its leader key expires, b is elected
    world.run_until(lambda: b.leading, within=3 * LEASE)
    world.settle()  # the election's generation bump lands at the same instant
    plan, _ = plan_record(world)
    assert plan.generation == 2
    a.thaw()
    world.run_until(lambda: not a.leading, within=LEASE)
    world.run_for(LEASE)
    assert b.leading
    assert not a.leading
    # A deposed leader's late assignment (older generation) must not move b.
    entry = world.get(Keyspace.DURABLE, KEYS.assign("b"))
    assert entry is not None
    held = b.owned
    events_before = len(b.events)
    stale = AssignmentRecord(generation=1, splits=())
    written = world.write("update", Keyspace.DURABLE, entry.key, encode(stale), entry.revision)
    assert isinstance(written, Won)
    world.run_for(LEASE)
    assert not [e for e in b.events[events_before:] if isinstance(e, RevokeRequested | Lost)]
    assert b.owned >= held


def test_deposed_leaders_plan_publish_is_fenced() -> None:
    calls = 0

    def planner(ctx: PlanContext) -> Plan:
        nonlocal calls
        calls += 1
        return Plan([SplitSpec(f"s{calls}")], final=False)

    world = World()
    a = world.start("a", planner=planner, cfg=config(replan_interval=LEASE))
    world.run_until(lambda: calls == 1 and len(a.owned) == 1)
    moved: list[PlanRecord] = []

    def another_writer_moves_the_plan() -> None:
        # While the replan runs, another writer moves the plan record (as a successor's bump
        # would): the publish that follows was decided from the revision before.
        plan, revision = plan_record(world)
        moved.append(attrs.evolve(plan, updated_at_ms=plan.updated_at_ms + 1))
        world.write("update", Keyspace.DURABLE, KEYS.plan, encode(moved[0]), revision)

    a.before_next("update", Keyspace.DURABLE, KEYS.plan, another_writer_moves_the_plan)
    mark = len(world.store_writes())

    def stepped_down() -> bool:
        # The publish lost its compare-and-swap, then the leader gave its key back. (The
        # only worker, it may be elected again at once, so "not leading" can last no time
        # at all: the writes say what happened.)
        done = [(op, how) for _, op, how in a.writes]
        lost = ("plan-publish", "lost")
        return lost in done and ("resign", "won") in done[done.index(lost) :]

    world.run_until(stepped_down, within=3 * LEASE)
    # The fenced publish wrote nothing: no plan of the deposed generation moved past the
    # record the other writer left (a new election's own records come at generation 2).
    landed = [
        decode(PlanRecord, w.key, w.value)
        for w in world.store_writes()[mark:]
        if w.key == KEYS.plan and w.outcome == "won" and w.value is not None
    ]
    assert [p for p in landed if p.generation == moved[0].generation] == moved


def test_planning_writes_specs_then_progress_then_the_plan() -> None:
    world = World()
    a = world.start("a", planner=planner_of(3))
    world.run_for(1)
    assert len(a.owned) == 3
    durable = [(w.op, w.key) for w in world.store_writes(Keyspace.DURABLE) if w.actor == a.actor]
    specs = [i for i, (_, key) in enumerate(durable) if key.startswith(f"{JOB}.spec.")]
    seeds = [
        i for i, (k, key) in enumerate(durable) if k == "create" and key.startswith(f"{JOB}.split.")
    ]
    publish = [i for i, (k, key) in enumerate(durable) if k == "update" and key == KEYS.plan]
    assert len(specs) == len(seeds) == 3
    assert max(specs) < min(seeds)
    assert max(seeds) < publish[-1]
    plan, _ = plan_record(world)
    assert plan.planned == 3
    assert plan.finality is Finality.FINAL


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (Plan([SplitSpec("a"), SplitSpec("a")]), "twice"),
        ("not a plan", "not spate.Plan"),
        (Plan([SplitSpec("big", b"x" * 2 * 1024 * 1024)]), "over this store's limit"),
    ],
)
def test_invalid_plan_is_a_plan_error_and_nothing_is_written(result: object, message: str) -> None:
    def planner(ctx: PlanContext) -> Plan:
        return result  # type: ignore[return-value]  # deliberately not always a valid Plan

    world = World()
    w = world.start("w", planner=planner, expect_error=True)
    world.run_until(lambda: w.stopped, within=LEASE)
    assert isinstance(w.error, PlanError)
    assert message in str(w.error)
    keys = [e.key for e in world.listing(Keyspace.DURABLE, "")]
    assert not [k for k in keys if k.startswith((f"{JOB}.spec.", f"{JOB}.split."))]
    plan, _ = plan_record(world)
    assert plan.planned == 0


def test_planner_that_raises_is_retried_with_backoff_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    calls: list[float] = []

    def planner(ctx: PlanContext) -> Plan:
        calls.append(world.now)
        if len(calls) < 3:
            raise OSError("the source is not ready")
        return Plan([SplitSpec("s")], final=True)

    w = world.start("w", planner=planner)
    world.run_for(10)
    assert w.owned == {"s"}
    assert len(calls) == 3
    assert calls[2] - calls[1] > calls[1] - calls[0] > 0  # backing off
    assert "the planner raised" in caplog.text
    assert "the source is not ready" in caplog.text


def test_open_plan_replans_with_context_and_cursor() -> None:
    seen: list[PlanContext] = []

    def planner(ctx: PlanContext) -> Plan:
        seen.append(ctx)
        n = len(seen)
        return Plan([SplitSpec(f"s{i}") for i in range(n)], final=n == 3, cursor=str(n).encode())

    world = World()
    w = world.start("w", planner=planner, cfg=config(replan_interval=LEASE))
    world.run_for(5 * LEASE)
    assert w.owned == {"s0", "s1", "s2"}
    assert len(seen) == 3  # final: no more replans
    assert seen[1].known == {"s0"}
    assert seen[1].cursor == b"1"
    assert seen[2].cursor == b"2"
    plan, _ = plan_record(world)
    assert plan.cursor == b"3"
    assert plan.planned == 3
