"""The placement's affinity step: splits whose owner does not honour their affinity.

The second step of the placement (see :mod:`spate._core.placement.index`). A solve runs it
only when some honoured affinity is loose (its split's owner does not match it, or the split
has no owner) or over its owner's budget; every other solve skips it.

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

from spate._core.placement.state import StickyState
from spate._core.placement.vocabulary import affinity_matches

__all__ = ["AffinityStep"]


class AffinityStep:
    """The affinity step of one index, on its sticky state."""

    def __init__(self, state: StickyState) -> None:
        self._state = state

    def matching(self, affinity: str, matching: dict[str, list[str]]) -> list[str]:
        """The workers whose locality satisfies ``affinity`` (cached in ``matching``)."""
        found = matching.get(affinity)
        if found is None:
            workers = self._state.workers
            found = matching[affinity] = [
                m for m in self._state.names if affinity_matches(affinity, workers[m].locality)
            ]
        return found

    def loose(self, matching: dict[str, list[str]]) -> list[tuple[int, str]]:
        """Splits whose affinity some worker matches but not their owner (or with no owner).

        Sorted by (-weight, id). The sticky step does not keep them on their owner: the
        affinity step places them. (An affinity no worker matches is no affinity at all.)
        """
        inputs = self._state.inputs
        loose = []
        for split in self._state.affine_loose:
            p = inputs[split]
            if self.matching(p.locality, matching):
                loose.append((-p.load, split))
        loose.sort()
        return loose

    def place(
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
        state = self._state
        cap, inputs = state.cap, state.inputs
        for negative, split in loose:
            if state.owner(inputs[split]) is None:
                origin[split] = None  # still among the unowned: kept out of the fill
            else:
                state.take_off(split, -negative, load, count, origin, in_bins=True)
        for negative, split in over_pinned:
            state.take_off(split, -negative, load, count, origin, in_bins=False)
        general: list[tuple[int, str]] = []
        ignored: list[tuple[int, str]] = []
        for negative, split in (*over_pinned, *loose):
            wanted = self.matching(inputs[split].locality, matching)
            target = self._target(wanted, load, count, origin, general)
            if target is None:
                ignored.append((negative, split))
                continue
            final[split] = target
            pinned_now.add(split)
            load[target] -= negative
            count[target] += 1
        for negative, split in ignored:
            owner = state.owner(inputs[split])
            if owner is not None and count[owner] < cap[owner]:
                final[split] = owner
                state.bins_add(owner, -negative, split)
                load[owner] -= negative
                count[owner] += 1
            else:
                general.append((negative, split))
        return general

    def _target(
        self,
        wanted: list[str],
        load: dict[str, int],
        count: dict[str, int],
        origin: dict[str, str | None],
        general: list[tuple[int, str]],
    ) -> str | None:
        """A matching worker with a free lane, making one by evicting an unpinned split."""
        state = self._state
        worker_hash = state.worker_hash
        open_ = [m for m in wanted if count[m] < state.cap[m]]
        if open_:
            return min(open_, key=lambda m: (load[m], worker_hash[m], m))
        # Every match is full: the fullest one holding a split without an honoured affinity
        # gives back the split it would keep last (lightest, then highest id: the end of the
        # sticky order), so the next solve's sticky step makes the same choice. The bins hold
        # exactly those splits.
        bins = state.bins
        donors = [m for m in wanted if bins[m].weights]
        if not donors:
            return None
        donor = max(donors, key=lambda m: (load[m], worker_hash[m], m))
        weight, victim = bins[donor].last_of_lightest()
        origin.setdefault(victim, donor)
        state.bins_remove(donor, weight, victim)
        load[donor] -= weight
        count[donor] -= 1
        general.append((-weight, victim))
        return donor
