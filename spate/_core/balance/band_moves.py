"""The round's greedy (rules 3 and 4): the hottest donor first, to the coldest receiver.

Each time, the hottest donor (by load over mean) gives the coldest receiver that can take one
of its splits the largest split that fits every limit of rule 3 (largest: the fewest drains
for the load moved), into a free lane or in exchange (:mod:`.exchange`); a worker still over
its band once no such move is left is rescued (:mod:`.rescue`). :mod:`.planner` states the
rules. Pure: no Trio, no I/O, no clock.
"""

from __future__ import annotations

import bisect
import heapq
import math

from spate._core.balance.candidates import Candidates, find, heaviest, prefixes
from spate._core.balance.exchange import exchange, worthless_net
from spate._core.balance.model import Move
from spate._core.balance.reading import FleetReading
from spate._core.balance.rescue import rescue

__all__ = ["band_moves"]


def band_moves(fleet: FleetReading, total: float) -> tuple[Move, ...]:
    """The round's moves, for a job of load ``total``; ``fleet``'s loads end moved."""
    return _Greedy(fleet, total).run()


class _Greedy:
    """The working state of the greedy: who gives, who takes, what moved so far."""

    def __init__(self, fleet: FleetReading, total: float) -> None:
        self.fleet = fleet
        self.load, self.target = load, target = fleet.load, fleet.target
        self.band = fleet.config.load_band
        self.budget = fleet.config.max_moved_load * total
        self.excess = {n: load[n] - target[n] for n in fleet.names}
        self.shed = dict.fromkeys(fleet.names, 0.0)
        """What each donor gave so far this round (net of what it took back)."""
        self.domain_load: dict[str, float] = {}
        for n in fleet.names:
            domain = fleet.domain[n]
            self.domain_load[domain] = self.domain_load.get(domain, 0.0) + load[n]
        self.blast_cap = max(self.domain_load.values())
        """No move lifts a receiving domain's load past the largest the round began with."""
        self.receivers = sorted((self.ratio(n), n) for n in fleet.names if load[n] < target[n])
        """The workers under their mean (a receiver without a free lane takes in exchange),
        coldest first."""
        self.entry = {n: key for key, n in self.receivers}
        """A receiver's entry in the sorted list."""
        self.donors = [(-self.ratio(n), n) for n in fleet.names if self.excess[n] > 0]
        """The workers over their mean, hottest first (a heap)."""
        heapq.heapify(self.donors)
        self.candidates: dict[str, Candidates] = {}
        """Each worker's movable splits, once it gave or was asked for one."""
        self.moves: list[Move] = []
        self.moved_load = 0.0

    def ratio(self, worker: str) -> float:
        return self.load[worker] / self.target[worker]

    def over(self, worker: str) -> bool:
        return self.ratio(worker) > 1 + self.band

    def under(self, worker: str) -> bool:
        return self.ratio(worker) < 1 - self.band

    def wanting(self, worker: str) -> bool:
        """Under the band, or new and under its mean: new workers are filled to the mean."""
        return self.under(worker) or (
            worker in self.fleet.new and self.load[worker] < self.target[worker]
        )

    def run(self) -> tuple[Move, ...]:
        fleet, donors = self.fleet, self.donors
        while donors and self.budget - self.moved_load > 0:
            _, donor = heapq.heappop(donors)
            if not self.over(donor) and not (
                (self.receivers and self.under(self.receivers[0][1]))
                or any(self.wanting(n) for n in fleet.new)
            ):
                break  # donors come hottest first: no later one is over the band either
            chosen = self._choose(donor)
            if chosen is not None:
                self._make(donor, *chosen)
            # else: this donor has nothing any receiver can take: done with it
        if self.budget - self.moved_load > 0 and any(
            fleet.load[n] > fleet.hi[n] + fleet.slack for n in fleet.names
        ):
            self.moves.extend(
                rescue(
                    fleet,
                    self.candidates,
                    self.budget,
                    self.moved_load,
                    self.domain_load,
                    self.blast_cap,
                    self.moves,
                )
            )
        return tuple(self.moves)

    def _choose(self, donor: str) -> tuple[str, Move, Move | None] | None:
        """The coldest receiver that takes one of ``donor``'s splits, the move and its pair."""
        fleet, config, candidates = self.fleet, self.fleet.config, self.candidates
        load, target = self.load, self.target
        donor_over = self.over(donor)
        for _, receiver in self.receivers:
            if not (donor_over or self.wanting(receiver)):
                continue
            share = 1.0 if receiver in fleet.new else config.excess_share
            allowance = share * self.excess[donor] - self.shed[donor]
            if allowance <= 0:
                break  # the donor gave its share of this round (to this receiver, and so to
                # every later one: only a new worker's share is larger, and they are not
                # ordered first)
            shortfall = target[receiver] - load[receiver]
            limit = self._limit(donor, receiver, shortfall)
            if limit <= 0:
                continue
            if donor not in candidates:
                candidates[donor] = fleet.movable(donor)
            keys = prefixes(fleet.workers[receiver].locality)
            if heaviest(candidates[donor], keys) <= worthless_net(fleet, donor, receiver):
                # whatever it gives nets at most its heaviest split, alone or in exchange:
                # not worth it, known before any split is looked for (in a skewed fleet most
                # tries end here once the donors' big splits are gone)
                continue
            room = self.budget - self.moved_load
            if fleet.count[receiver] < fleet.workers[receiver].lanes:
                given = self._give(donor, receiver, keys, allowance, min(limit, room))
                if given is not None:
                    return receiver, Move(given[1], donor, receiver, given[0]), None
            pair = exchange(fleet, candidates, donor, receiver, allowance, limit, room, shortfall)
            if pair is not None:
                return receiver, *pair
        return None

    def _limit(self, donor: str, receiver: str, shortfall: float) -> float:
        """What may pass from ``donor`` to ``receiver`` in one move.

        The donor never ends below its mean, the receiver never above its band, and past the
        receiver's mean its distance grows again, so the move removes 2 x shortfall, which
        must beat the churn price; across domains, the blast radius never rises.
        """
        fleet, load, target = self.fleet, self.load, self.target
        price = fleet.config.churn_price
        limit = min(
            load[donor] - target[donor],
            shortfall + self.band * target[receiver],
            math.nextafter(2 * shortfall / price, 0) if price else math.inf,
        )
        domain = fleet.domain[receiver]
        if domain != fleet.domain[donor]:
            limit = min(limit, self.blast_cap - self.domain_load[domain])
        return limit

    def _give(
        self, donor: str, receiver: str, keys: tuple[str, ...], allowance: float, limit: float
    ) -> tuple[float, str] | None:
        """Take out the split :func:`~.candidates.find` finds for ``receiver``, if worth it.

        A split that would go back to the worker it left while its load held still is passed
        over (rule 6), for the next one :func:`~.candidates.find` finds; one not worth its
        move is left.
        """
        fleet, groups = self.fleet, self.candidates[donor]
        passed: list[tuple[str, tuple[float, str]]] = []
        given = None
        while True:
            found = find(groups, keys, allowance, limit)
            if found is None:
                break
            load, split, key, i = found
            if fleet.moves_back(split, load, receiver):
                passed.append((key, groups[key].pop(i)))
                continue
            if fleet.worth(donor, receiver, load):
                groups[key].pop(i)
                given = (load, split)
            break
        for key, entry in passed:
            bisect.insort(groups[key], entry)
        return given

    def _make(self, donor: str, receiver: str, move: Move, back: Move | None) -> None:
        """Make ``move`` (and its exchange's ``back``): the loads, lanes and lists follow."""
        fleet, load, receivers = self.fleet, self.load, self.receivers
        net = move.load - (back.load if back else 0.0)
        self.moves.append(move)
        self.moved_load += move.load
        if back is not None:
            self.moves.append(back)
            self.moved_load += back.load
        else:
            fleet.count[donor] -= 1
            fleet.count[receiver] += 1
        self.shed[donor] += net
        load[donor] -= net
        load[receiver] += net
        self.domain_load[fleet.domain[donor]] -= net
        self.domain_load[fleet.domain[receiver]] += net
        receivers.pop(bisect.bisect_left(receivers, (self.entry[receiver], receiver)))
        if load[receiver] < self.target[receiver]:
            self.entry[receiver] = self.ratio(receiver)
            bisect.insort(receivers, (self.entry[receiver], receiver))
        if load[donor] > self.target[donor]:
            heapq.heappush(self.donors, (-self.ratio(donor), donor))
