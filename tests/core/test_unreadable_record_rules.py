"""Unreadable records, machine by machine: one split's bad record costs that split only."""

from __future__ import annotations

import pytest

from spate import Fenced, Progress, Stalled
from spate.store import Keyspace, Won

from .world import KEYS, LEASE, World, planner_of

DURABLE = Keyspace.DURABLE


def test_garbage_over_a_held_split_s_record_fences_its_holder_and_costs_only_that_split() -> None:
    world = World()
    workers = [world.start(name, planner=planner_of(4)) for name in ("a", "b")]
    world.run_until(
        lambda: sum(len(w.owned) for w in workers) == 4 and all(w.owned for w in workers)
    )
    holder = next(w for w in workers if "s01" in w.owned)
    _, revision = world.record("s01")
    garbage = world.write("update", DURABLE, KEYS.split("s01"), b"\x00garbage", revision)
    assert isinstance(garbage, Won)
    # The holder's next commit loses its compare-and-swap and finds a record it cannot read:
    # it loses the split (no write lands over the bytes), and keeps running.
    with pytest.raises(Fenced):
        world.wait(holder.commit("s01", Progress(1, completed=True)))
    assert "s01" not in holder.owned
    for worker in workers:
        for split in sorted(worker.owned):
            world.wait(worker.commit(split, Progress(1, completed=True)))
    world.run_until(lambda: all(w.of(Stalled) for w in workers), within=3 * LEASE)
    for worker in workers:
        assert worker.of(Stalled) == [Stalled(completed=3, quarantined=1)]
        assert worker.error is None
    # Nobody wrote over it, and nobody claimed it since.
    entry = world.get(DURABLE, KEYS.split("s01"))
    assert entry is not None
    assert (entry.value, entry.revision) == (b"\x00garbage", garbage.revision)
