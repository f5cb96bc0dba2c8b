"""The leader's placement kept up to date one split at a time: cost proportional to the change.

:func:`spate._core.placement.place` (and :func:`spate._core.protocol.desired_assignment`, its
path when no worker has a locality) is the oracle: a :class:`PlacementIndex` fed the same
members and
splits always answers exactly what the batch function answers. It gets there without
re-placing the whole job:

- The batch function's first pass (*sticky*) puts every split on its owner. When no affinity
  is unhonoured, that pass keeps each owner's splits in a fixed order up to its lane budget,
  so its state is "each split on its owner" less the overflow of owners over their budget
  (a worker draining while new splits are anchored on it): a function of each split and its
  owner's splits alone. The index keeps "each split on its owner" (per-member sets, loads, and
  the weight bins the improve pass searches, with every split's hash computed once), updates
  it in O(log n) per changed split, and takes the overflow out on each solve.
- The later passes (*fill* the unowned splits heaviest first, then *spread* across domains and
  *balance* workers, or *improve* without localities) run from that state on every solve, and
  are then undone. Their cost is the number of lanes they fill and moves they make: the splits
  in flight, not the job. A fleet at its fixpoint (every split on its assignee) makes none.
- A changed split whose owner, weight and affinity are unchanged (a renewal, a claim by the
  assignee of a split it was already anchored to, an owner that is no member either way)
  changes nothing at all: no solve, nothing to publish.
- When the shortcut does not hold (an affinity its owner does not honour, or that has no
  owner, or one in an owner's overflow: the batch's affinity step may evict), the index calls
  the batch function itself. A change of members or of their budgets or
  localities rebuilds the state from the stored inputs (O(n), once per membership change).

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping

from spate._core.placement import Member, affinity_matches, domain_of, place
from spate._core.protocol import (
    MAX_IMPROVING_MOVES,
    Placement,
    WeightBins,
    best_transfer,
    merge_sorted,
    stable_hash_str,
)

__all__ = ["PlacementIndex"]


class PlacementIndex:
    """The leader's placement of one job, updated split by split (see the module text).

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
        self.batches = 0
        """Solves that called the batch function (for tests and the benchmark)."""
        self.solves = 0
        """Solves done incrementally."""
        self._rebuild()
        self._result: dict[str, str | None] = {}  # split -> where it differs from its owner
        self._batch: dict[str, tuple[str, ...]] | None = None  # the batch answer, when used
        self._dirty = True
        self._all_changed = True
        self._before: dict[str, str | None] = {}  # split -> its member in the last answer
        self._changed: set[str] = set()
        self._totals: dict[str, tuple[int, int]] = {}

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
        old_result, old_batch = self._result, self._batch
        if not self._members:
            self._result, self._batch = {}, {}
        elif self._affine_loose or (result := self._improve()) is None:
            self.batches += 1
            self._batch = place(
                self._members,
                self._inputs,
                default_cap=self._default_cap,
                seed=self._seed,
                isolation_tier=self._tier,
            )
            self._result = {}
        else:
            self.solves += 1
            self._batch = None
            self._result = result
        if self._all_changed or old_batch is not None or self._batch is not None:
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
        if self._batch is not None:
            return self._batch.get(member, ())
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
        if self._batch is not None:
            return {s: m for m, held in self._batch.items() for s in held if self._where(s) != m}
        return {s: m for s, m in self._result.items() if m is not None}

    def assignment(self) -> dict[str, tuple[str, ...]]:
        """Every member's splits: what the batch function answers for the same inputs."""
        self.solve()
        return {m: self.assignment_of(m) for m in sorted(self._members)}

    def totals(self) -> dict[str, tuple[int, int]]:
        """Per member, the (split count, weight) placed on it."""
        self.solve()
        if self._batch is not None:
            return {
                m: (len(held), sum(max(1, self._inputs[s].weight) for s in held))
                for m, held in self._batch.items()
            }
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
                unowned.append((-max(1, p.weight), split))
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
        weight = max(1, p.weight)
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
        weight = max(1, p.weight)
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

    def _overflow(self) -> list[tuple[int, str]] | None:
        """Splits the sticky pass leaves unplaced because their owner is over its budget.

        The batch sticky pass keeps an owner's splits in its order (honoured affinities
        first, then heaviest, then by id) until the budget is reached: the rest join the
        unowned splits in the fill. ``None`` when one of them has an honoured affinity (the
        batch's affinity step, with its evictions, would place it): the caller runs the batch.
        """
        extra: list[tuple[int, str]] = []
        for m in self._names:
            owned = self._owned[m]
            if len(owned) <= self._cap[m]:
                continue
            order = sorted(
                owned,
                key=lambda s: (s not in self._pinned, -max(1, self._inputs[s].weight), s),
            )
            for split in order[self._cap[m] :]:
                if split in self._pinned:
                    return None
                extra.append((-max(1, self._inputs[split].weight), split))
        extra.sort()
        return extra

    # -- fill and improve, from the sticky state, undone afterwards ------------------------

    def _improve(self) -> dict[str, str | None] | None:
        """What the batch answers, as the splits placed elsewhere than the sticky state.

        Values are members (``None``: queued); the whole result is ``None`` when the batch
        must run instead.
        """
        extra = self._overflow()
        if extra is None:
            return None
        load = dict(self._load)
        count = {m: len(self._owned[m]) for m in self._names}
        final: dict[str, str] = {}
        origin: dict[str, str | None] = {}
        for negative, split in extra:
            owner = self._owner(self._inputs[split])
            assert owner is not None
            origin[split] = owner
            self._bins_remove(owner, -negative, split)
            load[owner] += negative
            count[owner] -= 1
        unowned = self._unowned_sorted()
        queue = heapq.merge(unowned, extra) if extra else unowned
        for negative, split in self._fill(queue, load, count, final):
            origin.setdefault(split, None)
            self._bins_add(final[split], -negative, split)
        limit = MAX_IMPROVING_MOVES
        if self._domains:
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
        # Undo: the bins go back to the sticky state.
        for split, was in origin.items():
            w = max(1, self._inputs[split].weight)
            now = final.get(split)
            if now is not None:
                self._bins_remove(now, w, split)
            if was is not None:
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
        return result

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
        """Place unowned splits heaviest first, as the batch fill does; returns those placed."""
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
        """The batch spread across domains, on the kept bins (see :func:`place`)."""
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
        """The batch improve among ``group`` (all members, or one domain's), on the kept bins."""
        cap, bins = self._cap, self._bins
        for _ in range(limit):
            step = best_transfer(group, load, count, cap, bins)
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
