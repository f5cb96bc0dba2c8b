"""Which hot splits a round asks to split (rule 5 of the balance round).

A split whose load alone exceeds ``split_factor`` times the mean worker load is asked, and the
pieces of a split asked before (its residuals, however deep) are asked again while one alone
is too heavy for the roomiest worker's band. Pure: no Trio, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spate._core.balance.model import BalanceConfig, BalanceSplit

__all__ = ["split_requests"]


def split_requests(
    config: BalanceConfig,
    round_: int,
    splitting: Mapping[str, int],
    names: Sequence[str],
    hottest: Mapping[str, float],
    groups: Mapping[str, list[BalanceSplit]],
    total: float,
    roomiest: float,
) -> tuple[tuple[str, ...], dict[str, int]]:
    """The hot splits to ask, heaviest first, and the next state's memory of pieces.

    ``splitting`` is this state's memory (piece -> the round it was last seen), ``roomiest``
    the largest worker's share by capacity. Costs O(1) per worker unless a split is hot or
    pieces are remembered; then one pass over the splits to find the residuals.
    """
    high = config.split_factor * total / len(names)
    # the most any worker's band holds: a heavier piece keeps its holder over the band
    low = min(high, (1 + config.load_band) * roomiest)
    remembered = {
        split: last for split, last in splitting.items() if round_ - last <= config.cooldown_rounds
    }
    hot = [s for n in names if hottest[n] > high for s in groups[n] if s.trusted and s.load > high]
    if not remembered and not hot:
        return (), remembered
    pieces = set(remembered)
    pieces.update(s.id for s in hot)
    children: dict[str, list[str]] = {}
    stale: set[str] = set()
    for group in groups.values():
        for s in group:
            if s.parent:
                children.setdefault(s.parent, []).append(s.id)
                if not s.trusted:
                    stale.add(s.parent)
    stack = list(pieces)
    while stack:  # the residuals of pieces are pieces, however deep
        for child in children.get(stack.pop(), ()):
            if child not in pieces:
                pieces.add(child)
                stack.append(child)
    asked: list[tuple[float, str]] = []
    for n in names:
        for s in groups[n]:
            if s.id not in pieces:
                continue
            if not s.trusted or s.id in stale:
                # not yet measured, or split since its load was: the smoothed load still
                # counts the work a residual took (the residual is measured within a
                # round or two), and asking on it would cut a piece already small enough
                remembered[s.id] = round_
            elif s.load > low:
                remembered[s.id] = round_
                asked.append((s.load, s.id))
    return tuple(split for _, split in sorted(asked, key=lambda t: (-t[0], t[1]))), remembered
