"""Each worker's mean, the load a round measures it against (rule 2 of the balance round).

An equal share per failure domain, by capacity inside it; a worker whose heaviest split
outweighs its capacity share has that split's load as its mean (no placement does better:
the bound is the larger of the mean and the heaviest split), and the rest is shared among the
others. Pure: no Trio, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from spate._core.balance.model import BalanceWorker

__all__ = ["Means", "worker_means"]


@attrs.frozen
class Means:
    """A round's means, and what the band reads beside them."""

    target: dict[str, float]
    """Each worker's mean."""
    roomiest: float
    """The largest worker's share of the job by capacity (before heavy holders are set aside)."""
    heavy: set[str]
    """Workers whose mean is their own heavy split."""


def worker_means(
    names: Sequence[str],
    domain: Mapping[str, str],
    workers: Mapping[str, BalanceWorker],
    hottest: Mapping[str, float],
    total: float,
) -> Means:
    """Each worker's mean: an equal share of ``total`` per domain, by capacity inside it."""
    capacity: dict[str, float] = {}
    for n in names:
        d = domain[n]
        capacity[d] = capacity.get(d, 0.0) + workers[n].capacity
    share = total / len(capacity)
    in_domain: dict[str, list[str]] = {}
    for n in names:
        in_domain.setdefault(domain[n], []).append(n)
    target: dict[str, float] = {}
    heavy: set[str] = set()
    for group in in_domain.values():
        target.update(_fill(group, share, workers, hottest, heavy))
    # the largest share by capacity, before _fill sets heavy splits' holders aside
    roomiest = max(share * workers[n].capacity / capacity[domain[n]] for n in names)
    return Means(target, roomiest, heavy)


def _fill(
    names: list[str],
    share: float,
    workers: Mapping[str, BalanceWorker],
    hottest: Mapping[str, float],
    heavy: set[str],
) -> dict[str, float]:
    """Water-fill ``share`` over ``names`` by capacity, around splits too heavy to share.

    A worker whose heaviest split outweighs its capacity share has that split's load as its
    mean, and is added to ``heavy``; the rest of the load is shared among the others. Without
    it the band would see such a worker as over forever, and its neighbours as under.
    """
    order = sorted(names, key=lambda n: (-hottest[n] / workers[n].capacity, n))
    rest, capacity = share, sum(workers[n].capacity for n in names)
    target: dict[str, float] = {}
    for n in order:
        if rest <= 0 or hottest[n] * capacity <= rest * workers[n].capacity:
            break
        target[n] = hottest[n]
        heavy.add(n)
        rest -= hottest[n]
        capacity -= workers[n].capacity
    for n in names:
        if n not in target:
            # a domain whose heavy splits outweigh its share: the rest have no load to
            # share, and a mean of (almost) 0 makes whatever they hold an excess
            target[n] = max(rest, share * 1e-9) * workers[n].capacity / capacity
    return target
