"""Placement across failure domains: the leader's pure placement when workers have localities.

A worker's *locality* is a path of tiers, coarsest first (``"zone-a/rack-3/host-7"``; empty
means unknown). Its *domain* at isolation tier ``t`` is the first ``t + 1`` tiers (all of them
when it has fewer; an unknown locality is a domain of its own, ``""``). :func:`place` spreads a
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
5. **Balance**: the same improvement among the workers of each domain.

Nothing is moved that the steps do not need to move, so the result is a fixpoint (a placement
fed back as the owners maps to itself), and a lost domain moves only its own splits. Every
tie is broken by a seeded hash, so every leader computes the same answer. Workers without any
locality take exactly the path of :func:`spate._core.protocol.desired_assignment`.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Collection, Mapping

import attrs

from spate._core.protocol import (
    MAX_IMPROVING_MOVES,
    Placement,
    WeightBins,
    best_transfer,
    desired_assignment,
    stable_hash_str,
)
from spate._errors import ConfigError

__all__ = [
    "MAX_LOCALITY_LENGTH",
    "DomainShare",
    "Member",
    "PlacementReport",
    "affinity_matches",
    "domain_of",
    "place",
    "placement_report",
    "report_from_totals",
    "validate_locality",
]

MAX_LOCALITY_LENGTH = 200
"""Longest locality (and affinity prefix)."""

_TIER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def validate_locality(value: object, what: str = "locality") -> str:
    """Return ``value`` if it is a valid locality, else raise :class:`~spate.ConfigError`.

    A locality is empty (unknown) or tiers separated by ``/``, coarsest first, each tier
    ``[A-Za-z0-9._-]`` starting with a letter or digit, at most 200 characters in all.
    """
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string such as 'zone-a/rack-3', not {value!r}")
    if value and (
        len(value) > MAX_LOCALITY_LENGTH
        or not all(_TIER_RE.fullmatch(tier) for tier in value.split("/"))
    ):
        raise ConfigError(
            f"invalid {what} {value!r}: a locality is tiers separated by '/', coarsest first "
            f"(for example 'zone-a/rack-3/host-7'), each tier of [A-Za-z0-9._-] starting with a "
            f"letter or digit, at most {MAX_LOCALITY_LENGTH} characters; leave it empty when "
            "the locality is unknown."
        )
    return value


def domain_of(locality: str, tier: int) -> str:
    """The failure domain of ``locality`` at isolation ``tier`` (its first ``tier + 1`` tiers)."""
    if not locality:
        return ""
    return "/".join(locality.split("/")[: tier + 1])


def affinity_matches(prefix: str, locality: str) -> bool:
    """Whether a worker at ``locality`` satisfies the affinity ``prefix`` (whole tiers).

    ``"zone-b"`` matches ``"zone-b"`` and ``"zone-b/rack-1"``, not ``"zone-bb"``.
    """
    return bool(prefix) and (locality == prefix or locality.startswith(prefix + "/"))


@attrs.frozen
class Member:
    """What :func:`place` needs to know about one live worker."""

    cap: int
    """Advertised lane budget (0 or less means the default)."""
    locality: str = ""
    """Failure-domain path, coarsest tier first ("" when unknown)."""


@attrs.define
class _State:
    """The placement under construction."""

    names: list[str]
    cap: dict[str, int]
    domain: dict[str, str]
    member_hash: dict[str, int]
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

    def put(self, member: str, split: str) -> None:
        self.placed[member].append(split)
        self.load[member] += self.weight[split]

    def spare(self, member: str) -> bool:
        return len(self.placed[member]) < self.cap[member]


def place(
    members: Mapping[str, Member],
    splits: Mapping[str, Placement],
    *,
    reserved: Collection[str] = (),
    default_cap: int,
    seed: int,
    isolation_tier: int = 0,
) -> dict[str, tuple[str, ...]]:
    """The leader's placement: member -> sorted split ids (splits in no list are the queue).

    ``members`` maps each live instance to its lane budget and locality, ``splits`` the
    assignable splits (runnable, spec seen; :attr:`Placement.locality` is the affinity),
    ``reserved`` splits are withheld. Deterministic in its arguments. See the module text for
    the steps; with no locality on any member it is
    :func:`~spate._core.protocol.desired_assignment`.
    """
    if not members:
        return {}
    if not any(m.locality for m in members.values()):
        return desired_assignment(
            {name: m.cap for name, m in members.items()},
            splits,
            reserved=reserved,
            default_cap=default_cap,
            seed=seed,
        )
    names = sorted(members)
    state = _State(
        names=names,
        cap={m: max(1, members[m].cap if members[m].cap > 0 else default_cap) for m in names},
        domain={m: domain_of(members[m].locality, isolation_tier) for m in names},
        member_hash={m: stable_hash_str(seed, m) for m in names},
        load=dict.fromkeys(names, 0),
        placed={m: [] for m in names},
        pinned=set(),
        weight={},
        split_hash={},
        seed=seed,
    )
    pool = sorted(
        ((max(1, p.weight), split, p) for split, p in splits.items() if split not in reserved),
        key=lambda t: (-t[0], t[1]),
    )
    matching: dict[str, list[str]] = {}
    for _, _, p in pool:
        if p.locality and p.locality not in matching:
            matching[p.locality] = [
                m for m in names if affinity_matches(p.locality, members[m].locality)
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

    # 4. spread across domains, 5. balance inside each domain
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
        return min(open_, key=lambda m: (state.load[m], state.member_hash[m], m))
    # Every match is full: the fullest one holding a split without an honoured affinity gives
    # back the split it would keep last (lightest, then highest id: the end of the sticky
    # order), so the next run's sticky pass makes the same choice.
    donors = [m for m in wanted if any(s not in state.pinned for s in state.placed[m])]
    if not donors:
        return None
    donor = max(donors, key=lambda m: (state.load[m], state.member_hash[m], m))
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
            domains.setdefault(state.domain[m], []).append((state.load[m], state.member_hash[m], m))
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
        _, mh, member = heapq.heappop(heap)
        state.put(member, split)
        if state.spare(member):
            heapq.heappush(heap, (state.load[member], mh, member))
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
    members_of: dict[str, list[str]] = {d: [] for d in domains}
    for m in state.names:
        members_of[state.domain[m]].append(m)
    load = {d: sum(state.load[m] for m in members_of[d]) for d in domains}
    count = {d: sum(len(state.placed[m]) for m in members_of[d]) for d in domains}
    cap = {d: sum(state.cap[m] for m in members_of[d]) for d in domains}
    if _settled(load, count, cap, lightest):
        return
    where: dict[str, str] = {}
    bins: dict[str, WeightBins] = {}
    for d in domains:
        entries = []
        for m in members_of[d]:
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
            (m for m in members_of[target] if state.spare(m)),
            key=lambda m: (state.load[m], state.member_hash[m], m),
        )
        state.put(receiver, split)
        where[split] = receiver
        load[source] -= weight
        load[target] += weight
        count[source] -= 1
        count[target] += 1


def _balance(state: _State, group: list[str], lightest: int, *, max_moves: int) -> None:
    """Inside one domain: move unpinned splits between workers while that lowers imbalance."""
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
    members_of: dict[str, set[str]] = {m: set(state.placed[m]) for m in group}
    count = {m: len(state.placed[m]) for m in group}
    for _ in range(max_moves):
        step = best_transfer(group, state.load, count, state.cap, bins)
        if step is None:
            break
        target, source, (_, h, split, weight) = step
        bins[source].remove(weight, (h, split))
        bins[target].add(weight, (h, split))
        members_of[source].discard(split)
        members_of[target].add(split)
        state.load[source] -= weight
        state.load[target] += weight
        count[source] -= 1
        count[target] += 1
    for m in group:
        state.placed[m] = list(members_of[m])


@attrs.frozen
class DomainShare:
    """One failure domain's part of the placement."""

    domain: str
    """The domain ("" for workers of unknown locality)."""
    workers: int
    splits: int
    weight: int
    share: float
    """Its fraction of the placed weight, 0-1."""


