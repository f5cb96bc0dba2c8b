"""The pure rules of the protocol: no I/O, no clock, no Trio.

- :func:`claim_candidates` — which splits this worker *may* act on, and how (which kind of
  claim, and whether that claim would exhaust the split's attempts and so must quarantine it).
- :func:`desired_assignment` — the leader's placement: sticky on the current owner, balanced by
  weight, bounded by each member's lane budget, with ties broken by a hash seeded from the job
  fingerprint so that every leader (and every failover) reaches the same answer.
- :func:`stable_hash_str`, :func:`stable_hash`, :func:`jitter` — the only hashing and
  randomness the rules use (blake2b, stable across platforms and Python versions).

Everything here is deterministic in its arguments, which is what the property tests pin.
"""

from __future__ import annotations

import bisect
import enum
import hashlib
import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal, Protocol, TypeAlias

import attrs

from spate._core.records import Status

__all__ = [
    "FAIL",
    "INSORT_AT_MOST",
    "MAX_IMPROVING_MOVES",
    "Candidate",
    "ClaimKind",
    "Placement",
    "SplitFacts",
    "Transfer",
    "WeightBins",
    "attempts_after",
    "best_transfer",
    "claim_candidates",
    "desired_assignment",
    "exhausts_attempts",
    "fingerprint_hash",
    "jitter",
    "live_workers",
    "merge_sorted",
    "stable_hash",
    "stable_hash_str",
]

MAX_IMPROVING_MOVES = 4096
"""Backstop on the improve pass (each move strictly lowers the sum of squared loads, so the
pass ends on its own; this bound only caps pathological inputs)."""

_MASK64 = (1 << 64) - 1

INSORT_AT_MOST = 64
"""Entries added to a sorted list since its last read that :func:`merge_sorted` inserts one by
one; more are appended and the list sorted once."""


def merge_sorted(run: list[tuple[int, str]], new: list[tuple[int, str]]) -> None:
    """Put the entries of ``new`` into the sorted list ``run``, in place.

    Both ways are linear in ``len(run)`` per read, with very different constants: an insort
    moves the list's tail (one memmove) per entry, a sort compares every entry of the run. A
    leader folding one ownership change adds an entry or two between reads (in a group of
    2,500 an insort costs about 1 µs, a sort about 60 µs); a fold of a plan adds thousands
    before the next read (an insort each would be quadratic, while one sort of a sorted run
    plus a tail is about linear).
    """
    if len(new) <= INSORT_AT_MOST:
        for entry in new:
            bisect.insort(run, entry)
    else:
        run += new
        run.sort()


def stable_hash(seed: int, value: int) -> int:
    """A 64-bit hash of an integer, seeded; identical on every platform and Python version."""
    data = (value & _MASK64).to_bytes(8, "big")
    key = (seed & _MASK64).to_bytes(8, "big")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=key).digest(), "big")


def stable_hash_str(seed: int, text: str) -> int:
    """A 64-bit hash of a string, seeded; identical on every platform and Python version."""
    key = (seed & _MASK64).to_bytes(8, "big")
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, key=key).digest(), "big")


def fingerprint_hash(fingerprint: str) -> int:
    """The job's tie-break seed, derived from the fingerprint alone.

    Never from the leader's identity: a leader-specific seed would re-break every tie at
    each failover and move splits for nothing.
    """
    return stable_hash_str(0, fingerprint)


def jitter(seed: int, round_: int, base: float) -> float:
    """``base`` scaled into [0.8, 1.2) by a hash of ``(seed, round_)``, in 1024 steps.

    Workers started together would otherwise renew in lockstep and hit the store in bursts.
    """
    h = stable_hash(seed, round_) % 1024
    return base * (0.8 + 0.4 * h / 1024)


def live_workers(presence: Collection[str], instance: str) -> int:
    """Number of live workers, counting this one even before its presence key is seen."""
    return len(presence) + (0 if instance in presence else 1)


