"""The leader's incremental placement index equals the reference model after every event.

:func:`spate_testing._placement_model.place` (the whole job placed from scratch, step by step)
is the oracle: random sequences of joins, departures, budget and
locality changes, splits added, completed, claimed (by their assignee or not), handed back and
expired are fed to a :class:`~spate._core.placement.index.PlacementIndex` and, after every event,
its answer must be exactly what the model answers for the same inputs (every leader
must reach the same placement, however it got there).
"""

from __future__ import annotations

import hypothesis.strategies as st
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spate._core.placement.index import PlacementIndex
from spate._core.placement.vocabulary import Placement, Worker
from spate_stores.memory import MemoryServer
from spate_testing._placement_model import place
from tests.common import config
from tests.runtime.harness import TTL, client, cooperative, planner_of, spawn

SEED = 1234
DEFAULT_CAP = 3
LOCALITIES = ("", "zone-a", "zone-a/r1", "zone-b", "zone-b/r2", "zone-c")
AFFINITIES = ("", "", "", "", "zone-a", "zone-b/r2")


class IndexAgainstBatch(RuleBasedStateMachine):
    """One leader's inputs, fed to the index event by event and to the model whole."""

    def __init__(self) -> None:
        super().__init__()
        self.workers: dict[str, Worker] = {}
        self.splits: dict[str, Placement] = {}
        self.next_split = 0
        self.departed: list[str] = ["gone-worker"]  # splits may still name them as owner
        self.index = PlacementIndex(default_cap=DEFAULT_CAP, seed=SEED, isolation_tier=0)
        self.last: dict[str, tuple[str, ...]] = {}
        self.rebalance = True
        self.held: frozenset[str] = frozenset()

    # -- helpers -------------------------------------------------------------------------------

    def _set(self, split: str, p: Placement | None) -> None:
        if p is None:
            self.splits.pop(split, None)
        else:
            self.splits[split] = p
        self.index.update(split, p)

    def _workers_changed(self) -> None:
        self.index.set_workers(self.workers)

    def _placed_on(self) -> dict[str, str]:
        return {s: m for m, held in self.index.assignment().items() for s in held}

    # -- events --------------------------------------------------------------------------------

    @initialize(
        workers=st.lists(
            st.tuples(st.integers(0, 5), st.sampled_from(LOCALITIES)), min_size=1, max_size=4
        ),
        localities=st.booleans(),
    )
    def start(self, workers: list[tuple[int, str]], localities: bool) -> None:
        for n, (cap, locality) in enumerate(workers):
            self.workers[f"w{n}"] = Worker(cap, locality if localities else "")
        self._workers_changed()

    @rule(cap=st.integers(0, 5), locality=st.sampled_from(LOCALITIES))
    def join(self, cap: int, locality: str) -> None:
        self.workers[f"w{len(self.workers) + 10}"] = Worker(cap, locality)
        self._workers_changed()

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        if len(self.workers) > 1:
            name = data.draw(st.sampled_from(sorted(self.workers)))
            del self.workers[name]
            self.departed.append(name)
            self._workers_changed()

    @rule(data=st.data(), cap=st.integers(0, 5), locality=st.sampled_from(LOCALITIES))
    def rejoin(self, data: st.DataObject, cap: int, locality: str) -> None:
        """A worker comes back under its old id, while splits still name it as owner."""
        returning = [m for m in self.departed if m not in self.workers]
        if returning:
            self.workers[data.draw(st.sampled_from(returning))] = Worker(cap, locality)
            self._workers_changed()

    @rule(data=st.data(), cap=st.integers(0, 5), locality=st.sampled_from(LOCALITIES))
    def reconfigure(self, data: st.DataObject, cap: int, locality: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.workers)))
        self.workers[name] = Worker(cap, locality)
        self._workers_changed()

    @rule(weight=st.integers(1, 4), affinity=st.sampled_from(AFFINITIES), count=st.integers(1, 4))
    def add_splits(self, weight: int, affinity: str, count: int) -> None:
        for _ in range(count):
            self.next_split += 1
            self._set(f"s{self.next_split:03d}", Placement(weight, None, affinity))

    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        if self.splits:
            self._set(data.draw(st.sampled_from(sorted(self.splits))), None)

    @rule(data=st.data())
    def claim_by_assignee(self, data: st.DataObject) -> None:
        placed = self._placed_on()
        if placed:
            split = data.draw(st.sampled_from(sorted(placed)))
            p = self.splits[split]
            self._set(split, Placement(p.weight, placed[split], p.locality))

    @rule(data=st.data())
    def claim_by_anyone(self, data: st.DataObject) -> None:
        if self.splits:
            split = data.draw(st.sampled_from(sorted(self.splits)))
            owner = data.draw(st.sampled_from(sorted(self.workers)))
            p = self.splits[split]
            self._set(split, Placement(p.weight, owner, p.locality))

    @rule(data=st.data(), dead=st.booleans())
    def release_or_expire(self, data: st.DataObject, dead: bool) -> None:
        if self.splits:
            split = data.draw(st.sampled_from(sorted(self.splits)))
            p = self.splits[split]
            self._set(split, Placement(p.weight, "gone-worker" if dead else None, p.locality))

    @rule(allowed=st.booleans())
    def allow_rebalance(self, allowed: bool) -> None:
        """The leader allows a rebalance (a membership change) or not (anything else)."""
        self.rebalance = allowed
        self.index.set_rebalance(allowed)

    @rule(data=st.data())
    def hold(self, data: st.DataObject) -> None:
        """The leader holds some splits still (moved for balance within a drain window)."""
        pool = [*sorted(self.splits), "never-seen"]
        self.held = frozenset(data.draw(st.sets(st.sampled_from(pool), max_size=4)))
        self.index.set_held(self.held)

    @rule()
    def every_move_lands(self) -> None:
        """Every assignee claims what it was given; queued splits are handed back."""
        placed = self._placed_on()
        for split, p in sorted(self.splits.items()):
            self._set(split, Placement(p.weight, placed.get(split), p.locality))

    # -- the oracle ----------------------------------------------------------------------------

    @invariant()
    def equals_the_reference_placement(self) -> None:
        if not self.workers:
            return
        expected = place(
            self.workers, self.splits, default_cap=DEFAULT_CAP, seed=SEED, isolation_tier=0,
            rebalance=self.rebalance, held=self.held,
        )  # fmt: skip
        assert self.index.assignment() == expected
        # The leader publishes only the workers the index names as changed: every worker
        # whose assignment differs from the last answer must be among them.
        changed = self.index.take_changed()
        if changed is not None:
            moved = {
                m
                for m in set(expected) | set(self.last)
                if expected.get(m, ()) != self.last.get(m, ())
            }
            assert moved <= changed | (set(self.last) - set(expected))
        self.last = expected


