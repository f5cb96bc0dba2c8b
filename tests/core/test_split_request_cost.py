"""What the leader's split requests cost per step: idle lanes are not counted on every event."""

from __future__ import annotations

from typing import Any

import attrs

from spate import Config
from spate._core.records import AssignmentRecord, PresenceRecord, ProgressRecord, Status
from spate._core.split_requests import POLL, SplitRequests

MEMBERS, LANES = 50, 4


class _CountingAssignments(dict[str, tuple[AssignmentRecord, int]]):
    """The view's assignment records, counting each member's lookup."""

    lookups = 0

    def get(self, key: str, default: Any = None) -> Any:
        type(self).lookups += 1
        return super().get(key, default)


@attrs.define
class _State:
    progress: ProgressRecord


@attrs.define
class _Tallies:
    runnable: int


@attrs.define
class _View:
    presence: dict[str, PresenceRecord | None]
    assignments: _CountingAssignments
    splits: dict[str, _State]
    tallies: _Tallies
    seq: int = 0


@attrs.define
class _Host:
    view: _View
    config: Config


def _fleet() -> _Host:
    # Every lane of every member is assigned a runnable split: exactly as many runnable splits
    # as lanes, the case in which lanes must be counted (neither side outnumbers the other).
    presence: dict[str, PresenceRecord | None] = {}
    assignments = _CountingAssignments()
    splits: dict[str, _State] = {}
    for m in range(MEMBERS):
        member = f"w{m:02d}"
        presence[member] = PresenceRecord(nonce=f"n{m}", max_in_flight=LANES)
        held = tuple(f"s{m:02d}-{n}" for n in range(LANES))
        assignments[member] = (AssignmentRecord(generation=1, splits=held), 1)
        for split in held:
            splits[split] = _State(ProgressRecord(id=split, status=Status.RUNNABLE))
    view = _View(presence, assignments, splits, _Tallies(runnable=len(splits)))
    return _Host(view, Config())


def test_idle_lanes_are_counted_at_most_once_per_poll_while_the_view_moves() -> None:
    host = _fleet()
    requests = SplitRequests(host, reads=None)  # type: ignore[arg-type]
    _CountingAssignments.lookups = 0
    requests.step(0.0)
    assert _CountingAssignments.lookups == MEMBERS  # one count: every member's record
    # Every event moves the view; a leader steps on each. Within a poll none counts again...
    for n in range(1, 40):
        host.view.seq += 1
        requests.step(n * POLL / 40)
    assert _CountingAssignments.lookups == MEMBERS
    # ...but the view moved, so the leader is woken to count again when the poll is up.
    assert requests.next_deadline() == POLL
    host.view.seq += 1
    requests.step(POLL)
    assert _CountingAssignments.lookups == 2 * MEMBERS


def test_running_tenancies_are_looked_over_at_most_once_per_poll() -> None:
    # Lanes sit idle (the fleet's lanes outnumber its runnable splits) and every look finds
    # none to ask; looking means going over every running tenancy, so it is not done on each
    # of the events a leader steps on, only once a poll.
    host = _fleet()
    # One member runs one split; every other lane sits idle.
    kept = host.view.assignments["w00"]
    host.view.assignments.clear()
    host.view.assignments["w00"] = (attrs.evolve(kept[0], splits=kept[0].splits[:1]), 1)
    host.view.tallies.runnable = 1
    host.config = Config(split_request_delay=0.0)
    requests = SplitRequests(host, reads=None)  # type: ignore[arg-type]
    looks: list[float] = []
    real = requests._candidates

    def counted(now: float, want: int) -> list[str]:
        looks.append(now)
        return real(now, want)

    requests._candidates = counted  # type: ignore[method-assign]
    for n in range(40):
        host.view.seq += 1
        requests.step(n * POLL / 20)  # two polls' worth of steps
    assert looks == [0.0, POLL]