class ClaimKind(enum.Enum):
    """How a split comes to be claimed, in priority order (lower claims first)."""

    CREATE = 0
    """Never owned: no lease, no owner, epoch 0."""
    RELEASED = 1
    """Handed back cleanly (owner cleared): no lease, no owner, epoch > 0."""
    RECLAIM = 2
    """A live lease in this worker's own name: a restarted predecessor with the same id."""
    EXPIRED = 3
    """The owner died: no lease, but the record still names an owner."""

    @property
    def consumes_attempt(self) -> bool:
        """Whether this claim ends a tenancy non-gracefully.

        It then counts an attempt when that tenancy advanced nothing: see
        :func:`attempts_after`.
        """
        return self in (ClaimKind.RECLAIM, ClaimKind.EXPIRED)


@attrs.frozen
class SplitFacts:
    """What :func:`claim_candidates` needs to know about one split."""

    status: Status
    owner: str | None
    epoch: int
    attempts: int
    lease_owner: str | None
    """Owner named by the live lease, or None when no lease is live."""
    has_spec: bool
    advanced: bool = False
    """Whether the last tenancy moved the watermark (its death then charges no attempt)."""


FAIL: Literal["fail"] = "fail"
"""The end of a tenancy by an explicit ``fail`` (not a claim): see :func:`attempts_after`."""


def attempts_after(end: ClaimKind | Literal["fail"], attempts: int, advanced: bool) -> int:
    """A split's attempt count once the end of its tenancy is charged: the fair-blame rule.

    ``end`` is how the tenancy ended, as the next claim finds it (a :class:`ClaimKind`), or
    :data:`FAIL`; ``attempts`` and ``advanced`` are the freshest progress record's. An explicit
    ``fail`` always charges one. Of the claims, only a takeover from a dead owner (an expiry,
    or a restarted predecessor reclaiming its own lease) is a candidate, and only when that
    owner's tenancy moved the watermark not at all: a crash-looping split dies before it
    commits, while a healthy split on a crashing worker keeps moving forward and must never be
    quarantined for its hosts' deaths. Graceful claims (never owned, handed back) never charge.
    """
    if not isinstance(end, ClaimKind):
        return attempts + 1  # FAIL
    return attempts + int(end.consumes_attempt and not advanced)


def exhausts_attempts(
    end: ClaimKind | Literal["fail"], attempts: int, advanced: bool, max_attempts: int
) -> bool:
    """Whether charging ``end`` (see :func:`attempts_after`) reaches ``max_attempts``.

    The split is then quarantined instead. An end charged nothing never quarantines, even on a
    record already at the cap: only a charged end is evidence of poison.
    """
    after = attempts_after(end, attempts, advanced)
    return after > attempts and after >= max_attempts


@attrs.frozen
class Candidate:
    """A split this worker may act on: claim it, or (out of attempts) quarantine it."""

    split: str
    kind: ClaimKind
    quarantine: bool
    """True when this claim would reach ``max_attempts``: park the split instead."""


def claim_candidates(
    splits: Iterable[tuple[str, SplitFacts]],
    *,
    held: Collection[str],
    instance: str,
    max_attempts: int,
) -> list[Candidate]:
    """Every split this worker may act on, ordered by (kind priority, split id).

    Whether it *should* claim is the assignment's call; quarantines need no assignment.
    Graceful kinds never quarantine: a clean hand-back is no evidence of poison.
    """
    out: list[Candidate] = []
    for split, facts in splits:
        if facts.status is not Status.RUNNABLE or split in held:
            continue
        if facts.lease_owner is not None:
            if facts.lease_owner != instance:
                continue  # a live foreign lease: someone holds it
            kind = ClaimKind.RECLAIM
        elif facts.owner is None:
            kind = ClaimKind.CREATE if facts.epoch == 0 else ClaimKind.RELEASED
        else:
            kind = ClaimKind.EXPIRED
        if exhausts_attempts(kind, facts.attempts, facts.advanced, max_attempts):
            # Quarantine writes only the progress record, so it needs no spec.
            out.append(Candidate(split, kind, quarantine=True))
        elif facts.has_spec:
            out.append(Candidate(split, kind, quarantine=False))
    out.sort(key=lambda c: (c.kind.value, c.split))
    return out