@attrs.frozen
class PlacementReport:
    """What a placement puts in each failure domain, and its blast radius."""

    domains: tuple[DomainShare, ...]
    blast_radius: float
    """The largest share of the placed weight one domain holds (0 when nothing is placed)."""


def placement_report(
    assignment: Mapping[str, Collection[str]],
    localities: Mapping[str, str],
    weights: Mapping[str, int],
    isolation_tier: int,
) -> PlacementReport:
    """The per-domain splits, weight and share of ``assignment``, and its blast radius.

    ``localities`` maps each worker to its locality; ``weights`` each split to its weight
    (a split with no weight counts 1).
    """
    totals = {
        member: (len(held), sum(weights.get(s, 1) for s in held))
        for member, held in assignment.items()
    }
    return report_from_totals(totals, localities, isolation_tier)


def report_from_totals(
    totals: Mapping[str, tuple[int, int]],
    localities: Mapping[str, str],
    isolation_tier: int,
) -> PlacementReport:
    """:func:`placement_report` from each worker's (split count, weight) placed on it.

    O(workers): what the leader's incremental placement reports after every change.
    """
    workers: dict[str, int] = {}
    splits: dict[str, int] = {}
    weight: dict[str, int] = {}
    for member, locality in localities.items():
        d = domain_of(locality, isolation_tier)
        workers[d] = workers.get(d, 0) + 1
        count, held = totals.get(member, (0, 0))
        splits[d] = splits.get(d, 0) + count
        weight[d] = weight.get(d, 0) + held
    total = sum(weight.values())
    shares = tuple(
        DomainShare(d, workers[d], splits[d], weight[d], weight[d] / total if total else 0.0)
        for d in sorted(workers)
    )
    return PlacementReport(shares, max((s.share for s in shares), default=0.0))
