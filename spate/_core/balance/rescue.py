"""Rule 7 and 8 of the round: a worker no move within the bands helps is rescued.

Each of the hottest donors' heaviest splits is tried on the coldest workers, alone (if the
receiver has a free lane) or in exchange for one or more of the receiver's lighter splits,
and the step that lowers the potential most is made, again while one is worth it
(:mod:`.planner` states the rules). Pure: no Trio, no I/O, no clock.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence

import attrs

from spate._core.balance.candidates import Candidates, prefixes
from spate._core.balance.model import Move
from spate._core.balance.reading import EXCHANGE_CHOICES, FleetReading

__all__ = ["RESCUE_DONORS", "RESCUE_RECEIVERS", "RESCUE_SPLITS", "rescue"]

RESCUE_DONORS = 2
"""Rule 7 tries the hottest this many workers over their band as donors..."""
RESCUE_SPLITS = 16
"""...each one's this many heaviest movable splits..."""
RESCUE_RECEIVERS = 6
"""...on this many of the coldest workers (bounded: a round's cost stays O(log n) a move)."""

Backs = list[tuple[float, str]]
"""The receiver's splits a rescue step gives back, as (load, id)."""


@attrs.frozen
class _Step:
    donor: str
    receiver: str
    load: float
    """The given split's load."""
    split: str
    backs: Backs


def rescue(
    fleet: FleetReading,
    candidates: dict[str, Candidates],
    budget: float,
    moved_load: float,
    domain_load: dict[str, float],
    blast_cap: float,
    made: Sequence[Move],
) -> list[Move]:
    """Rule 7: moves for a worker still over its band that no move within the bands helps.

    Here a receiver may end above its band and a donor below its mean, and the potential, not
    the churn price, is the judge (a receiver pushed over sheds its small splits the next
    round: a two-step shed). The round's budget holds, but for rule 8: a round that has moved
    nothing (``made``), and finds no such step within its budget, makes the best one that
    costs more, alone (without it a worker whose only helpful step outweighs the budget, as
    one holding two splits heavier than it together, stays over its band for good). The
    cooldown and the memory of moves hold. Updates ``fleet``'s loads and counts, and
    ``domain_load``, as it moves.
    """
    load, count, domain = fleet.load, fleet.count, fleet.domain
    out: list[Move] = []
    while budget - moved_load > 0:
        best = _best_step(fleet, candidates, budget - moved_load, domain_load, blast_cap)
        alone = False
        if best is None and not made and not out:
            # rule 8: the budget never strands a worker over its band
            best = _best_step(fleet, candidates, math.inf, domain_load, blast_cap)
            alone = True
        if best is None:
            break
        donor, receiver, backs = best.donor, best.receiver, best.backs
        _drop(candidates[donor], best.split, best.load)
        out.append(
            Move(
                best.split,
                donor,
                receiver,
                best.load,
                exchange=backs[0][1] if backs else "",
                rescue=True,
            )
        )
        net = best.load
        moved_load += best.load
        for returned_load, returned in backs:
            _drop(candidates[receiver], returned, returned_load)
            out.append(
                Move(returned, receiver, donor, returned_load, exchange=best.split, rescue=True)
            )
            net -= returned_load
            moved_load += returned_load
        count[donor] += len(backs) - 1
        count[receiver] += 1 - len(backs)
        load[donor] -= net
        load[receiver] += net
        domain_load[domain[donor]] -= net
        domain_load[domain[receiver]] += net
        if alone:
            break  # the one step past the budget is the round's only one
    return out


