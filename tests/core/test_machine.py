"""The machine without an event loop: a float for a clock, a store model, one call at a time.

Nothing here runs Trio. The world (:mod:`tests.core.world`) does not tick on its own here:
each heartbeat is the test's call, so each protocol step can be checked one input at a time.
"""

from __future__ import annotations

from spate import Gained, Lost, Plan, PlanContext, Progress, SplitSpec
from spate.store import Entry, Keyspace

from .world import KEYS, Worker, World


def two_splits(ctx: PlanContext) -> Plan:
    return Plan([SplitSpec("a", b""), SplitSpec("b", b"")], final=True)


def lone_worker() -> tuple[World, Worker]:
    """One worker of a two-split job, started and settled, in a world that does not tick."""
    world = World(ticking=False)
    worker = world.start("w1", planner=two_splits)
    world.settle()
    return world, worker


def test_a_lone_machine_elects_itself_plans_and_claims_every_split() -> None:
    world, w1 = lone_worker()
    assert w1.leading
    assert w1.owned == {"a", "b"}
    assert sorted(e.split for e in w1.of(Gained)) == ["a", "b"]
    record, _ = world.record("a")
    assert (record.owner, record.owner_nonce, record.epoch) == ("w1", w1.nonce, 1)


def test_a_commit_is_one_write_and_its_echo_changes_nothing() -> None:
    world, w1 = lone_worker()
    before = len(w1.ops)
    asked = w1.step_requests
    world.wait(w1.commit("a", Progress(watermark=7)))
    assert w1.step_requests == asked  # nothing another rule reads changed
    assert [(op.method, op.key) for op in w1.ops[before:]] == [("update", KEYS.split("a"))]
    # The echo of that write is known by its revision: nothing is decoded, nothing to do.
    echo = world.get(Keyspace.DURABLE, KEYS.split("a"))
    assert echo is not None
    assert w1.watch_put(Keyspace.DURABLE, echo) is False
    # A write by someone else at a newer revision is news.
    newer = Entry(echo.key, echo.value, echo.revision + 1)
    assert w1.watch_put(Keyspace.DURABLE, newer) is True


def test_time_is_the_injected_clock() -> None:
    world, w1 = lone_worker()
    # The self-fence reads the world's clock: cut off from the store, the worker ends its
    # tenancies once a whole lease has passed since its session's last confirmed renewal,
    # not before.
    renewed = w1.machine.presence_ok_at
    w1.partition()
    world.run_for(renewed + w1.lease - 0.01 - world.now)
    w1.heartbeat()
    world.settle()
    assert not w1.of(Lost)
    world.run_for(0.01)
    w1.heartbeat()
    world.settle()
    assert {lost.split for lost in w1.of(Lost)} == {"a", "b"}
    world.run_for(1234.5 - world.now)
    assert w1.machine.now() == 1234.5


def test_a_completed_commit_frees_its_lane_and_asks_the_rules_to_look() -> None:
    world, w1 = lone_worker()
    asked = w1.step_requests
    world.wait(w1.commit("a", Progress(watermark=9, completed=True)))
    assert "a" not in w1.owned
    # Ran outside any input (as an API call does): without this the freed lane would wait
    # for the next unrelated input or heartbeat.
    assert w1.step_requests > asked