TestIndexAgainstBatch = IndexAgainstBatch.TestCase
TestIndexAgainstBatch.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_settled_fleet_is_solved_incrementally_and_a_no_op_changes_nothing() -> None:
    """The shortcut is taken (no affinity step), and a claim by the assignee publishes nothing."""
    workers = {f"w{n}": Worker(10, f"zone-{n % 3}") for n in range(6)}
    index = PlacementIndex(default_cap=4, seed=SEED, isolation_tier=0)
    index.set_workers(workers)
    splits = {f"s{n:02d}": Placement(1 + n % 3, None) for n in range(40)}
    for split, p in splits.items():
        index.update(split, p)
    assert index.take_changed() is None  # the first answer: compare everything
    placed = {s: m for m, held in index.assignment().items() for s in held}
    for split, p in splits.items():
        index.update(split, Placement(p.weight, placed[split]))  # every assignee claims
    assert index.take_changed() == set()
    index.update("s07", None)  # one split completes
    changed = index.take_changed()
    assert changed is not None
    assert placed["s07"] in changed
    rest = {s: Placement(p.weight, placed[s]) for s, p in splits.items() if s != "s07"}
    assert index.assignment() == place(workers, rest, default_cap=4, seed=SEED)
    assert index.affinity_solves == 0
    assert index.solves >= 2


