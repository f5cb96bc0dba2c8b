"""The leader's placement: which live worker should run each split.

Sticky on the current owner, balanced by weight, bounded by each member's lane budget, with
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
   lightest split's weight)`` (see :class:`~spate._core.placement.Band`).

Steps 4 and 5 run only when a *rebalance is allowed* (an input of the placement: the leader
allows one after a membership change, see :mod:`spate._core.leader`); otherwise the placement
is sticky, affinity and fill alone, and no running split moves for balance. Splits *held*
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
  The index keeps "each split on its owner" (per-member sets, loads, and the weight bins the
  improve passes search, with every split's hash computed once), updates it in O(log n) per
  changed split, and takes the overflow out on each solve.
- The later steps (*fill* the unowned splits heaviest first, then *spread* across domains and
  *balance* workers) run from that state on every solve, and are then undone. Their cost is
  the number of lanes they fill and moves they make: the splits in flight, not the job. A fleet
  at its fixpoint (every split on its assignee) makes none.
- A changed split whose owner, weight and affinity are unchanged (a renewal, a claim by the
  assignee of a split it was already anchored to, an owner that is no member either way)
  changes nothing at all: no solve, nothing to publish.
- When an affinity is not honoured by its split's owner (or the split has no owner), or an
  honoured one is in an owner's overflow, the solve runs the affinity step too, from the same
  state: the affinity splits are taken off their owners, placed on matching workers (evicting
  a split without an honoured affinity when every match is full), and the rest carries on as
  above. Such a solve reports every member as changed. A change of members or of their
  budgets or localities rebuilds the state from the stored inputs (O(n), once per membership
  change).

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Collection, Iterable, Mapping, Set

from spate._core.placement import (
    MAX_IMPROVING_MOVES,
    Band,
    Member,
    Placement,
    WeightBins,
    affinity_matches,
    best_transfer,
    domain_of,
    merge_sorted,
)
from spate._core.protocol import stable_hash_str

__all__ = ["PlacementIndex", "solve_placement"]


def solve_placement(
    members: Mapping[str, Member],
    splits: Mapping[str, Placement],
    *,
    reserved: Collection[str] = (),
    default_cap: int,
    seed: int,
    isolation_tier: int = 0,
    rebalance: bool = True,
    held: Collection[str] = (),
) -> dict[str, tuple[str, ...]]:
    """The whole placement from scratch: member -> sorted split ids (the rest is the queue).

    ``members`` maps each live instance to its lane budget and locality; ``splits`` holds the
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
    index.set_members(members)
    index.load({s: p for s, p in splits.items() if s not in reserved})
    return index.assignment()


