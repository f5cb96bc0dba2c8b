"""A split's progress record keeps why it last failed: what `spate status` shows an operator."""

from __future__ import annotations

import pytest

from spate import Gained
from spate._core.records import MAX_REASON, Status

from .world import LEASE, World, config, planner_of


def test_a_failure_keeps_the_handlers_reason_in_the_record() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1), cfg=config(max_attempts=1))
    world.run_until(lambda: bool(a.of(Gained, "s00")))
    world.wait(a.fail("s00", "row 17: bad input"))
    record, _ = world.record("s00")
    assert record.status is Status.QUARANTINED
    assert record.reason == "row 17: bad input"


def test_a_long_reason_is_cut_to_the_bound() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1), cfg=config(max_attempts=3))
    world.run_until(lambda: bool(a.of(Gained, "s00")))
    world.wait(a.fail("s00", "x" * 10_000))
    record, _ = world.record("s00")
    assert record.status is Status.RUNNABLE  # an attempt left: the reason is kept all the same
    assert len(record.reason) == MAX_REASON
    assert record.reason.endswith("…")


@pytest.mark.parametrize("restart", [False, True], ids=["expiry", "reclaim"])
def test_the_leaders_quarantine_says_the_owners_went_away(restart: bool) -> None:
    world = World()
    cfg = config(max_attempts=1)
    w = world.start("w" if restart else "w0", planner=planner_of(1), cfg=cfg)
    world.run_until(lambda: bool(w.of(Gained, "s00")), within=4 * LEASE)
    w.kill()  # dies before its first commit
    last = world.start("w" if restart else "w1", planner=planner_of(1), cfg=cfg)
    world.run_until(lambda: last.counts["quarantined"] >= 1, within=4 * LEASE)
    record, _ = world.record("s00")
    assert record.status is Status.QUARANTINED
    assert record.reason.startswith("attempt 1: its owner went away without moving it forward")
