"""The reference model of placement, for tests: the whole job placed from scratch, step by step.

Not the leader's placement: that is :class:`spate._core.placement.index.PlacementIndex`, which
reaches the same answer one change at a time. This model is the plain reading of the rules it
must follow, and the property tests hold the index equal to it, answer for answer
(``tests/core/test_placement_index.py``, ``tests/core/test_placement.py``).

- :func:`desired_assignment` — workers without localities: *sticky* (a split stays with its
  current owner while that worker is under its cap, heaviest first), *fill* (each remaining
  split, heaviest first, to the worker with spare budget and the least load, ties by worker
  hash), *improve* (repeatedly the single move that most lowers the sum of squared loads,
  while some load lies outside the band, until none does).
- :func:`place` — workers with localities: sticky, affinity, fill, spread across domains,
  balance inside each (see the index's module text); with no locality on any worker it is
  :func:`desired_assignment`.

Both take ``rebalance``: without it the improving steps (spread, balance, improve) do not run,
and the placement is sticky, affinity and fill alone. Both take ``held``: splits the improving
steps leave where the sticky and fill steps put them.

The rules themselves (what a locality, a domain and an affinity are; the steps and the
guarantees they give) are written down once, in :mod:`spate._core.placement.index`.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping

import attrs

from spate._core.placement.vocabulary import (
    MAX_IMPROVING_MOVES,
    Band,
    Placement,
    WeightBins,
    Worker,
    affinity_matches,
    best_transfer,
    domain_of,
)
from spate._core.protocol import stable_hash_str

__all__ = ["desired_assignment", "place"]


def desired_assignment(
    workers: Mapping[str, int],
    splits: Mapping[str, Placement],
    *,
    reserved: Collection[str] = (),
    default_cap: int,
    seed: int,
    rebalance: bool = True,
    held: Collection[str] = (),
) -> dict[str, tuple[str, ...]]:
    """The reference placement without localities: worker -> sorted split ids (the rest queue).

    ``workers`` maps each live instance to its advertised lane budget (0 or less means
    "use ``default_cap``"); ``splits`` holds the assignable splits (runnable, spec seen);
    ``reserved`` splits are withheld (their owner's grace window is open). Deterministic in
    its arguments and independent of who computes it; a fixpoint, so a balanced fleet maps to
    itself and publishes nothing.

    Three passes: *sticky* (a split stays with its current owner while that worker is under
    its cap, heaviest first), *fill* (each remaining split, heaviest first, to the worker with
    spare budget and the least load, ties by worker hash), *improve* (repeatedly the single
    move that most lowers the sum of squared loads while a load lies outside the
    :class:`~spate._core.placement.vocabulary.Band`, until none does; only when ``rebalance``, and
    never
    moving a ``held`` split).
    """
    if not workers:
        return {}
    names = sorted(workers)
    cap = {m: max(1, workers[m] if workers[m] > 0 else default_cap) for m in names}
    worker_hash = {m: stable_hash_str(seed, m) for m in names}
    load = dict.fromkeys(names, 0)
    placed: dict[str, list[str]] = {m: [] for m in names}
    weight_of: dict[str, int] = {}

    pool = sorted(
        ((p.load, split, p.owner) for split, p in splits.items() if split not in reserved),
        key=lambda t: (-t[0], t[1]),
    )
    unplaced: list[tuple[int, str]] = []
    for weight, split, owner in pool:
        weight_of[split] = weight
        if owner is not None and owner in cap and len(placed[owner]) < cap[owner]:
            placed[owner].append(split)
            load[owner] += weight
        else:
            unplaced.append((weight, split))

    spare = [(load[m], worker_hash[m], m) for m in names if len(placed[m]) < cap[m]]
    heapq.heapify(spare)
    for weight, split in unplaced:
        if not spare:
            break  # every worker is at its cap: the rest is the queue
        _, h, worker = heapq.heappop(spare)
        placed[worker].append(split)
        load[worker] += weight
        if len(placed[worker]) < cap[worker]:
            heapq.heappush(spare, (load[worker], h, worker))

    if rebalance:
        _improve(names, cap, load, placed, weight_of, seed, frozenset(held))
    return {m: tuple(sorted(placed[m])) for m in names}


def _improve(
    names: list[str],
    cap: dict[str, int],
    load: dict[str, int],
    placed: dict[str, list[str]],
    weight_of: dict[str, int],
    seed: int,
    held: frozenset[str],
) -> None:
    count = {m: len(placed[m]) for m in names}
    bins = {m: WeightBins() for m in names}
    splits_of: dict[str, set[str]] = {m: set(placed[m]) for m in names}
    split_hash: dict[str, int] = {}
    for m in names:
        for split in placed[m]:
            if split not in held:
                split_hash[split] = stable_hash_str(seed, split)
                bins[m].add(weight_of[split], (split_hash[split], split))
    band = Band.of(names, load, bins)
    for _ in range(MAX_IMPROVING_MOVES):
        step = best_transfer(names, load, count, cap, bins, band)
        if step is None:
            break
        target, source, (_, h, split, weight) = step
        bins[source].remove(weight, (h, split))
        bins[target].add(weight, (h, split))
        splits_of[source].discard(split)
        splits_of[target].add(split)
        load[source] -= weight
        load[target] += weight
        count[source] -= 1
        count[target] += 1
    for m in names:
        placed[m] = list(splits_of[m])


@attrs.define
class _State:
    """The placement under construction."""

    names: list[str]
    cap: dict[str, int]
    domain: dict[str, str]
    worker_hash: dict[str, int]
    load: dict[str, int]
    placed: dict[str, list[str]]
    pinned: set[str]
    """Splits placed by an honoured affinity: they move no further."""
    weight: dict[str, int]
    split_hash: dict[str, int]
    seed: int

    def hash_of(self, split: str) -> int:
        h = self.split_hash.get(split)
        if h is None:
            h = self.split_hash[split] = stable_hash_str(self.seed, split)
        return h

    def put(self, worker: str, split: str) -> None:
        self.placed[worker].append(split)
        self.load[worker] += self.weight[split]

    def spare(self, worker: str) -> bool:
        return len(self.placed[worker]) < self.cap[worker]


def place(
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
    """The reference placement: worker -> sorted split ids (splits in no list are the queue).

    ``workers`` maps each live instance to its lane budget and locality, ``splits`` the
    assignable splits (runnable, spec seen; :attr:`Placement.locality` is the affinity),
    ``reserved`` splits are withheld. Deterministic in its arguments. See the module text for
    the steps; with no locality on any worker it is
    :func:`desired_assignment`.
    """
    if not workers:
        return {}
    if not any(m.locality for m in workers.values()):
        return desired_assignment(
            {name: m.cap for name, m in workers.items()},
            splits,
            reserved=reserved,
            default_cap=default_cap,
            seed=seed,
            rebalance=rebalance,
            held=held,
        )
    names = sorted(workers)
    state = _State(
        names=names,
        cap={m: max(1, workers[m].cap if workers[m].cap > 0 else default_cap) for m in names},
        domain={m: domain_of(workers[m].locality, isolation_tier) for m in names},
        worker_hash={m: stable_hash_str(seed, m) for m in names},
        load=dict.fromkeys(names, 0),
        placed={m: [] for m in names},
        pinned=set(),
        weight={},
        split_hash={},
        seed=seed,
    )
    pool = sorted(
        ((p.load, split, p) for split, p in splits.items() if split not in reserved),
        key=lambda t: (-t[0], t[1]),
    )
    matching: dict[str, list[str]] = {}
    for _, _, p in pool:
        if p.locality and p.locality not in matching:
            matching[p.locality] = [
                m for m in names if affinity_matches(p.locality, workers[m].locality)
            ]

    # 1. sticky: honoured affinities first, so that a split they displace in one run is not
    # the one that displaces them in the next (the fixpoint)
    def pinned_first(entry: tuple[int, str, Placement]) -> bool:
        p = entry[2]
        return not (p.locality and p.owner in matching.get(p.locality, ()))

    loose: list[tuple[int, str, str, str | None]] = []  # (weight, split, affinity, owner)
    ordered = sorted(pool, key=pinned_first) if matching else pool  # stable: weight order within
    for weight, split, p in ordered:
        state.weight[split] = weight
        owner = p.owner
        wanted = matching.get(p.locality, []) if p.locality else []
        if (
            owner is not None
            and owner in state.cap
            and state.spare(owner)
            and (not wanted or owner in wanted)
        ):
            state.put(owner, split)
            if wanted:
                state.pinned.add(split)
        else:
            loose.append((weight, split, p.locality if wanted else "", owner))

    # 2. affinity
    general: list[tuple[int, str]] = []
    ignored: list[tuple[int, str, str | None]] = []
    for weight, split, affinity, owner in loose:
        if not affinity:
            general.append((weight, split))
            continue
        target = _affine_target(state, matching[affinity], general)
        if target is None:
            ignored.append((weight, split, owner))
        else:
            state.put(target, split)
            state.pinned.add(split)
    for weight, split, owner in ignored:
        # No room among its matches: placed like any other split, so it stays where it is
        # when it can. Only after every affinity is placed: one placed before could be
        # evicted by a later affinity in this run but not in the next (not a fixpoint).
        if owner is not None and owner in state.cap and state.spare(owner):
            state.put(owner, split)
        else:
            general.append((weight, split))

    # 3. fill (heaviest first, evicted splits among them)
    general.sort(key=lambda t: (-t[0], t[1]))
    _fill(state, general)

    # 4. spread across domains, 5. balance inside each domain: only when a rebalance is allowed
    if not rebalance:
        return {m: tuple(sorted(state.placed[m])) for m in names}
    state.pinned.update(held)  # held: moved by neither step, as an honoured affinity is not
    lightest = min((w for w, _, _ in pool), default=1)
    _spread(state, lightest, max_moves=MAX_IMPROVING_MOVES + 4 * len(pool))
    by_domain: dict[str, list[str]] = {}
    for m in names:
        by_domain.setdefault(state.domain[m], []).append(m)
    for group in by_domain.values():
        _balance(state, group, lightest, max_moves=MAX_IMPROVING_MOVES + 4 * len(pool))
    return {m: tuple(sorted(state.placed[m])) for m in names}


def _affine_target(state: _State, wanted: list[str], general: list[tuple[int, str]]) -> str | None:
    """A matching worker with a free lane, making one by evicting an unpinned split if need be."""
    open_ = [m for m in wanted if state.spare(m)]
    if open_:
        return min(open_, key=lambda m: (state.load[m], state.worker_hash[m], m))
    # Every match is full: the fullest one holding a split without an honoured affinity gives
    # back the split it would keep last (lightest, then highest id: the end of the sticky
    # order), so the next run's sticky pass makes the same choice.
    donors = [m for m in wanted if any(s not in state.pinned for s in state.placed[m])]
    if not donors:
        return None
    donor = max(donors, key=lambda m: (state.load[m], state.worker_hash[m], m))
    victim = max(
        (s for s in state.placed[donor] if s not in state.pinned),
        key=lambda s: (-state.weight[s], s),
    )
    state.placed[donor].remove(victim)
    state.load[donor] -= state.weight[victim]
    general.append((state.weight[victim], victim))
    return donor


def _fill(state: _State, general: list[tuple[int, str]]) -> None:
    """Heaviest first, to the least-loaded open domain, then its least-loaded open worker."""
    domains: dict[str, list[tuple[int, int, str]]] = {}
    for m in state.names:
        if state.spare(m):
            domains.setdefault(state.domain[m], []).append((state.load[m], state.worker_hash[m], m))
    for heap in domains.values():
        heapq.heapify(heap)
    domain_load: dict[str, int] = {}
    for m in state.names:
        domain_load[state.domain[m]] = domain_load.get(state.domain[m], 0) + state.load[m]
    tops = [(domain_load[d], stable_hash_str(state.seed, d), d) for d in domains]
    heapq.heapify(tops)
    for weight, split in general:
        if not tops:
            break  # every worker is at its cap: the rest is the queue
        load, h, d = heapq.heappop(tops)
        heap = domains[d]
        _, mh, worker = heapq.heappop(heap)
        state.put(worker, split)
        if state.spare(worker):
            heapq.heappush(heap, (state.load[worker], mh, worker))
        if heap:
            heapq.heappush(tops, (load + weight, h, d))


def _settled(
    load: Mapping[str, int], count: Mapping[str, int], cap: Mapping[str, int], lightest: int
) -> bool:
    """Whether no move can help: every load gap to the lightest open bin is at most ``lightest``.

    A split of weight ``w`` only moves across a gap above ``w``. Checked before the improve
    pass indexes every split: a placement fed its own output is settled, and finding that out
    costs one pass over the bins instead of the whole index.
    """
    open_loads = [load[b] for b in load if count[b] < cap[b]]
    return not open_loads or max(load.values()) - min(open_loads) <= lightest


def _spread(state: _State, lightest: int, *, max_moves: int) -> None:
    """Move unpinned splits between domains until no single move lowers the squared loads."""
    domains = sorted({state.domain[m] for m in state.names})
    if len(domains) < 2:
        return
    workers_of: dict[str, list[str]] = {d: [] for d in domains}
    for m in state.names:
        workers_of[state.domain[m]].append(m)
    load = {d: sum(state.load[m] for m in workers_of[d]) for d in domains}
    count = {d: sum(len(state.placed[m]) for m in workers_of[d]) for d in domains}
    cap = {d: sum(state.cap[m] for m in workers_of[d]) for d in domains}
    if _settled(load, count, cap, lightest):
        return
    where: dict[str, str] = {}
    bins: dict[str, WeightBins] = {}
    for d in domains:
        entries = []
        for m in workers_of[d]:
            for split in state.placed[m]:
                if split not in state.pinned:
                    where[split] = m
                    entries.append((state.weight[split], state.hash_of(split), split))
        bins[d] = WeightBins(entries)
    for _ in range(max_moves):
        step = best_transfer(domains, load, count, cap, bins)
        if step is None:
            break
        target, source, (_, h, split, weight) = step
        bins[source].remove(weight, (h, split))
        bins[target].add(weight, (h, split))
        owner = where[split]
        state.placed[owner].remove(split)
        state.load[owner] -= weight
        receiver = min(
            (m for m in workers_of[target] if state.spare(m)),
            key=lambda m: (state.load[m], state.worker_hash[m], m),
        )
        state.put(receiver, split)
        where[split] = receiver
        load[source] -= weight
        load[target] += weight
        count[source] -= 1
        count[target] += 1


def _balance(state: _State, group: list[str], lightest: int, *, max_moves: int) -> None:
    """Inside one domain: move unpinned splits between workers while a load is out of band."""
    if len(group) < 2 or _settled(
        {m: state.load[m] for m in group},
        {m: len(state.placed[m]) for m in group},
        state.cap,
        lightest,
    ):
        return
    bins = {
        m: WeightBins(
            [
                (state.weight[s], state.hash_of(s), s)
                for s in state.placed[m]
                if s not in state.pinned
            ]
        )
        for m in group
    }
    splits_of: dict[str, set[str]] = {m: set(state.placed[m]) for m in group}
    count = {m: len(state.placed[m]) for m in group}
    band = Band.of(group, state.load, bins)
    for _ in range(max_moves):
        step = best_transfer(group, state.load, count, state.cap, bins, band)
        if step is None:
            break
        target, source, (_, h, split, weight) = step
        bins[source].remove(weight, (h, split))
        bins[target].add(weight, (h, split))
        splits_of[source].discard(split)
        splits_of[target].add(split)
        state.load[source] -= weight
        state.load[target] += weight
        count[source] -= 1
        count[target] += 1
    for m in group:
        state.placed[m] = list(splits_of[m])
