"""What a placement puts in each failure domain, and its blast radius.

The leader reports it after every change (from :meth:`PlacementIndex.totals
<spate._core.placement.index.PlacementIndex.totals>`, O(workers)); ``spate.ops`` computes it
for an operator from the published assignments.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import attrs

from spate._core.placement.vocabulary import domain_of

__all__ = ["DomainShare", "PlacementReport", "placement_report", "report_from_totals"]


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
        worker: (len(held), sum(weights.get(s, 1) for s in held))
        for worker, held in assignment.items()
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
    for instance, locality in localities.items():
        d = domain_of(locality, isolation_tier)
        workers[d] = workers.get(d, 0) + 1
        count, held = totals.get(instance, (0, 0))
        splits[d] = splits.get(d, 0) + count
        weight[d] = weight.get(d, 0) + held
    total = sum(weight.values())
    shares = tuple(
        DomainShare(d, workers[d], splits[d], weight[d], weight[d] / total if total else 0.0)
        for d in sorted(workers)
    )
    return PlacementReport(shares, max((s.share for s in shares), default=0.0))
