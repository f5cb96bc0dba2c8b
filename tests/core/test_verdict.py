"""The published verdict: the leader judges and writes it, every worker returns it."""

from __future__ import annotations

import attrs

from spate import AllComplete, Gained, Progress, Stalled
from spate._core.records import PlanRecord, VerdictRecord, decode, encode
from spate.store import Keyspace

from .world import KEYS, LEASE, Worker, World, complete_on_gain, config, planner_of

DURABLE = Keyspace.DURABLE


def plan_record(world: World) -> tuple[PlanRecord, int]:
    """The plan record as the store holds it, and its revision."""
    entry = world.get(DURABLE, KEYS.plan)
    assert entry is not None
    return decode(PlanRecord, entry.key, entry.value), entry.revision


def verdict_writes(*workers: Worker) -> list[tuple[str, str]]:
    """Every verdict write and generation bump of ``workers``, in order: (operation, outcome)."""
    return [
        (op, how)
        for w in workers
        for _, op, how in w.writes
        if op in ("verdict-publish", "generation-bump")
    ]


def finish(world: World, workers: list[Worker], *, poison: str | None = None) -> None:
    """Complete every split the workers hold (``poison`` fails instead: quarantined at cap 1)."""
    for worker in workers:
        for split in sorted(worker.owned):
            if split == poison:
                world.wait(worker.fail(split, "poison"))
            else:
                world.wait(worker.commit(split, Progress(1, completed=True)))


def test_a_follower_returns_the_leaders_verdict_without_listing() -> None:
    world = World()
    cfg = config(max_attempts=1)
    workers = [world.start(name, planner=planner_of(6), cfg=cfg) for name in ("a", "b", "c")]
    a, b, c = workers
    world.run_until(
        lambda: sum(len(w.owned) for w in workers) == 6 and all(w.owned for w in workers)
    )
    assert a.leading
    assert not b.leading
    assert not c.leading
    finish(world, workers, poison="s00")
    world.run_until(lambda: all(w.of(Stalled) for w in workers), within=3 * LEASE)
    for worker in workers:
        assert worker.of(Stalled) == [Stalled(completed=5, quarantined=1)]
        assert not worker.of(AllComplete)
    # Only the leader listed the job's progress records (for the verdict; its plan's count is
    # its view's).
    assert a.listings(KEYS.split_prefix) == 1
    assert b.listings(KEYS.split_prefix) == 0
    assert c.listings(KEYS.split_prefix) == 0
    plan, _ = plan_record(world)
    assert plan.verdict == VerdictRecord(all_complete=False, completed=5, quarantined=1)


def test_a_worker_that_joins_after_the_verdict_returns_it_without_listing() -> None:
    world = World()
    a = world.start("a", planner=planner_of(2), on_event=complete_on_gain)
    world.run_until(lambda: bool(a.of(AllComplete)))
    b = world.start("b", planner=planner_of(2))
    world.run_until(lambda: bool(b.of(AllComplete)), within=LEASE)
    assert b.listings(KEYS.split_prefix) == 0
    assert not b.of(Gained)
    # Latched: written once, and never again by anyone.
    world.run_for(2 * LEASE)
    assert [w for w in verdict_writes(a, b) if w[0] == "verdict-publish"] == [
        ("verdict-publish", "won")
    ]
    assert len(b.of(AllComplete)) == 1


def test_a_deposed_leaders_verdict_loses_against_its_successors_generation() -> None:
    world = World()
    a = world.start("a", planner=planner_of(2))
    world.run_until(lambda: len(a.owned) == 2)
    deposed_at, _ = plan_record(world)

    def successor_bumps() -> None:
        plan, rev = plan_record(world)
        bumped = attrs.evolve(plan, generation=plan.generation + 1)
        world.write("update", DURABLE, KEYS.plan, encode(bumped), expected=rev)

    # The successor's generation bump lands just before the verdict's write.
    a.before_next("update", DURABLE, KEYS.plan, successor_bumps)
    finish(world, [a])
    world.run_until(lambda: ("verdict-publish", "lost") in verdict_writes(a), within=LEASE)
    assert not a.of(AllComplete)
    # The verdict is the new generation's to write: here `a` itself, re-elected.
    world.run_until(lambda: bool(a.of(AllComplete)), within=5 * LEASE)
    assert verdict_writes(a) == [
        ("generation-bump", "won"),
        ("verdict-publish", "lost"),
        ("generation-bump", "won"),
        ("verdict-publish", "won"),
    ]
    plan, _ = plan_record(world)
    assert plan.generation == deposed_at.generation + 2
    assert plan.verdict == VerdictRecord(all_complete=True, completed=2, quarantined=0)


def test_a_verdict_judged_from_a_listing_older_than_the_plan_record_is_not_published() -> None:
    # The operator's requeue rewrites the plan record after moving a split back: a verdict
    # judged from a listing that began before that write must not be published.
    world = World()
    a = world.start("a", planner=planner_of(2))
    world.run_until(lambda: len(a.owned) == 2)
    listings: list[int] = []

    def operator_rewrites_the_plan() -> None:
        listings.append(a.listings(KEYS.split_prefix))
        plan, rev = plan_record(world)
        world.write("update", DURABLE, KEYS.plan, encode(attrs.evolve(plan, updated_at_ms=1)), rev)
        entry = world.get(DURABLE, KEYS.plan)
        assert entry is not None
        a.watch_put(DURABLE, entry)  # heard before the listing's answer

    a.before_next("list", DURABLE, KEYS.split_prefix, operator_rewrites_the_plan)
    finish(world, [a])
    world.run_until(lambda: bool(a.of(AllComplete)), within=3 * LEASE)
    # The listing in flight decided nothing: a fresh one did.
    assert a.listings(KEYS.split_prefix) == listings[0] + 1
    assert [w for w in verdict_writes(a) if w[0] == "verdict-publish"] == [
        ("verdict-publish", "won")
    ]


def test_a_new_leader_publishes_the_verdict_its_dead_predecessor_did_not() -> None:
    world = World()
    a = world.start("a", planner=planner_of(4))
    b = world.start("b", planner=planner_of(4))
    world.run_until(lambda: len(a.owned) + len(b.owned) == 4 and bool(b.owned))
    assert a.leading
    held = a.hold_next("update", DURABLE, KEYS.plan)
    finish(world, [a, b])
    world.run_until(lambda: held.arrived, within=LEASE)
    generation = plan_record(world)[0].generation
    a.kill()  # the verdict's write never lands
    world.run_until(lambda: bool(b.of(AllComplete)), within=5 * LEASE)
    assert not a.of(AllComplete)
    assert ("verdict-publish", "won") in verdict_writes(b)
    plan, _ = plan_record(world)
    assert plan.generation > generation
    assert plan.verdict == VerdictRecord(all_complete=True, completed=4, quarantined=0)
