"""Fair blame: a dead owner's tenancy charges its split only when it moved nothing forward.

Each test drives one split through a chain of owners that die abruptly (their leases left to
expire, or the same instance id restarted at once, which reclaims its own live lease).
"""

from __future__ import annotations

import pytest

from spate import Gained, Progress
from spate._core.records import Status

from .world import LEASE, World, config, planner_of

MAX_ATTEMPTS = 3


def _instance(restart: bool, i: int) -> str:
    # restart: the same id comes straight back (a reclaim of its own live lease, as a process
    # supervisor restarting a crashed worker does); otherwise a fresh worker takes over after
    # the lease expires.
    return "w" if restart else f"w{i}"


@pytest.mark.parametrize("restart", [False, True], ids=["expiry", "reclaim"])
def test_a_split_that_kills_every_owner_before_committing_is_quarantined(restart: bool) -> None:
    world = World()
    cfg = config(max_attempts=MAX_ATTEMPTS)
    for i in range(MAX_ATTEMPTS):
        w = world.start(_instance(restart, i), planner=planner_of(1), cfg=cfg)
        world.run_until(lambda w=w: bool(w.of(Gained, "s00")), within=4 * LEASE)  # type: ignore[misc]
        w.kill()  # the handler "kills its process" before its first commit
        record, _ = world.record("s00")
        assert record.status is Status.RUNNABLE
        assert record.attempts == i  # the i-th owner was charged for its predecessor
    last = world.start(_instance(restart, MAX_ATTEMPTS), planner=planner_of(1), cfg=cfg)
    world.run_until(lambda: last.counts["quarantined"] >= 1, within=4 * LEASE)
    record, _ = world.record("s00")
    assert record.status is Status.QUARANTINED
    assert record.attempts == MAX_ATTEMPTS
    assert not last.of(Gained, "s00")  # parked, not handed to a fourth victim


@pytest.mark.parametrize("restart", [False, True], ids=["expiry", "reclaim"])
def test_a_split_that_keeps_committing_survives_the_deaths_of_its_workers(restart: bool) -> None:
    world = World()
    cfg = config(max_attempts=MAX_ATTEMPTS)
    deaths = 3 * MAX_ATTEMPTS
    for i in range(deaths):
        w = world.start(_instance(restart, i), planner=planner_of(1), cfg=cfg)
        world.run_until(lambda w=w: bool(w.of(Gained, "s00")), within=4 * LEASE)  # type: ignore[misc]
        # It resumes where the dead one got.
        assert w.of(Gained, "s00")[0].progress.watermark == (i or None)
        world.wait(w.commit("s00", Progress(i + 1)))  # moves forward, then the worker dies
        w.kill()
        record, _ = world.record("s00")
        assert record.attempts == 0
        assert record.status is Status.RUNNABLE
    last = world.start("survivor", planner=planner_of(1), cfg=cfg)
    world.run_until(lambda: bool(last.of(Gained, "s00")), within=4 * LEASE)
    world.wait(last.commit("s00", Progress(deaths + 1, completed=True)))
    record, _ = world.record("s00")
    assert record.status is Status.COMPLETED
    assert record.attempts == 0


def test_a_commit_that_does_not_move_the_watermark_is_no_alibi() -> None:
    # Re-committing the resume point (state only) is not progress: the death still charges.
    world = World()
    cfg = config(max_attempts=MAX_ATTEMPTS)
    a = world.start("a", planner=planner_of(1), cfg=cfg)
    world.run_until(lambda: bool(a.of(Gained, "s00")))
    world.wait(a.commit("s00", Progress(5)))
    a.kill()
    b = world.start("b", planner=planner_of(1), cfg=cfg)
    world.run_until(lambda: bool(b.of(Gained, "s00")), within=4 * LEASE)
    world.wait(b.commit("s00", Progress(5, b"only-state")))
    b.kill()
    c = world.start("c", planner=planner_of(1), cfg=cfg)
    world.run_until(lambda: bool(c.of(Gained, "s00")), within=4 * LEASE)
    record, _ = world.record("s00")
    assert record.attempts == 1  # a advanced (free), b did not (charged)


def test_fail_always_consumes_an_attempt_even_after_progress() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: bool(a.of(Gained, "s00")))
    world.wait(a.commit("s00", Progress(9)))
    world.wait(a.fail("s00", "bad input"))
    record, _ = world.record("s00")
    assert record.attempts == 1
    assert record.owner is None
