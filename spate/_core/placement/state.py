"""The placement index's sticky state: each split on its owner, per worker and per domain.

The first step of the placement (*sticky*, see :mod:`spate._core.placement.index`) puts every
split on its live owner. :class:`StickyState` keeps that state for the index, split by split:
the workers with their budgets, domains and hashes; per worker its splits (as a set and
sorted), its load, and the weight bins the improve passes search (and per domain the same
bins, when localities are honoured); the unowned splits sorted heaviest first; the splits
pinned by an honoured affinity, and those whose affinity their owner does not honour. A
change of one split costs O(log n) here; a change of workers rebuilds it (O(n), once per
membership change) unless it only adds workers.

The fill and improve passes (:mod:`spate._core.placement.fill`,
:mod:`spate._core.placement.affinity`, :mod:`spate._core.placement.moves`) move splits in
its bins during a solve and put them back afterwards; they read the rest.

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping

from spate._core.placement.vocabulary import (
    Placement,
    WeightBins,
    Worker,
    affinity_matches,
    domain_of,
    merge_sorted,
)
from spate._core.protocol import stable_hash_str

__all__ = ["StickyState"]


class StickyState:
    """Each split of the pool on its live owner, kept split by split (see the module text).

    The index writes :attr:`workers` and :attr:`inputs` and calls :meth:`rebuild` (or
    :meth:`join`), :meth:`add` and :meth:`remove`; every other attribute is derived.
    """

    def __init__(self, *, default_cap: int, seed: int, isolation_tier: int) -> None:
        self.default_cap = default_cap
        self.seed = seed
        self.tier = isolation_tier
        self.workers: dict[str, Worker] = {}
        self.inputs: dict[str, Placement] = {}
        self._hash: dict[str, int] = {}  # split -> its seeded hash, computed once
        self.rebuild()

    def rebuild(self) -> None:
        """Derive the whole state again from :attr:`workers` and :attr:`inputs` (O(n))."""
        workers = self.workers
        self.names = sorted(workers)
        self.cap = {
            m: max(1, workers[m].cap if workers[m].cap > 0 else self.default_cap)
            for m in self.names
        }
        self.domains = any(m.locality for m in workers.values())
        """Whether any worker has a locality (else there are no domains and no affinities)."""
        self.domain = {
            m: domain_of(workers[m].locality, self.tier) if self.domains else "" for m in self.names
        }
        self.worker_hash = {m: stable_hash_str(self.seed, m) for m in self.names}
        self.owned: dict[str, set[str]] = {m: set() for m in self.names}
        self.sorted: dict[str, list[str]] = {m: [] for m in self.names}
        self.domain_hash = {d: stable_hash_str(self.seed, d) for d in set(self.domain.values())}
        self.load = dict.fromkeys(self.names, 0)
        self.bins = {m: WeightBins([]) for m in self.names}
        self.domain_bins = {d: WeightBins([]) for d in set(self.domain.values())}
        self._unowned: list[tuple[int, str]] = []  # sorted (-weight, split)
        self._unowned_new: list[tuple[int, str]] = []  # not yet in _unowned, see unowned_sorted
        self.pinned: set[str] = set()
        """Splits on an owner that honours their affinity: out of the bins, never moved."""
        self.affine_loose: set[str] = set()
        """Splits with an honoured affinity their owner does not match (or with no owner)."""
        self._orphans: dict[
            str, set[str]
        ] = {}  # an owner that is no live worker -> the splits naming it
        # Bulk load: one sort of the unowned splits, not an insort per split.
        unowned = []
        for split, p in self.inputs.items():
            if self.add(split, p, bulk=True):
                unowned.append((-p.load, split))
        unowned.sort()
        self._unowned = unowned
        self.sorted = {m: sorted(self.owned[m]) for m in self.names}

    def unowned_sorted(self) -> list[tuple[int, str]]:
        """The unowned splits, sorted, with those added since the last read merged in.

        A fold of a plan adds tens of thousands of unowned splits before the next read; a
        single change adds one or two (see merge_sorted).
        """
        if self._unowned_new:
            merge_sorted(self._unowned, self._unowned_new)
            self._unowned_new = []
        return self._unowned

    def has_unowned(self) -> bool:
        """Whether some split in the pool has no live owner."""
        return bool(self._unowned or self._unowned_new)

    def join(self, joining: Mapping[str, Worker]) -> None:
        """Add workers to the state (a join costs what it changes, not a rebuild).

        Only when no other worker changed and whether localities are honoured stays as it
        was: then the splits of the other workers keep their state, and the splits naming
        a joining worker as owner (a worker back under its old id) move from unowned to it.
        """
        adopted = [
            (split, self.inputs[split]) for m in joining for split in self._orphans.pop(m, ())
        ]
        for split, p in adopted:
            self.remove(split, p)  # still unowned: its owner is no live worker yet
        for m, worker in joining.items():
            self.workers[m] = worker
            bisect.insort(self.names, m)
            self.cap[m] = max(1, worker.cap if worker.cap > 0 else self.default_cap)
            domain = domain_of(worker.locality, self.tier) if self.domains else ""
            self.domain[m] = domain
            if domain not in self.domain_hash:
                self.domain_hash[domain] = stable_hash_str(self.seed, domain)
                self.domain_bins[domain] = WeightBins([])
            self.worker_hash[m] = stable_hash_str(self.seed, m)
            self.owned[m] = set()
            self.sorted[m] = []
            self.load[m] = 0
            self.bins[m] = WeightBins([])
        for split, p in adopted:
            self.add(split, p)

    def renamed_orphan(self, old: str | None, new: str | None, split: str) -> None:
        """An unowned split now names another owner that is no live worker (nothing else moved)."""
        self._orphan_drop(old, split)
        self._orphan_add(new, split)

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

    def owner(self, p: Placement) -> str | None:
        """The owner of ``p`` when it is a worker (the sticky step's anchor), else None."""
        return p.owner if p.owner is not None and p.owner in self.workers else None

    def where(self, split: str) -> str | None:
        """The worker the sticky state puts ``split`` on (None: unowned or not in the pool)."""
        p = self.inputs.get(split)
        return None if p is None else self.owner(p)

    def key(self, split: str) -> tuple[int, str]:
        """The bins' key of ``split``: (its seeded hash, its id)."""
        h = self._hash.get(split)
        if h is None:
            h = self._hash[split] = stable_hash_str(self.seed, split)
        return (h, split)

    def add(self, split: str, p: Placement, *, bulk: bool = False) -> bool:
        """Add ``split`` to the sticky state; True when it is unowned (and bulk)."""
        weight = p.load
        owner = self.owner(p)
        honoured = bool(p.locality) and self.domains
        if honoured and (
            owner is None or not affinity_matches(p.locality, self.workers[owner].locality)
        ):
            self.affine_loose.add(split)
        if owner is None:
            self._orphan_add(p.owner, split)
            if bulk:
                return True
            self._unowned_new.append((-weight, split))
            return False
        self.owned[owner].add(split)
        if not bulk:
            bisect.insort(self.sorted[owner], split)
        self.load[owner] += weight
        if honoured and split not in self.affine_loose:
            self.pinned.add(split)
        else:
            self.bins_add(owner, weight, split)
        return False

    def remove(self, split: str, p: Placement) -> None:
        """Take ``split`` (fed as ``p``) out of the sticky state."""
        weight = p.load
        self.affine_loose.discard(split)
        owner = self.owner(p)
        if owner is None:
            self._orphan_drop(p.owner, split)
            unowned = self.unowned_sorted()
            unowned.pop(bisect.bisect_left(unowned, (-weight, split)))
            return
        self.owned[owner].discard(split)
        held = self.sorted[owner]
        held.pop(bisect.bisect_left(held, split))
        self.load[owner] -= weight
        if split in self.pinned:
            self.pinned.discard(split)
        else:
            self.bins_remove(owner, weight, split)

    def bins_add(self, worker: str, weight: int, split: str) -> None:
        """Put ``split`` in ``worker``'s bins (and its domain's, when there are domains)."""
        key = self.key(split)
        self.bins[worker].add(weight, key)
        if self.domains:  # the domain bins serve only the spread across domains
            self.domain_bins[self.domain[worker]].add(weight, key)

    def bins_remove(self, worker: str, weight: int, split: str) -> None:
        """Take ``split`` out of ``worker``'s bins (and its domain's)."""
        key = self.key(split)
        self.bins[worker].remove(weight, key)
        if self.domains:
            self.domain_bins[self.domain[worker]].remove(weight, key)

    def take_off(
        self,
        split: str,
        weight: int,
        load: dict[str, int],
        count: dict[str, int],
        origin: dict[str, str | None],
        *,
        in_bins: bool,
    ) -> None:
        """Take ``split`` off its owner in a solve's loads, for a later step to place."""
        owner = self.owner(self.inputs[split])
        assert owner is not None
        origin[split] = owner
        if in_bins:
            self.bins_remove(owner, weight, split)
        load[owner] -= weight
        count[owner] -= 1

    def groups(self) -> dict[str, list[str]]:
        """The workers of each domain (one group of all workers when there are no domains)."""
        groups: dict[str, list[str]] = {}
        for m in self.names:
            groups.setdefault(self.domain[m], []).append(m)
        return groups

    def overflow(self, off: Collection[str]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """Splits the sticky step leaves unplaced because their owner is over its budget.

        The sticky step keeps an owner's splits in its order (honoured affinities first, then
        heaviest, then by id) until the budget is reached: the rest join the unowned splits
        in the fill, or the affinity step when their affinity is honoured. Splits in ``off``
        (affinities their owner does not honour) do not count. Returns the two, each sorted
        by (-weight, id): (unpinned, pinned).
        """
        extra: list[tuple[int, str]] = []
        pinned: list[tuple[int, str]] = []
        for m in self.names:
            owned = self.owned[m]
            if len(owned) <= self.cap[m]:
                continue
            kept = [s for s in owned if s not in off] if off else owned
            if len(kept) <= self.cap[m]:
                continue
            order = sorted(
                kept,
                key=lambda s: (s not in self.pinned, -self.inputs[s].load, s),
            )
            for split in order[self.cap[m] :]:
                entry = (-self.inputs[split].load, split)
                (pinned if split in self.pinned else extra).append(entry)
        extra.sort()
        pinned.sort()
        return extra, pinned