@attrs.frozen
class Placement:
    """What :func:`desired_assignment` needs to know about one assignable split."""

    weight: int
    owner: str | None
    """The current owner: the live lease's owner, else the progress record's, else None."""
    locality: str = ""
    """The split's affinity: a locality prefix its workers should have ("" for none; only
    :func:`spate._core.placement.place` reads it)."""


class MoveSource(Protocol):
    """What :func:`best_transfer` searches: a group's splits indexed by weight."""

    def best_move(self, gap: int) -> tuple[int, int, str, int] | None:
        """The best split to move across a load gap, as (gain, hash, id, weight)."""
        ...


Transfer: TypeAlias = tuple[str, str, tuple[int, int, str, int]]
"""(target, source, (gain, hash, split, weight)) of one improving move."""


def best_transfer(
    groups: Sequence[str],
    load: Mapping[str, int],
    count: Mapping[str, int],
    cap: Mapping[str, int],
    bins: Mapping[str, MoveSource],
) -> Transfer | None:
    """The one move that lowers imbalance most between ``groups`` (members or domains), or None.

    The gain of a move falls as the target's load rises, so the least-loaded group with spare
    budget (ties: first by name) is every split's best target; the source is the heavier group
    whose best split gains most (ties: by hash, then id). Every placement pass (the batch
    balance, the domain spread, and the incremental index replaying them) takes its moves from
    here, so they agree move for move.
    """
    targets = [g for g in groups if count[g] < cap[g]]
    if not targets:
        return None
    target = min(targets, key=lambda g: (load[g], g))
    best: tuple[int, int, str, int] | None = None
    source = ""
    for g in groups:
        gap = load[g] - load[target]
        if g == target or gap <= 1:
            continue
        option = bins[g].best_move(gap)
        if option is not None and (best is None or option[:3] > best[:3]):
            best, source = option, g
    if best is None:
        return None
    return target, source, best


