"""The opening every owner's write of a split's record shares (a commit, a split).

The write holds the record's key first; a split not held here is refused before that, and a
split lost while the write waited for its key is refused after, each with nothing written.
"""

from __future__ import annotations

import pytest

from spate import Fenced, Progress
from spate.store import Keyspace

from .world import KEYS, LEASE, World, planner_of


def test_a_commit_or_split_of_a_split_not_held_here_writes_nothing() -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"}, within=LEASE)
    mark = len(a.writes)
    for call in (a.commit("s09", Progress(1)), a.split("s09", b"p", b"r")):
        with pytest.raises(Fenced, match="does not hold it; nothing was written"):
            world.wait(call)
    assert a.writes[mark:] == []


@pytest.mark.parametrize("what", ["commit", "split"])
def test_a_split_lost_while_its_write_waited_for_the_key_writes_nothing(what: str) -> None:
    world = World()
    a = world.start("a", planner=planner_of(1))
    world.run_until(lambda: a.owned == {"s00"}, within=LEASE)
    first = a.hold_next("update", Keyspace.DURABLE, KEYS.split("s00"))
    busy = a.commit("s00", Progress(1))  # holds the key until its write is let go
    world.run_until(lambda: first.arrived, within=LEASE)
    waiting = a.commit("s00", Progress(2)) if what == "commit" else a.split("s00", b"p", b"r")
    world.settle()
    a.drop_silently("s00")
    first.release()
    with pytest.raises(Fenced, match=f"lost before the {what} could be written"):
        world.wait(waiting)
    assert busy.done