def test_many_unowned_splits_added_at_once_are_placed_as_the_model_places_them() -> None:
    """A plan's fold adds unowned splits by the thousand, a claim or expiry one at a time:
    both ways of merging them into the sorted unowned list give the model's answer."""
    workers = {f"w{n}": Worker(6) for n in range(5)}
    index = PlacementIndex(default_cap=6, seed=SEED, isolation_tier=0)
    index.set_workers(workers)
    pool: dict[str, Placement] = {}

    def agree() -> None:
        assert index.assignment() == place(workers, pool, default_cap=6, seed=SEED)

    for n in range(300):  # one fold: far more than are inserted one by one
        pool[f"s{n:03d}"] = Placement(1 + (n * 7) % 4, None)
        index.update(f"s{n:03d}", pool[f"s{n:03d}"])
    agree()
    for n in (300, 301, 302):  # a few at a time: inserted in order
        pool[f"s{n:03d}"] = Placement(2, None)
        index.update(f"s{n:03d}", pool[f"s{n:03d}"])
    del pool["s005"]  # an unowned split completes while others wait to be merged
    index.update("s005", None)
    agree()
    for n in range(303, 450):
        pool[f"s{n:03d}"] = Placement(1 + n % 3, None)
        index.update(f"s{n:03d}", pool[f"s{n:03d}"])
    for gone in ("s010", "s449", "s302"):
        del pool[gone]
        index.update(gone, None)
    agree()


async def test_a_steady_fleet_places_nothing_on_reconcile_and_the_leader_agrees_with_place(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Once settled, renewals and reconcile listings re-place nothing and publish nothing;
    then a completion is placed incrementally, and the leader's answer is the model's."""
    server = MemoryServer()
    async with trio.open_nursery() as nursery:
        workers = [
            await spawn(
                nursery,
                client(server),
                f"w{i}",
                planner=planner_of(12),
                on_event=cooperative,
                # (Idle lanes here would have the leader ask the splits to split: rewrites of
                # assignment records of their own, tested in tests/worker/test_splitting.py.)
                cfg=config(split_requests=False),
            )
            for i in range(3)
        ]
        await workers[0].until(lambda: all(len(w.c.owned) == 4 for w in workers), within=3 * TTL)
        await trio.sleep(TTL)
        leader = next(w.c._machine._leader for w in workers if w.c.is_leader)
        index = leader.inputs.index
        assert index is not None
        mark = (index.solves, index.affinity_solves, [len(w.metrics.writes) for w in workers])
        await trio.sleep(6 * TTL)  # several reconcile intervals (5 s)
        assert (index.solves, index.affinity_solves) == mark[:2]
        writes = [
            op for w, m in zip(workers, mark[2], strict=True) for _, op, _ in w.metrics.writes[m:]
        ]
        assert "assign" not in writes
        host = leader.host
        pool = {
            s: p for s in host.view.splits if (p := leader.inputs.placement_input(s)) is not None
        }
        lanes = {i: Worker(p.max_in_flight if p else 0) for i, p in host.view.presence.items()}
        assert index.assignment() == place(
            lanes, pool, default_cap=host.config.max_in_flight, seed=host.tie_seed
        )
        nursery.cancel_scope.cancel()


@settings(max_examples=300, deadline=None)
@given(
    caps=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    zones=st.booleans(),
    owners=st.lists(st.tuples(st.integers(1, 4), st.integers(-1, 3)), max_size=16),
)
def test_owners_over_their_budget_are_placed_as_the_model_places_them_without_the_affinity_step(
    caps: list[int], zones: bool, owners: list[tuple[int, int]]
) -> None:
    """Owners holding more than their budget (a worker draining while its new splits are
    anchored on it): the sticky overflow is placed incrementally, equal to the model."""
    workers = {f"w{n}": Worker(cap, f"zone-{n % 2}" if zones else "") for n, cap in enumerate(caps)}
    names = sorted(workers)
    splits = {
        f"s{n:02d}": Placement(weight, names[owner] if 0 <= owner < len(names) else None)
        for n, (weight, owner) in enumerate(owners)
    }
    index = PlacementIndex(default_cap=DEFAULT_CAP, seed=SEED, isolation_tier=0)
    index.set_workers(workers)
    for split, p in splits.items():
        index.update(split, p)
    assert index.assignment() == place(workers, splits, default_cap=DEFAULT_CAP, seed=SEED)
    assert index.affinity_solves == 0