def _best_step(
    fleet: FleetReading,
    candidates: dict[str, Candidates],
    room: float,
    domain_load: dict[str, float],
    blast_cap: float,
) -> _Step | None:
    """The best move or exchange of rule 7 costing at most ``room``."""
    load, hi, target, workers = fleet.load, fleet.hi, fleet.target, fleet.workers
    eps = fleet.config.min_gain
    donors = sorted(
        (n for n in fleet.names if load[n] > hi[n] + fleet.slack),
        key=lambda n: (-(load[n] - hi[n]) / target[n], n),
    )[:RESCUE_DONORS]
    receivers = sorted(fleet.names, key=lambda n: (load[n] / target[n], n))
    best: tuple[float, float] | None = None
    chosen = None
    for donor in donors:
        if donor not in candidates:
            candidates[donor] = fleet.movable(donor)
        heaviest = heapq.nlargest(  # each group is sorted: its heaviest are its last
            RESCUE_SPLITS,
            (
                (x, split, key)
                for key, group in candidates[donor].items()
                for x, split in group[-RESCUE_SPLITS:]
            ),
        )
        for receiver in receivers[: RESCUE_RECEIVERS + 1]:
            if receiver == donor:
                continue
            keys = prefixes(workers[receiver].locality)
            if receiver not in candidates:
                candidates[receiver] = fleet.movable(receiver)
            back_keys = prefixes(workers[donor].locality)
            offered = _offered(fleet, candidates[receiver], back_keys, donor)
            free = fleet.count[receiver] < workers[receiver].lanes
            for given_load, split, key in heaviest:
                if key not in keys or fleet.moves_back(split, given_load, receiver):
                    continue
                for backs in _backs_options(fleet, donor, receiver, given_load, offered, free):
                    returned_load = math.fsum(b[0] for b in backs)
                    net, cost = given_load - returned_load, given_load + returned_load
                    if net <= 0 or cost > room:
                        continue
                    if fleet.count[donor] + len(backs) - 1 > workers[donor].lanes:
                        continue  # the donor takes several back only into free lanes
                    if fleet.domain[receiver] != fleet.domain[donor] and (
                        domain_load[fleet.domain[receiver]] + net > blast_cap
                    ):
                        continue
                    gain = fleet.gain(donor, receiver, net)
                    if gain < eps * (1 - 1e-9):
                        continue
                    if best is None or (gain, -cost) > best:
                        best = (gain, -cost)
                        chosen = _Step(donor, receiver, given_load, split, backs)
    return chosen


def _offered(
    fleet: FleetReading, groups: Candidates, keys: tuple[str, ...], donor: str
) -> list[tuple[float, str]]:
    """The receiver's splits ``donor`` may take back, ascending.

    Those lighter than a given split are a prefix. Not to be changed: it may be one of
    ``groups`` itself.
    """
    present = [groups[key] for key in keys if groups.get(key)]
    if fleet.state.left:
        return sorted(
            (y, back)
            for group in present
            for y, back in group
            if not fleet.moves_back(back, y, donor)
        )
    if len(present) == 1:
        return present[0]  # one sorted group: no copy
    return sorted([entry for group in present for entry in group])


def _backs_options(
    fleet: FleetReading,
    donor: str,
    receiver: str,
    given_load: float,
    offered: list[tuple[float, str]],
    free: bool,
) -> list[Backs]:
    """What the receiver may give back for a split of ``given_load``: each option a list.

    Nothing (into a ``free`` lane); one of its splits lighter than the given one, heaviest
    first; or, one for many, its heaviest lighter splits while they fit the net that brings
    the donor into its band and keeps the receiver in its. ``offered`` is ascending.
    """
    load, hi = fleet.load, fleet.hi
    options: list[Backs] = [[]] if free else []
    # the splits lighter than the given one, heaviest first, by slices of the prefix
    below = bisect.bisect_left(offered, (given_load, ""))
    options.extend([o] for o in offered[: min(below, EXCHANGE_CHOICES)][::-1])
    most = given_load - (load[donor] - hi[donor])
    least_back = given_load - max(0.0, hi[receiver] - load[receiver])
    group: Backs = []
    total = 0.0
    for y, back in offered[max(0, below - 4 * EXCHANGE_CHOICES) : below][::-1]:
        if total + y <= most:
            group.append((y, back))
            total += y
            if total >= least_back or len(group) == EXCHANGE_CHOICES:
                break
    if len(group) > 1:
        options.append(group)
    return options


def _drop(groups: Candidates, split: str, load: float) -> None:
    """Take ``split`` (of ``load``) out of ``groups``, whichever group holds it."""
    for group in groups.values():
        i = bisect.bisect_left(group, (load, split))
        if i < len(group) and group[i] == (load, split):
            group.pop(i)
            return
