"""The vocabulary of placement, and the one move every placement pass takes.

- :class:`Worker`, :class:`Placement` — what placement knows of a live worker and of an
  assignable split.
- :func:`validate_locality`, :func:`domain_of`, :func:`affinity_matches` — localities, failure
  domains and affinities.
- :func:`best_transfer` over :class:`WeightBins` — the single move that lowers imbalance most
  between workers or domains, within a :class:`Band` when one is given (the balance of
  workers: a running split moves only for a real imbalance, never for exact balance).

The leader's placement itself is :class:`spate._core.placement.index.PlacementIndex`; what it
puts in each failure domain is :mod:`spate._core.placement.report`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeAlias

import attrs

from spate._core.placement.split_load import split_load
from spate._errors import ConfigError

__all__ = [
    "BAND_PERCENT",
    "INSORT_AT_MOST",
    "MAX_IMPROVING_MOVES",
    "MAX_LOCALITY_LENGTH",
    "Band",
    "Placement",
    "Transfer",
    "WeightBins",
    "Worker",
    "affinity_matches",
    "best_transfer",
    "domain_of",
    "merge_sorted",
    "validate_locality",
]

MAX_IMPROVING_MOVES = 4096
"""Backstop on the improve pass (each move strictly lowers the sum of squared loads, so the
pass ends on its own; this bound only caps pathological inputs)."""

BAND_PERCENT = 10
"""Half-width of the balance band, in percent of the mean load (KCL 3 and Dicer use ±10%)."""

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
class Worker:
    """What placement needs to know about one live worker."""

    cap: int
    """Advertised lane budget (0 or less means the default)."""
    locality: str = ""
    """Failure-domain path, coarsest tier first ("" when unknown)."""


@attrs.frozen
class Placement:
    """What placement needs to know about one assignable split."""

    weight: int
    owner: str | None
    """The current owner: the live lease's owner, else the progress record's, else None."""
    locality: str = ""
    """The split's affinity: a locality prefix its workers should have ("" for none; honoured
    only when some worker has a locality)."""
    load: int = attrs.field(
        default=attrs.Factory(lambda self: split_load(self.weight), takes_self=True)
    )
    """What the split puts on a worker, the quantity placement balances (by default
    :func:`~spate._core.placement.split_load.split_load` of its weight)."""


class MoveSource(Protocol):
    """What :func:`best_transfer` searches: a group's splits indexed by weight."""

    def best_move(self, gap: int) -> tuple[int, int, str, int] | None:
        """The best split to move across a load gap, as (gain, hash, id, weight)."""
        ...


Transfer: TypeAlias = tuple[str, str, tuple[int, int, str, int]]
"""(target, source, (gain, hash, split, weight)) of one improving move."""


@attrs.frozen
class Band:
    """The loads a balance leaves alone: within ``max(10% of the mean, slack)`` of the mean.

    A load is *over* the band when it exceeds the group's mean load by at least that much,
    *under* it when it falls short by as much. The slack is the lightest movable split's
    weight, so that with equal weights a small group still ends within one split of its mean
    (4 splits on 2 workers end 2 and 2, not 3 and 1), while a large one is left alone within
    10% (KCL 3's band): moving a running split costs a drain, and replays its uncommitted
    tail when the drain is forced, which exact balance is not worth. Integer arithmetic: a
    leader and the reference model must agree to the unit.
    """

    total: int
    """The group's summed load."""
    size: int
    """Workers (or domains) in the group."""
    slack: int
    """The least excess that counts (the lightest movable split's weight)."""

    @classmethod
    def of(
        cls, groups: Sequence[str], load: Mapping[str, int], bins: Mapping[str, WeightBins]
    ) -> Band:
        """The band of ``groups`` around their mean load, its slack read from their bins."""
        lightest = min((bins[g].weights[0] for g in groups if bins[g].weights), default=1)
        return cls(sum(load[g] for g in groups), len(groups), lightest)

    def over(self, load: int) -> bool:
        """Whether ``load`` lies above the band (``size`` times the excess, to stay exact)."""
        excess = load * self.size - self.total
        return excess * 100 >= self.total * BAND_PERCENT and excess >= self.slack * self.size

    def under(self, load: int) -> bool:
        """Whether ``load`` lies below the band."""
        shortfall = self.total - load * self.size
        return shortfall * 100 >= self.total * BAND_PERCENT and shortfall >= self.slack * self.size


def best_transfer(
    groups: Sequence[str],
    load: Mapping[str, int],
    count: Mapping[str, int],
    cap: Mapping[str, int],
    bins: Mapping[str, MoveSource],
    band: Band | None = None,
) -> Transfer | None:
    """The one move that lowers imbalance most between ``groups`` (workers or domains), or None.

    The gain of a move falls as the target's load rises, so the least-loaded group with spare
    budget (ties: first by name) is every split's best target; the source is the heavier group
    whose best split gains most (ties: by hash, then id). With a ``band``, a move is taken only
    for a load outside it: any source when the target lies under the band, else only sources
    over it (so a pass ends once every load is inside, or no split fits a gap). Every improve
    pass (the leader's index spreading domains and balancing workers, and the reference model
    that the tests hold it equal to) takes its moves from here, so they agree move for move.
    """
    targets = [g for g in groups if count[g] < cap[g]]
    if not targets:
        return None
    target = min(targets, key=lambda g: (load[g], g))
    if band is not None and not band.under(load[target]):
        groups = [g for g in groups if band.over(load[g])]
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
    """The movable splits of one bin (a worker or a domain), indexed by weight.

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

    def last_of_lightest(self) -> tuple[int, str]:
        """The (weight, id) of the lightest split, the highest id among equals (non-empty bin).

        The split a sticky pass keeps last: what a full worker gives up to an affinity.
        """
        weight = self.weights[0]
        return weight, max(split for _, split in self._sorted(weight))

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