class WeightBins:
    """The movable splits of one bin (a member or a domain), indexed by weight.

    Every placement's improve passes search it (see :func:`best_transfer`).
    """

    def __init__(self, entries: Iterable[tuple[int, int, str]] = ()) -> None:
        self.by_weight: dict[int, list[tuple[int, str]]] = {}  # weight -> (hash, id), see _sorted
        # Keys added to each group since it was last read, merged in at the next read (see
        # merge_sorted): a plan lands thousands of splits in one bin before anything reads it.
        self._added: dict[int, list[tuple[int, str]]] = {}
        for weight, h, split in entries:
            self._added.setdefault(weight, []).append((h, split))
        for weight in self._added:
            self.by_weight[weight] = []
        self.weights = sorted(self.by_weight)  # distinct weights, ascending

    def _sorted(self, weight: int) -> list[tuple[int, str]]:
        group = self.by_weight[weight]
        added = self._added.pop(weight, None)
        if added:
            merge_sorted(group, added)
        return group

    def add(self, weight: int, key: tuple[int, str]) -> None:
        """Put the split ``key`` (hash, id) of ``weight`` in the bin."""
        if weight not in self.by_weight:
            bisect.insort(self.weights, weight)
            self.by_weight[weight] = []
        self._added.setdefault(weight, []).append(key)

    def remove(self, weight: int, key: tuple[int, str]) -> None:
        """Take the split ``key`` (hash, id) of ``weight`` out of the bin."""
        group = self._sorted(weight)
        group.pop(bisect.bisect_left(group, key))
        if not group:
            del self.by_weight[weight]
            self.weights.pop(bisect.bisect_left(self.weights, weight))

    def best_move(self, gap: int) -> tuple[int, int, str, int] | None:
        """The split whose move across a load gap lowers imbalance most, as (gain, hash, id, w).

        A move of weight ``w`` is admissible when ``w < gap``, and gains ``w * (gap - w)``:
        concave in ``w`` with its peak at ``gap / 2``, so only the two weights around the peak
        can be best.
        """
        best: tuple[int, int, str, int] | None = None
        i = bisect.bisect_right(self.weights, gap // 2)
        for j in (i - 1, i):
            if 0 <= j < len(self.weights):
                w = self.weights[j]
                if w < gap:
                    h, split = self._sorted(w)[-1]
                    option = (w * (gap - w), h, split, w)
                    if best is None or option[:3] > best[:3]:
                        best = option
        return best


def desired_assignment(
    members: Mapping[str, int],
    splits: Mapping[str, Placement],
    *,
    reserved: Collection[str] = (),
    default_cap: int,
    seed: int,
) -> dict[str, tuple[str, ...]]:
    """The leader's placement: member -> sorted split ids (splits in no list are the queue).

    ``members`` maps each live instance to its advertised lane budget (0 or less means
    "use ``default_cap``"); ``splits`` holds the assignable splits (runnable, spec seen);
    ``reserved`` splits are withheld (their owner's grace window is open). Deterministic in
    its arguments and independent of who computes it; a fixpoint, so a balanced fleet maps to
    itself and publishes nothing.

    Three passes: *sticky* (a split stays with its current owner while that member is under
    its cap, heaviest first), *fill* (each remaining split, heaviest first, to the member with
    spare budget and the least load, ties by member hash), *improve* (repeatedly the single
    move that most lowers the sum of squared loads, until none does).
    """
    if not members:
        return {}
    names = sorted(members)
    cap = {m: max(1, members[m] if members[m] > 0 else default_cap) for m in names}
    member_hash = {m: stable_hash_str(seed, m) for m in names}
    load = dict.fromkeys(names, 0)
    placed: dict[str, list[str]] = {m: [] for m in names}
    weight_of: dict[str, int] = {}

    pool = sorted(
        (
            (max(1, p.weight), split, p.owner)
            for split, p in splits.items()
            if split not in reserved
        ),
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

    spare = [(load[m], member_hash[m], m) for m in names if len(placed[m]) < cap[m]]
    heapq.heapify(spare)
    for weight, split in unplaced:
        if not spare:
            break  # every member is at its cap: the rest is the queue
        _, h, member = heapq.heappop(spare)
        placed[member].append(split)
        load[member] += weight
        if len(placed[member]) < cap[member]:
            heapq.heappush(spare, (load[member], h, member))

    _improve(names, cap, load, placed, weight_of, seed)
    return {m: tuple(sorted(placed[m])) for m in names}


def _improve(
    names: list[str],
    cap: dict[str, int],
    load: dict[str, int],
    placed: dict[str, list[str]],
    weight_of: dict[str, int],
    seed: int,
) -> None:
    count = {m: len(placed[m]) for m in names}
    bins = {m: WeightBins() for m in names}
    members_of: dict[str, set[str]] = {m: set(placed[m]) for m in names}
    split_hash: dict[str, int] = {}
    for m in names:
        for split in placed[m]:
            split_hash[split] = stable_hash_str(seed, split)
            bins[m].add(weight_of[split], (split_hash[split], split))
    for _ in range(MAX_IMPROVING_MOVES):
        step = best_transfer(names, load, count, cap, bins)
        if step is None:
            break
        target, source, (_, h, split, weight) = step
        bins[source].remove(weight, (h, split))
        bins[target].add(weight, (h, split))
        members_of[source].discard(split)
        members_of[target].add(split)
        load[source] -= weight
        load[target] += weight
        count[source] -= 1
        count[target] += 1
    for m in names:
        placed[m] = list(members_of[m])
