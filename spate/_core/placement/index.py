"""The leader's placement: which live worker should run each split.

Sticky on the current owner, balanced by weight, bounded by each worker's lane budget, with
ties broken by a hash seeded from the job fingerprint so that every leader (and every
failover) reaches the same answer.

A worker's *locality* is a path of tiers, coarsest first (``"zone-a/rack-3/host-7"``; empty
means unknown). Its *domain* at isolation tier ``t`` is the first ``t + 1`` tiers (all of them
when it has fewer; an unknown locality is a domain of its own, ``""``). the placement spreads a
job across those domains before it balances workers:

1. **Sticky**: a split stays with its live owner while that owner is under its cap (heaviest
   first) and, when the split has an affinity, the owner matches it (or, after step 2, no
   matching worker had room).
2. **Affinity**: a split whose spec names a locality prefix (``"zone-b"``, whole tiers) goes to
   the least-loaded matching worker with a free lane; when every matching worker is full, one
   of them gives up a split that has no honoured affinity to make room. When all of them are
   full of honoured affinities, the affinity is ignored and the split is placed like any other:
   an affinity never leaves a split unplaced.
3. **Fill**: every other split, heaviest first, to the least-loaded domain with a free lane and
   in it to the least-loaded worker with one (ties by a hash of the name, seeded from the job).
4. **Spread**: repeatedly the single move of a split from one domain to the least-loaded domain
   with a free lane that most lowers the sum of squared domain weights, until none does. At the
   end no domain holds more than the least-loaded open domain plus the lightest split it could
   give away: the largest share of the job one domain holds is as small as the workers' lane
   budgets allow (exactly so for equal weights; within one split's weight otherwise), around
   the splits pinned by an honoured affinity.
5. **Balance**: the same improvement among the workers of each domain, within a band: a move
   is made only while some worker's load lies outside the domain's mean by ``max(10%, the
   lightest split's weight)`` (see :class:`~spate._core.placement.vocabulary.Band`).

Steps 4 and 5 run only when a *rebalance is allowed* (an input of the placement: the leader
allows one after a membership change, see :mod:`spate._core.leader.leadership`); otherwise the
placement is sticky, affinity and fill alone, and no running split moves for balance. Splits *held*
(another input: the leader holds a split it moved for balance within the last drain window)
stay where the sticky and fill steps put them: steps 4 and 5 move the others. Either way,
nothing is moved that the steps do not need to move, so the result is a fixpoint (a placement
fed back as the owners maps to itself), and a lost domain moves only its own splits. Every
tie is broken by a seeded hash, so every leader computes the same answer. Without a locality on
any worker there are no domains and no affinities: sticky, fill, then balance among all workers.

How the index gets there: it keeps the answer up to date one split at a time, at a cost
proportional to the change, never re-placing the whole job. A fresh index solved once is the
whole placement from scratch (:func:`solve_placement`). The property tests hold it equal,
after every change, to the reference model that places the whole job step by step
(``spate_testing._placement_model``).

- The first step (*sticky*) puts every split on its owner. When no affinity is unhonoured,
  that step keeps each owner's splits in a fixed order up to its lane budget, so its state is
  "each split on its owner" less the overflow of owners over their budget (a worker draining
  while new splits are anchored on it): a function of each split and its owner's splits alone.
  The index keeps "each split on its owner" (per-worker sets, loads, and the weight bins the
  improve passes search, with every split's hash computed once), updates it in O(log n) per
  changed split, and takes the overflow out on each solve.
- The later steps (*fill* the unowned splits heaviest first, then *spread* across domains and
  *balance* workers) run from that state on every solve, and are then undone. Their cost is
  the number of lanes they fill and moves they make: the splits in flight, not the job. A fleet
  at its fixpoint (every split on its assignee) makes none.
- A changed split whose owner, weight and affinity are unchanged (a renewal, a claim by the
  assignee of a split it was already anchored to, an owner that is no worker either way)
  changes nothing at all: no solve, nothing to publish.
- When an affinity is not honoured by its split's owner (or the split has no owner), or an
  honoured one is in an owner's overflow, the solve runs the affinity step too, from the same
  state: the affinity splits are taken off their owners, placed on matching workers (evicting
  a split without an honoured affinity when every match is full), and the rest carries on as
  above. Such a solve reports every worker as changed. A change of workers or of their
  budgets or localities rebuilds the state from the stored inputs (O(n), once per membership
  change).

The index is a facade over its parts, each in its own module, each given the sticky state
through its constructor: :class:`~spate._core.placement.state.StickyState` (each split on its
owner, per worker and per domain), :class:`~spate._core.placement.affinity.AffinityStep`,
:class:`~spate._core.placement.fill.CandidateHeaps` (the fill) and
:class:`~spate._core.placement.moves.ImprovingMoves` (the spread and the balance). The index
itself keeps the inputs' entry points, the order of one solve, and the change tracking.

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Collection, Iterable, Mapping

from spate._core.placement.affinity import AffinityStep
from spate._core.placement.fill import CandidateHeaps
from spate._core.placement.moves import ImprovingMoves
from spate._core.placement.state import StickyState
from spate._core.placement.vocabulary import MAX_IMPROVING_MOVES, Placement, Worker

__all__ = ["PlacementIndex", "solve_placement"]


def solve_placement(
    workers: Mapping[str, Worker],
    splits: Mapping[str, Placement],
    *,
    reserved: Collection[str] = (),
    default_cap: int,
    seed: int,
    isolation_tier: int = 0,
    rebalance: bool = True,
    held: Collection[str] = (),
) -> dict[str, tuple[str, ...]]:
    """The whole placement from scratch: worker -> sorted split ids (the rest is the queue).

    ``workers`` maps each live instance to its lane budget and locality; ``splits`` holds the
    assignable splits (runnable, spec seen; :attr:`Placement.locality` is the affinity);
    ``reserved`` splits are withheld; ``rebalance`` allows the spread and balance steps, which
    leave the ``held`` splits where they are.
    Deterministic in its arguments, and a fixpoint: a
    placement fed back as the owners maps to itself. A fresh :class:`PlacementIndex`, solved
    once: what the leader's index answers for the same inputs.
    """
    index = PlacementIndex(default_cap=default_cap, seed=seed, isolation_tier=isolation_tier)
    index.set_rebalance(rebalance)
    index.set_held(held)
    index.set_workers(workers)
    index.load({s: p for s, p in splits.items() if s not in reserved})
    return index.assignment()


class PlacementIndex:
    """The leader's placement of one job, kept up to date split by split (see the module text).

    Feed it :meth:`set_workers` and :meth:`update` (``None`` for a split out of the pool:
    completed, quarantined, spec unseen or withheld); read :meth:`solve`,
    :meth:`assignment_of` and :meth:`take_changed`.
    """

    def __init__(self, *, default_cap: int, seed: int, isolation_tier: int) -> None:
        self._state = StickyState(default_cap=default_cap, seed=seed, isolation_tier=isolation_tier)
        # Its parts, each on the sticky state: the affinity step, the fill, the moves.
        self._affinity = AffinityStep(self._state)
        self._heaps = CandidateHeaps(self._state)
        self._moves = ImprovingMoves(self._state)
        self.affinity_solves = 0
        """Solves that ran the affinity step (for tests and the benchmark)."""
        self.solves = 0
        """Solves without it."""
        self._moved_in: dict[str, set[str]] = {}
        self._moved_out: dict[str, set[str]] = {}
        self._result: dict[str, str | None] = {}  # split -> where it differs from its owner
        self._affine = False  # whether the last solve ran the affinity step
        self._dirty = True
        self._all_changed = True
        self._before: dict[str, str | None] = {}  # split -> its worker in the last answer
        self._changed: set[str] = set()
        self._totals: dict[str, tuple[int, int]] = {}
        self._rebalance = True
        self._held: frozenset[str] = frozenset()
        self._held_back = False

    # -- inputs ------------------------------------------------------------------------------

    def set_workers(self, workers: Mapping[str, Worker]) -> None:
        """The live workers with their budgets and localities.

        Workers joining are added to the state (with the splits that already name them as
        owner); any other change rebuilds it.
        """
        state = self._state
        if workers == state.workers:
            return
        joining = {m: w for m, w in workers.items() if m not in state.workers}
        kept = len(workers) - len(joining) == len(state.workers) and all(
            workers.get(m) == w for m, w in state.workers.items()
        )
        domains = any(w.locality for w in workers.values())
        if kept and domains == state.domains:
            state.join(joining)
        else:
            state.workers = dict(workers)
            state.rebuild()
        self._dirty = self._all_changed = True

    def set_rebalance(self, allowed: bool) -> None:
        """Whether the spread and balance steps may move splits (running ones among them).

        A change re-solves: the splits those steps moved (or would now move) are the ones the
        answer changes, and the change tracking compares them as it compares any other.
        """
        if allowed != self._rebalance:
            self._rebalance = allowed
            self._dirty = True

    def set_held(self, splits: Collection[str]) -> None:
        """The splits the spread and balance steps must not move (see the module text).

        The leader holds a split it moved for balance until a drain window has passed, so no
        split is asked to drain twice in one; the other splits still serve a new worker.
        """
        held = frozenset(splits)
        if held != self._held:
            self._held = held
            self._dirty = True

    def held_back(self) -> bool:
        """Whether the held splits kept the last answer from a move it would have made."""
        self.solve()
        return self._held_back

    def moves_running(self) -> set[str]:
        """The splits with a live owner that the answer places on another worker."""
        self.solve()
        return {
            split
            for split, target in self._result.items()
            if target is not None and self._state.where(split) is not None
        }

    def update(self, split: str, placement: Placement | None) -> None:
        """A split's placement input changed (``None``: it left the pool)."""
        state = self._state
        old = state.inputs.get(split)
        if placement is None:
            if old is None:
                return
            self._remember(split)
            state.remove(split, old)
            del state.inputs[split]
            self._dirty = True
            return
        if old is not None:
            if old == placement:
                return
            same = (
                old.weight == placement.weight
                and old.load == placement.load
                and old.locality == placement.locality
                and state.owner(old) == state.owner(placement)
            )
            if same:
                # An owner that is no live worker either way; the split may name another one now.
                if old.owner != placement.owner:
                    state.renamed_orphan(old.owner, placement.owner, split)
                state.inputs[split] = placement
                return
            self._remember(split)
            state.remove(split, old)
        else:
            self._remember(split)
        state.inputs[split] = placement
        state.add(split, placement)
        self._dirty = True

    def load(self, splits: Mapping[str, Placement]) -> None:
        """Every split of the pool at once, into an index that holds none yet.

        What :meth:`update` of each would do, at the cost of one sort, not an insort each.
        """
        assert not self._state.inputs, "load() fills a fresh index"
        self._state.inputs = dict(splits)
        self._state.rebuild()
        self._dirty = self._all_changed = True

    def pool(self) -> dict[str, Placement]:
        """The splits placed (a copy: O(n), for checks and the debounce path)."""
        return dict(self._state.inputs)

    def has_unowned(self) -> bool:
        """Whether some split in the pool has no live owner."""
        return self._state.has_unowned()

    # -- answers -----------------------------------------------------------------------------

    def solve(self) -> None:
        """Bring the answer up to date with every input fed so far."""
        if not self._dirty:
            return
        self._dirty = False
        old_result, old_affine = self._result, self._affine
        if not self._state.workers:
            self._result, self._affine = {}, False
        else:
            self._result, self._affine = self._improve()
            if self._affine:
                self.affinity_solves += 1
            else:
                self.solves += 1
        if self._all_changed or old_affine or self._affine:
            # (A solve with the affinity step moves splits far from what changed: compare all.)
            self._all_changed = True
        else:
            where = self._state.where
            for split in set(self._before) | set(old_result) | set(self._result):
                before = self._before.get(split, old_result.get(split, where(split)))
                now = self._result.get(split, where(split))
                if before != now:
                    if before is not None:
                        self._changed.add(before)
                    if now is not None:
                        self._changed.add(now)
        self._before.clear()

    def take_changed(self) -> set[str] | None:
        """Workers whose assignment changed since the last call (``None``: maybe all)."""
        self.solve()
        if self._all_changed:
            self._all_changed = False
            self._changed.clear()
            return None
        changed, self._changed = self._changed, set()
        return changed

    def assignment_of(self, worker: str) -> tuple[str, ...]:
        """The sorted splits placed on ``worker`` (empty for an instance that is no live worker)."""
        self.solve()
        if worker not in self._state.workers:
            return ()
        owned = self._state.sorted[worker]
        out = self._moved_out.get(worker)
        moved_in = self._moved_in.get(worker)
        if not out and not moved_in:
            return tuple(owned)
        held = list(owned)
        for split in out or ():
            held.pop(bisect.bisect_left(held, split))
        for split in sorted(moved_in or ()):
            bisect.insort(held, split)
        return tuple(held)

    def moves(self) -> dict[str, str]:
        """The splits the answer places on a worker other than their owner: split -> worker."""
        self.solve()
        return {s: m for s, m in self._result.items() if m is not None}

    def assignment(self) -> dict[str, tuple[str, ...]]:
        """Every worker's sorted splits (the whole placement)."""
        self.solve()
        return {m: self.assignment_of(m) for m in sorted(self._state.workers)}

    def totals(self) -> dict[str, tuple[int, int]]:
        """Per worker, the (split count, weight) placed on it."""
        self.solve()
        return dict(self._totals)

    # -- fill and improve, from the sticky state, undone afterwards ------------------------

    def _remember(self, split: str) -> None:
        if split not in self._before:
            self._before[split] = self._result.get(split, self._state.where(split))

    def _improve(self) -> tuple[dict[str, str | None], bool]:
        """The answer, as the splits placed elsewhere than the sticky state.

        Values are workers (``None``: queued). Also whether the affinity step ran.
        """
        state = self._state
        matching: dict[str, list[str]] = {}
        loose = self._affinity.loose(matching)
        extra, over_pinned = state.overflow({s for _, s in loose})
        affine = bool(state.affine_loose) or bool(over_pinned)
        load = dict(state.load)
        count = {m: len(state.owned[m]) for m in state.names}
        final: dict[str, str] = {}
        origin: dict[str, str | None] = {}
        pinned_now: set[str] = set()  # placed by the affinity step: out of the bins
        for negative, split in extra:
            state.take_off(split, -negative, load, count, origin, in_bins=True)
        unowned = state.unowned_sorted()
        queue: Iterable[tuple[int, str]]
        if not loose and not over_pinned:
            queue = heapq.merge(unowned, extra) if extra else unowned
        else:
            general = self._affinity.place(
                over_pinned, loose, matching, load, count, final, origin, pinned_now
            )
            general += extra
            general += (e for e in unowned if e[1] not in origin)
            general.sort()
            queue = general
        for negative, split in self._heaps.fill(queue, load, count, final):
            origin.setdefault(split, None)
            state.bins_add(final[split], -negative, split)
        held = (
            self._moves.hold(self._held, final, origin, pinned_now)
            if self._rebalance and self._held
            else []
        )
        if self._rebalance:  # else no spread, no balance: sticky, affinity and fill alone
            self._moves.run(load, count, final, origin, MAX_IMPROVING_MOVES)
        for worker, weight, split in held:
            state.bins_add(worker, weight, split)
        self._held_back = bool(held) and self._moves.improvable(load, count)
        # Undo: the bins go back to the sticky state.
        for split, was in origin.items():
            w = state.inputs[split].load
            now = final.get(split)
            if now is not None and split not in pinned_now:
                state.bins_remove(now, w, split)
            if was is not None and split not in state.pinned:
                state.bins_add(was, w, split)
        result = {s: final.get(s) for s, was in origin.items() if final.get(s) != was}
        self._moved_in, self._moved_out = {}, {}
        for split, target in result.items():
            if target is not None:
                self._moved_in.setdefault(target, set()).add(split)
            was = origin[split]
            if was is not None:
                self._moved_out.setdefault(was, set()).add(split)
        self._totals = {m: (count[m], load[m]) for m in state.names}
        return result, affine
