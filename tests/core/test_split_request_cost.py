"""What the leader's split requests cost per step: idle lanes are not counted on every event."""

from __future__ import annotations

from typing import Any

import attrs

from spate import Config
from spate._core.leader.split_requests import POLL, POLL_BATCH, SplitRequests, _Ask
from spate._core.records import AssignmentRecord, PresenceRecord, ProgressRecord, Status

WORKERS, LANES = 80, 4  # more workers than POLL_BATCH: a fleet whose counts are throttled


class _CountingAssignments(dict[str, tuple[AssignmentRecord, int]]):
    """The view's assignment records, counting each worker's lookup."""

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
    # Every lane of every worker is assigned a runnable split: exactly as many runnable splits
    # as lanes, the case in which lanes must be counted (neither side outnumbers the other).
    presence: dict[str, PresenceRecord | None] = {}
    assignments = _CountingAssignments()
    splits: dict[str, _State] = {}
    for m in range(WORKERS):
        worker = f"w{m:02d}"
        presence[worker] = PresenceRecord(nonce=f"n{m}", max_in_flight=LANES)
        held = tuple(f"s{m:02d}-{n}" for n in range(LANES))
        assignments[worker] = (AssignmentRecord(generation=1, splits=held), 1)
        for split in held:
            splits[split] = _State(ProgressRecord(id=split, status=Status.RUNNABLE))
    view = _View(presence, assignments, splits, _Tallies(runnable=len(splits)))
    return _Host(view, Config())


def test_idle_lanes_are_counted_at_most_once_per_poll_while_the_view_moves() -> None:
    host = _fleet()
    requests = SplitRequests(host, reads=None)  # type: ignore[arg-type]
    _CountingAssignments.lookups = 0
    requests.step(0.0)
    assert _CountingAssignments.lookups == WORKERS  # one count: every worker's record
    # Every event moves the view; a leader steps on each. Within a poll none counts again...
    for n in range(1, 40):
        host.view.seq += 1
        requests.step(n * POLL / 40)
    assert _CountingAssignments.lookups == WORKERS
    # ...but the view moved, so the leader is woken to count again when the poll is up.
    assert requests.next_deadline() == POLL
    host.view.seq += 1
    requests.step(POLL)
    assert _CountingAssignments.lookups == 2 * WORKERS


def test_running_tenancies_are_looked_over_at_most_once_per_poll_when_many_run() -> None:
    # Lanes sit idle (the fleet's lanes outnumber its runnable splits) and every look finds
    # none to ask; looking means going over every running tenancy, so with more than a batch
    # of them it is not done on each of the events a leader steps on, only once a poll.
    host = _fleet()
    # One worker runs one split; every other lane sits idle.
    kept = host.view.assignments["w00"]
    host.view.assignments.clear()
    host.view.assignments["w00"] = (attrs.evolve(kept[0], splits=kept[0].splits[:1]), 1)
    host.view.tallies.runnable = 1
    host.config = Config(split_request_delay=0.0)
    requests = SplitRequests(host, reads=None)  # type: ignore[arg-type]
    for n in range(POLL_BATCH + 1):
        requests.began(f"running-{n}", 0.0)  # (tenancies this stub's view cannot ask)
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


def test_the_leader_reads_at_most_a_batch_of_standing_requests_a_poll() -> None:
    host = _fleet()
    host.view.tallies.runnable = len(host.view.splits) + 1  # no lane idle: no new asks

    class _Reads:
        noted: list[str] = []

        def note(self, split: str) -> None:
            self.noted.append(split)

    reads = _Reads()
    requests = SplitRequests(host, reads=reads)  # type: ignore[arg-type]
    standing = sorted(host.view.splits)  # 200 requests, all asked at t=0
    for seq, split in enumerate(standing):
        requests._add(split, _Ask(owner="w00", seq=seq, at=0.0, splits=0, polled=0.0))
    requests._due = 0.0
    now = 0.0
    while now < 5.0:  # within drain_deadline (10 s): every request still stands
        host.view.seq += 1
        requests.step(now)
        now += POLL / 10
    polls = 5.0 / POLL
    assert len(reads.noted) <= POLL_BATCH * (polls + 1)
    assert len(requests.outstanding) == len(standing)
    # Each is still read now and then (every POLL x 200 / 64 s, here about every 1.6 s).
    assert set(reads.noted) == set(standing)
