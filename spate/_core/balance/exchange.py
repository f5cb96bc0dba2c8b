"""An exchange: a donor's split for a lighter one of its receiver's (rule 4 of the round).

A receiver without a free lane, or with no room in its band for any split the donor could
give, takes one in exchange for one of its own lighter splits, the pair judged as one move of
their difference (:mod:`.planner` states the rule). Pure: no Trio, no I/O, no clock.
"""

from __future__ import annotations

import bisect
import math

from spate._core.balance.candidates import Candidates, bound, find, lightest, prefixes
from spate._core.balance.model import Move
from spate._core.balance.reading import EXCHANGE_CHOICES, FleetReading

__all__ = ["exchange", "worthless_net"]


def exchange(
    fleet: FleetReading,
    candidates: dict[str, Candidates],
    donor: str,
    receiver: str,
    allowance: float,
    limit: float,
    budget: float,
    shortfall: float,
) -> tuple[Move, Move] | None:
    """The best exchange of one of ``donor``'s splits for a lighter one of ``receiver``'s.

    Its net load (the difference) keeps every limit of a single move, both loads count
    against the budget, and what it removes must beat the churn price of both. Of the
    receiver's lightest splits (``EXCHANGE_CHOICES``), each paired with the split the donor
    would give for it, the pair whose removal exceeds its price most. Without exchanges a
    fleet whose every lane is full (64 splits on 8 workers of the default ``max_in_flight``
    of 8) could never be balanced, nor a worker holding three 4s next to workers holding 1s
    with 2.75 of room each (no 4 fits; a 4 for a 1 does). The pair is taken out of
    ``candidates``.
    """
    back_keys = prefixes(fleet.workers[donor].locality)
    backs = fleet.lightest_movable(receiver) if receiver not in candidates else None
    if backs is None:
        if receiver not in candidates:
            candidates[receiver] = fleet.movable(receiver)
        backs = lightest(candidates[receiver], back_keys, EXCHANGE_CHOICES)
    given_from = candidates[donor]
    price = fleet.config.churn_price
    give_keys = prefixes(fleet.workers[receiver].locality)
    cut = worthless_net(fleet, donor, receiver)
    if backs and bound(given_from, give_keys, backs[-1][0] + allowance) <= cut:
        # each pair nets less than the split the donor gives, and that is at most the bound
        # (the receiver's splits are the lighter the earlier, and find's choice grows with them)
        return None
    best: tuple[float, tuple[float, str, str, int], tuple[float, str, str]] | None = None
    for back in backs:
        returned_load = back[0]
        room = min(limit, budget - 2 * returned_load)
        if room <= 0:
            break  # heavier ones leave less of the budget still
        found = find(given_from, give_keys, returned_load + allowance, returned_load + room)
        if found is None:
            continue
        given_load = found[0]
        net = given_load - returned_load
        if net <= cut:
            continue  # not worth it, without working out the potential
        value = net + min(net, 2 * shortfall - net) - price * (given_load + returned_load)
        if (
            net > 0
            and value > 0
            and (best is None or value > best[0])
            and fleet.worth(donor, receiver, net)
            and not fleet.moves_back(found[1], given_load, receiver)
            and not fleet.moves_back(back[1], returned_load, donor)
        ):
            best = (value, found, back)
    if best is None:
        return None
    _, (given_load, given, key, i), (returned_load, returned, back_key) = best
    given_from[key].pop(i)
    if receiver not in candidates:
        candidates[receiver] = fleet.movable(receiver)
    group = candidates[receiver][back_key]
    group.pop(bisect.bisect_left(group, (returned_load, returned)))
    return (
        Move(given, donor, receiver, given_load, exchange=returned),
        Move(returned, receiver, donor, returned_load, exchange=given),
    )


def worthless_net(fleet: FleetReading, donor: str, receiver: str) -> float:
    """A net load at or below which no move from ``donor`` to ``receiver`` is worth it.

    (-inf if there is none.) While the donor stays over its band, a net lowers its excess by
    itself and brings it no nearer in; a receiver inside its band gains nothing, and under it
    gains at most the net too and stays out. So a net under ``min_gain`` (receiver inside) or
    half of it (receiver under) is never worth it, with margins far wider than any rounding
    in :meth:`~.reading.FleetReading.gain`: the rule says exactly what
    :meth:`~.reading.FleetReading.worth` says, at a fraction of its cost.
    """
    load, hi, lo, mean = fleet.load, fleet.hi, fleet.lo, fleet.mean
    over, under = load[donor] - hi[donor], lo[receiver] - load[receiver]
    if over <= 0:
        return -math.inf
    scale = 1e-12 * max(
        load[donor], load[receiver], hi[donor], lo[donor], hi[receiver], lo[receiver]
    )
    floor = 1e-6 * mean + scale
    worth = fleet.config.min_gain * mean * (1 - 1e-6) - scale
    if under > 0:
        return min(worth / 2, over - floor, under - floor)
    if fleet.excess(receiver, load[receiver]) == 0:
        return min(worth, over - floor)
    return -math.inf