class PlacementIndex:
    """The leader's placement of one job, kept up to date split by split (see the module text).

    Feed it :meth:`set_members` and :meth:`update` (``None`` for a split out of the pool:
    completed, quarantined, spec unseen or withheld); read :meth:`solve`,
    :meth:`assignment_of` and :meth:`take_changed`.
    """

    def __init__(self, *, default_cap: int, seed: int, isolation_tier: int) -> None:
        self._default_cap = default_cap
        self._seed = seed
        self._tier = isolation_tier
        self._members: dict[str, Member] = {}
        self._inputs: dict[str, Placement] = {}
        self._hash: dict[str, int] = {}
        self.affinity_solves = 0
        """Solves that ran the affinity step (for tests and the benchmark)."""
        self.solves = 0
        """Solves without it."""
        self._rebuild()
        self._result: dict[str, str | None] = {}  # split -> where it differs from its owner
        self._affine = False  # whether the last solve ran the affinity step
        self._dirty = True
        self._all_changed = True
        self._before: dict[str, str | None] = {}  # split -> its member in the last answer
        self._changed: set[str] = set()
        self._totals: dict[str, tuple[int, int]] = {}
        self._rebalance = True
        self._held: frozenset[str] = frozenset()
        self._held_back = False

    # -- inputs ------------------------------------------------------------------------------

    def set_members(self, members: Mapping[str, Member]) -> None:
        """The live workers with their budgets and localities.

        Workers joining are added to the state (with the splits that already name them as
        owner); any other change rebuilds it.
        """
        if members == self._members:
            return
        joining = {m: w for m, w in members.items() if m not in self._members}
        kept = len(members) - len(joining) == len(self._members) and all(
            members.get(m) == w for m, w in self._members.items()
        )
        domains = any(w.locality for w in members.values())
        if kept and domains == self._domains:
            self._join(joining)
        else:
            self._members = dict(members)
            self._rebuild()
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
        split is asked to drain twice in one; the other splits still serve a new member.
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
        """The splits with a live owner that the answer places on another member."""
        self.solve()
        return {
            split
            for split, target in self._result.items()
            if target is not None and self._where(split) is not None
        }

    def update(self, split: str, placement: Placement | None) -> None:
        """A split's placement input changed (``None``: it left the pool)."""
        old = self._inputs.get(split)
        if placement is None:
            if old is None:
                return
            self._remember(split)
            self._unstate(split, old)
            del self._inputs[split]
            self._dirty = True
            return
        if old is not None:
            if old == placement:
                return
            same = (
                old.weight == placement.weight
                and old.load == placement.load
                and old.locality == placement.locality
                and self._owner(old) == self._owner(placement)
            )
            if same:
                # An owner that is no member either way; the split may name another one now.
                if old.owner != placement.owner:
                    self._orphan_drop(old.owner, split)
                    self._orphan_add(placement.owner, split)
                self._inputs[split] = placement
                return
            self._remember(split)
            self._unstate(split, old)
        else:
            self._remember(split)
        self._inputs[split] = placement
        self._state(split, placement)
        self._dirty = True

    def load(self, splits: Mapping[str, Placement]) -> None:
        """Every split of the pool at once, into an index that holds none yet.

        What :meth:`update` of each would do, at the cost of one sort, not an insort each.
        """
        assert not self._inputs, "load() fills a fresh index"
        self._inputs = dict(splits)
        self._rebuild()
        self._dirty = self._all_changed = True

    def pool(self) -> dict[str, Placement]:
        """The splits placed (a copy: O(n), for checks and the debounce path)."""
        return dict(self._inputs)

    def has_unowned(self) -> bool:
        """Whether some split in the pool has no live owner."""
        return bool(self._unowned or self._unowned_new)

    # -- answers -----------------------------------------------------------------------------

    def solve(self) -> None:
        """Bring the answer up to date with every input fed so far."""
        if not self._dirty:
            return
        self._dirty = False
        old_result, old_affine = self._result, self._affine
        if not self._members:
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
            for split in set(self._before) | set(old_result) | set(self._result):
                before = self._before.get(split, old_result.get(split, self._where(split)))
                now = self._result.get(split, self._where(split))
                if before != now:
                    if before is not None:
                        self._changed.add(before)
                    if now is not None:
                        self._changed.add(now)
        self._before.clear()

    def take_changed(self) -> set[str] | None:
        """Members whose assignment changed since the last call (``None``: maybe all)."""
        self.solve()
        if self._all_changed:
            self._all_changed = False
            self._changed.clear()
            return None
        changed, self._changed = self._changed, set()
        return changed

    def assignment_of(self, member: str) -> tuple[str, ...]:
        """The sorted splits placed on ``member`` (empty for a non-member)."""
        self.solve()
        if member not in self._members:
            return ()
        owned = self._sorted[member]
        out = self._moved_out.get(member)
        moved_in = self._moved_in.get(member)
        if not out and not moved_in:
            return tuple(owned)
        held = list(owned)
        for split in out or ():
            held.pop(bisect.bisect_left(held, split))
        for split in sorted(moved_in or ()):
            bisect.insort(held, split)
        return tuple(held)

    def moves(self) -> dict[str, str]:
        """The splits the answer places on a member other than their owner: split -> member."""
        self.solve()
        return {s: m for s, m in self._result.items() if m is not None}

    def assignment(self) -> dict[str, tuple[str, ...]]:
        """Every member's sorted splits (the whole placement)."""
        self.solve()
        return {m: self.assignment_of(m) for m in sorted(self._members)}

    def totals(self) -> dict[str, tuple[int, int]]:
        """Per member, the (split count, weight) placed on it."""
        self.solve()
        return dict(self._totals)

    # -- the sticky state --------------------------------------------------------------------

    def _rebuild(self) -> None:
        members = self._members
        self._names = sorted(members)
        self._cap = {
            m: max(1, members[m].cap if members[m].cap > 0 else self._default_cap)
            for m in self._names
        }
        self._domains = any(m.locality for m in members.values())
        self._domain = {
            m: domain_of(members[m].locality, self._tier) if self._domains else ""
            for m in self._names
        }
        self._member_hash = {m: stable_hash_str(self._seed, m) for m in self._names}
        self._owned: dict[str, set[str]] = {m: set() for m in self._names}
        self._sorted: dict[str, list[str]] = {m: [] for m in self._names}
        self._domain_hash = {d: stable_hash_str(self._seed, d) for d in set(self._domain.values())}
        self._load = dict.fromkeys(self._names, 0)
        self._bins = {m: WeightBins([]) for m in self._names}
        self._domain_bins = {d: WeightBins([]) for d in set(self._domain.values())}
        self._unowned: list[tuple[int, str]] = []  # sorted (-weight, split)
        self._unowned_new: list[tuple[int, str]] = []  # not yet in _unowned, see _unowned_sorted
        self._pinned: set[str] = set()
        self._affine_loose: set[str] = set()
        self._moved_in: dict[str, set[str]] = {}
        self._moved_out: dict[str, set[str]] = {}
        self._orphans: dict[str, set[str]] = {}  # a non-member owner -> the splits naming it
        # Bulk load: one sort of the unowned splits, not an insort per split.
        unowned = []
        for split, p in self._inputs.items():
            if self._state(split, p, bulk=True):
                unowned.append((-p.load, split))
        unowned.sort()
        self._unowned = unowned
        self._sorted = {m: sorted(self._owned[m]) for m in self._names}

    def _unowned_sorted(self) -> list[tuple[int, str]]:
        """The unowned splits, sorted, with those added since the last read merged in.

        A fold of a plan adds tens of thousands of unowned splits before the next read; a
        single change adds one or two (see merge_sorted).
        """
        if self._unowned_new:
            merge_sorted(self._unowned, self._unowned_new)
            self._unowned_new = []
        return self._unowned

    def _join(self, joining: Mapping[str, Member]) -> None:
        """Add members to the state (a join costs what it changes, not a rebuild).

        Only when no other member changed and whether localities are honoured stays as it
        was: then the splits of the other members keep their state, and the splits naming
        a joining worker as owner (a worker back under its old id) move from unowned to it.
        """
        adopted = [
            (split, self._inputs[split]) for m in joining for split in self._orphans.pop(m, ())
        ]
        for split, p in adopted:
            self._unstate(split, p)  # still unowned: its owner is no member yet
        for m, member in joining.items():
            self._members[m] = member
            bisect.insort(self._names, m)
            self._cap[m] = max(1, member.cap if member.cap > 0 else self._default_cap)
            domain = domain_of(member.locality, self._tier) if self._domains else ""
            self._domain[m] = domain
            if domain not in self._domain_hash:
                self._domain_hash[domain] = stable_hash_str(self._seed, domain)
                self._domain_bins[domain] = WeightBins([])
            self._member_hash[m] = stable_hash_str(self._seed, m)
            self._owned[m] = set()
            self._sorted[m] = []
            self._load[m] = 0
            self._bins[m] = WeightBins([])
        for split, p in adopted:
            self._state(split, p)

    def _orphan_add(self, owner: str | None, split: str) -> None:
        if owner is not None:
            self._orphans.setdefault(owner, set()).add(split)

    def _orphan_drop(self, owner: str | None, split: str) -> None:
        if owner is None:
            return
        orphans = self._orphans.get(owner)
        if orphans is not None:
            orphans.discard(split)
            if not orphans:
                del self._orphans[owner]

    def _owner(self, p: Placement) -> str | None:
        return p.owner if p.owner is not None and p.owner in self._members else None

    def _where(self, split: str) -> str | None:
        p = self._inputs.get(split)
        return None if p is None else self._owner(p)

    def _remember(self, split: str) -> None:
        if split not in self._before:
            self._before[split] = self._result.get(split, self._where(split))

    def _key(self, split: str) -> tuple[int, str]:
        h = self._hash.get(split)
        if h is None:
            h = self._hash[split] = stable_hash_str(self._seed, split)
        return (h, split)

    def _state(self, split: str, p: Placement, *, bulk: bool = False) -> bool:
        """Add ``split`` to the sticky state; True when it is unowned (and bulk)."""
        weight = p.load
        owner = self._owner(p)
        honoured = bool(p.locality) and self._domains
        if honoured and (
            owner is None or not affinity_matches(p.locality, self._members[owner].locality)
        ):
            self._affine_loose.add(split)
        if owner is None:
            self._orphan_add(p.owner, split)
            if bulk:
                return True
            self._unowned_new.append((-weight, split))
            return False
        self._owned[owner].add(split)
        if not bulk:
            bisect.insort(self._sorted[owner], split)
        self._load[owner] += weight
        if honoured and split not in self._affine_loose:
            self._pinned.add(split)
        else:
            self._bins_add(owner, weight, split)
        return False

    def _unstate(self, split: str, p: Placement) -> None:
        weight = p.load
        self._affine_loose.discard(split)
        owner = self._owner(p)
        if owner is None:
            self._orphan_drop(p.owner, split)
            unowned = self._unowned_sorted()
            unowned.pop(bisect.bisect_left(unowned, (-weight, split)))
            return
        self._owned[owner].discard(split)
        held = self._sorted[owner]
        held.pop(bisect.bisect_left(held, split))
        self._load[owner] -= weight
        if split in self._pinned:
            self._pinned.discard(split)
        else:
            self._bins_remove(owner, weight, split)

    def _overflow(
        self, off: Collection[str]
    ) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """Splits the sticky step leaves unplaced because their owner is over its budget.

        The sticky step keeps an owner's splits in its order (honoured affinities first, then
        heaviest, then by id) until the budget is reached: the rest join the unowned splits
        in the fill, or the affinity step when their affinity is honoured. Splits in ``off``
        (affinities their owner does not honour) do not count. Returns the two, each sorted
        by (-weight, id): (unpinned, pinned).
        """
        extra: list[tuple[int, str]] = []
        pinned: list[tuple[int, str]] = []
        for m in self._names:
            owned = self._owned[m]
            if len(owned) <= self._cap[m]:
                continue
            kept = [s for s in owned if s not in off] if off else owned
            if len(kept) <= self._cap[m]:
                continue
            order = sorted(
                kept,
                key=lambda s: (s not in self._pinned, -self._inputs[s].load, s),
            )
            for split in order[self._cap[m] :]:
                entry = (-self._inputs[split].load, split)
                (pinned if split in self._pinned else extra).append(entry)
        extra.sort()
        pinned.sort()
        return extra, pinned

    # -- fill and improve, from the sticky state, undone afterwards ------------------------

    def _improve(self) -> tuple[dict[str, str | None], bool]:
        """The answer, as the splits placed elsewhere than the sticky state.

        Values are members (``None``: queued). Also whether the affinity step ran.
        """
        matching: dict[str, list[str]] = {}
        loose = self._loose_affinities(matching)
        extra, over_pinned = self._overflow({s for _, s in loose})
        affine = bool(self._affine_loose) or bool(over_pinned)
        load = dict(self._load)
        count = {m: len(self._owned[m]) for m in self._names}
        final: dict[str, str] = {}
        origin: dict[str, str | None] = {}
        pinned_now: set[str] = set()  # placed by the affinity step: out of the bins
        for negative, split in extra:
            self._take_off(split, -negative, load, count, origin, in_bins=True)
        unowned = self._unowned_sorted()
        queue: Iterable[tuple[int, str]]
        if not loose and not over_pinned:
            queue = heapq.merge(unowned, extra) if extra else unowned
        else:
            general = self._affinity_step(
                over_pinned, loose, matching, load, count, final, origin, pinned_now
            )
            general += extra
            general += (e for e in unowned if e[1] not in origin)
            general.sort()
            queue = general
        for negative, split in self._fill(queue, load, count, final):
            origin.setdefault(split, None)
            self._bins_add(final[split], -negative, split)
        limit = MAX_IMPROVING_MOVES
        held = self._hold(final, origin, pinned_now) if self._rebalance and self._held else []
        if not self._rebalance:
            pass  # no spread, no balance: sticky, affinity and fill alone
        elif self._domains:
            limit += 4 * len(self._inputs)
            self._spread(load, count, final, origin, limit)
            groups: dict[str, list[str]] = {}
            for m in self._names:
                groups.setdefault(self._domain[m], []).append(m)
            for group in groups.values():
                if len(group) > 1:
                    self._balance(group, load, count, final, origin, limit)
        else:
            self._balance(self._names, load, count, final, origin, limit)
        for member, weight, split in held:
            self._bins_add(member, weight, split)
        self._held_back = bool(held) and self._improvable(load, count)
        # Undo: the bins go back to the sticky state.
        for split, was in origin.items():
            w = self._inputs[split].load
            now = final.get(split)
            if now is not None and split not in pinned_now:
                self._bins_remove(now, w, split)
            if was is not None and split not in self._pinned:
                self._bins_add(was, w, split)
        result = {s: final.get(s) for s, was in origin.items() if final.get(s) != was}
        self._moved_in, self._moved_out = {}, {}
        for split, target in result.items():
            if target is not None:
                self._moved_in.setdefault(target, set()).add(split)
            was = origin[split]
            if was is not None:
                self._moved_out.setdefault(was, set()).add(split)
        self._totals = {m: (count[m], load[m]) for m in self._names}
        return result, affine

    def _improvable(self, load: Mapping[str, int], count: Mapping[str, int]) -> bool:
        """Whether the spread or the balance would take one more move on the current bins."""
        cap = self._cap
        if self._domains:
            domains = sorted(self._domain_bins)
            dload = dict.fromkeys(domains, 0)
            dcount = dict.fromkeys(domains, 0)
            dcap = dict.fromkeys(domains, 0)
            for m in self._names:
                d = self._domain[m]
                dload[d] += load[m]
                dcount[d] += count[m]
                dcap[d] += cap[m]
            if len(domains) > 1 and best_transfer(domains, dload, dcount, dcap, self._domain_bins):
                return True
        groups: dict[str, list[str]] = {}
        for m in self._names:
            groups.setdefault(self._domain[m], []).append(m)
        bins = self._bins
        return any(
            best_transfer(group, load, count, cap, bins, Band.of(group, load, bins)) is not None
            for group in groups.values()
            if len(group) > 1
        )

    def _hold(
        self, final: Mapping[str, str], origin: Mapping[str, str | None], pinned_now: Set[str]
    ) -> list[tuple[str, int, str]]:
        """Take the held splits out of the bins (the improving steps move only what is there).

        Returns (member, weight, split) of each taken out, to put back once the steps ran.
        """
        taken = []
        for split in self._held:
            p = self._inputs.get(split)
            if p is None:
                continue
            if split in origin:  # taken off its owner by an earlier step: where it went now
                member = final.get(split)
                if member is None or split in pinned_now:
                    continue
            else:
                member = self._owner(p)
                if member is None or split in self._pinned:
                    continue
            weight = p.load
            self._bins_remove(member, weight, split)
            taken.append((member, weight, split))
        return taken

    def _matching(self, affinity: str, matching: dict[str, list[str]]) -> list[str]:
        """The members whose locality satisfies ``affinity`` (cached in ``matching``)."""
        found = matching.get(affinity)
        if found is None:
            found = matching[affinity] = [
                m for m in self._names if affinity_matches(affinity, self._members[m].locality)
            ]
        return found

    def _loose_affinities(self, matching: dict[str, list[str]]) -> list[tuple[int, str]]:
        """Splits whose affinity some member matches but not their owner (or with no owner).

        Sorted by (-weight, id). The sticky step does not keep them on their owner: the
        affinity step places them. (An affinity no member matches is no affinity at all.)
        """
        loose = []
        for split in self._affine_loose:
            p = self._inputs[split]
            if self._matching(p.locality, matching):
                loose.append((-p.load, split))
        loose.sort()
        return loose

    def _take_off(
        self,
        split: str,
        weight: int,
        load: dict[str, int],
        count: dict[str, int],
        origin: dict[str, str | None],
        *,
        in_bins: bool,
    ) -> None:
        """Take ``split`` off its owner in the sticky state, for a later step to place."""
        owner = self._owner(self._inputs[split])
        assert owner is not None
        origin[split] = owner
        if in_bins:
            self._bins_remove(owner, weight, split)
        load[owner] -= weight
        count[owner] -= 1

    def _affinity_step(
        self,
        over_pinned: list[tuple[int, str]],
        loose: list[tuple[int, str]],
        matching: dict[str, list[str]],
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
        origin: dict[str, str | None],
        pinned_now: set[str],
    ) -> list[tuple[int, str]]:
        """Place the affinity splits the sticky step left loose; returns the rest, for the fill.

        In the sticky order: the honoured affinities over their owner's budget first, then the
        affinities their owner does not honour, each heaviest first. A split that finds no
        room among its matches is placed like any other, and stays on its owner when it can
        (only once every affinity is placed: one placed before could be evicted by a later
        affinity in this solve but not in the next, and the answer would be no fixpoint).
        """
        cap = self._cap
        for negative, split in loose:
            if self._owner(self._inputs[split]) is None:
                origin[split] = None  # still among the unowned: kept out of the fill
            else:
                self._take_off(split, -negative, load, count, origin, in_bins=True)
        for negative, split in over_pinned:
            self._take_off(split, -negative, load, count, origin, in_bins=False)
        general: list[tuple[int, str]] = []
        ignored: list[tuple[int, str]] = []
        for negative, split in (*over_pinned, *loose):
            wanted = self._matching(self._inputs[split].locality, matching)
            target = self._affine_target(wanted, load, count, origin, general)
            if target is None:
                ignored.append((negative, split))
                continue
            final[split] = target
            pinned_now.add(split)
            load[target] -= negative
            count[target] += 1
        for negative, split in ignored:
            owner = self._owner(self._inputs[split])
            if owner is not None and count[owner] < cap[owner]:
                final[split] = owner
                self._bins_add(owner, -negative, split)
                load[owner] -= negative
                count[owner] += 1
            else:
                general.append((negative, split))
        return general

    def _affine_target(
        self,
        wanted: list[str],
        load: dict[str, int],
        count: dict[str, int],
        origin: dict[str, str | None],
        general: list[tuple[int, str]],
    ) -> str | None:
        """A matching worker with a free lane, making one by evicting an unpinned split."""
        open_ = [m for m in wanted if count[m] < self._cap[m]]
        if open_:
            return min(open_, key=lambda m: (load[m], self._member_hash[m], m))
        # Every match is full: the fullest one holding a split without an honoured affinity
        # gives back the split it would keep last (lightest, then highest id: the end of the
        # sticky order), so the next solve's sticky step makes the same choice. The bins hold
        # exactly those splits.
        donors = [m for m in wanted if self._bins[m].weights]
        if not donors:
            return None
        donor = max(donors, key=lambda m: (load[m], self._member_hash[m], m))
        weight, victim = self._bins[donor].last_of_lightest()
        origin.setdefault(victim, donor)
        self._bins_remove(donor, weight, victim)
        load[donor] -= weight
        count[donor] -= 1
        general.append((-weight, victim))
        return donor

    def _bins_add(self, member: str, weight: int, split: str) -> None:
        key = self._key(split)
        self._bins[member].add(weight, key)
        if self._domains:  # the domain bins serve only the spread across domains
            self._domain_bins[self._domain[member]].add(weight, key)

    def _bins_remove(self, member: str, weight: int, split: str) -> None:
        key = self._key(split)
        self._bins[member].remove(weight, key)
        if self._domains:
            self._domain_bins[self._domain[member]].remove(weight, key)

    def _fill(
        self,
        queue: Iterable[tuple[int, str]],
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
    ) -> Iterable[tuple[int, str]]:
        """The fill: unowned splits heaviest first, to the least-loaded open domain and worker.

        Returns those placed.
        """
        cap, placed = self._cap, []
        if not self._domains:
            spare = [(load[m], self._member_hash[m], m) for m in self._names if count[m] < cap[m]]
            heapq.heapify(spare)
            for negative, split in queue:
                if not spare:
                    break
                _, h, member = heapq.heappop(spare)
                final[split] = member
                placed.append((negative, split))
                load[member] -= negative
                count[member] += 1
                if count[member] < cap[member]:
                    heapq.heappush(spare, (load[member], h, member))
            return placed
        domains: dict[str, list[tuple[int, int, str]]] = {}
        for m in self._names:
            if count[m] < cap[m]:
                domains.setdefault(self._domain[m], []).append((load[m], self._member_hash[m], m))
        for heap in domains.values():
            heapq.heapify(heap)
        domain_load: dict[str, int] = {}
        for m in self._names:
            domain_load[self._domain[m]] = domain_load.get(self._domain[m], 0) + load[m]
        tops = [(domain_load[d], self._domain_hash[d], d) for d in domains]
        heapq.heapify(tops)
        for negative, split in queue:
            if not tops:
                break
            dload, dh, d = heapq.heappop(tops)
            heap = domains[d]
            _, mh, member = heapq.heappop(heap)
            final[split] = member
            placed.append((negative, split))
            load[member] -= negative
            count[member] += 1
            if count[member] < cap[member]:
                heapq.heappush(heap, (load[member], mh, member))
            if heap:
                heapq.heappush(tops, (dload - negative, dh, d))
        return placed

    def _place_of(self, split: str, final: Mapping[str, str]) -> str:
        member = final.get(split)
        if member is None:
            member = self._owner(self._inputs[split])
            assert member is not None
        return member

    def _spread(
        self,
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
        origin: dict[str, str | None],
        limit: int,
    ) -> None:
        """The spread: splits moved between domains while one move lowers the squared loads."""
        domains = sorted(self._domain_bins)
        if len(domains) < 2:
            return
        members_of: dict[str, list[str]] = {d: [] for d in domains}
        for m in self._names:
            members_of[self._domain[m]].append(m)
        dload = {d: sum(load[m] for m in members_of[d]) for d in domains}
        dcount = {d: sum(count[m] for m in members_of[d]) for d in domains}
        dcap = {d: sum(self._cap[m] for m in members_of[d]) for d in domains}
        bins = self._domain_bins
        for _ in range(limit):
            step = best_transfer(domains, dload, dcount, dcap, bins)
            if step is None:
                break
            target, source, (_, _, split, weight) = step
            owner = self._place_of(split, final)
            receiver = min(
                (m for m in members_of[target] if count[m] < self._cap[m]),
                key=lambda m: (load[m], self._member_hash[m], m),
            )
            self._move(split, weight, owner, receiver, load, count, final, origin)
            dload[source] -= weight
            dload[target] += weight
            dcount[source] -= 1
            dcount[target] += 1

    def _balance(
        self,
        group: list[str],
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
        origin: dict[str, str | None],
        limit: int,
    ) -> None:
        """The balance among ``group`` (all members, or one domain's), on the kept bins."""
        cap, bins = self._cap, self._bins
        band = Band.of(group, load, bins)
        for _ in range(limit):
            step = best_transfer(group, load, count, cap, bins, band)
            if step is None:
                break
            target, source, (_, _, split, weight) = step
            self._move(split, weight, source, target, load, count, final, origin)

    def _move(
        self,
        split: str,
        weight: int,
        source: str,
        target: str,
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
        origin: dict[str, str | None],
    ) -> None:
        if split not in origin:
            origin[split] = source
        self._bins_remove(source, weight, split)
        self._bins_add(target, weight, split)
        final[split] = target
        load[source] -= weight
        load[target] += weight
        count[source] -= 1
        count[target] += 1
