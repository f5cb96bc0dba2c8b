"""How one balance round reads the fleet: each worker's splits, load, mean and band.

A part of the round (:mod:`.planner`, whose module text states the rules): its reading of the
splits (rule 1), each worker's mean and band (rule 2), the potential every move must lower
(rule 6), and the splits a donor may give (:data:`~.candidates.Candidates`). The moves
(:mod:`.band_moves`, :mod:`.exchange`, :mod:`.rescue`) change the loads it holds as they are
made. Pure: no Trio, no I/O, no clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence

from spate._core.balance.candidates import Candidates
from spate._core.balance.means import worker_means
from spate._core.balance.model import BalanceConfig, BalanceSplit, BalanceState, BalanceWorker
from spate._core.placement.vocabulary import affinity_matches, domain_of
from spate._errors import ConfigError

__all__ = ["EXCHANGE_CHOICES", "FleetReading"]

EXCHANGE_CHOICES = 8
"""A receiver's lightest splits an exchange considers giving back."""


class FleetReading:
    """One round's reading of the fleet (see the module text); the moves update its loads."""

    def __init__(
        self,
        workers: Sequence[BalanceWorker],
        config: BalanceConfig,
        state: BalanceState,
        round_: int,
        now: float,
    ) -> None:
        self.config = config
        self.state = state
        self.round = round_
        self.now = now
        self.workers = {w.name: w for w in workers}
        if len(self.workers) != len(workers):
            names = sorted(w.name for w in workers)
            dup = next(a for a, b in itertools.pairwise(names) if a == b)
            raise ConfigError(f"worker {dup!r} is listed twice; give each live worker once")
        self.names = sorted(self.workers)
        domains = any(w.locality for w in workers)
        tier = config.isolation_tier
        self.domain = {
            n: domain_of(self.workers[n].locality, tier) if domains else "" for n in self.names
        }
        self.groups: dict[str, list[BalanceSplit]] = {n: [] for n in self.names}
        self.count: dict[str, int] = {}
        """Each worker's splits (the moves keep it up to date: a lane cap counts them)."""
        self.trusted: dict[str, list[BalanceSplit]] = {}
        """Each worker's trusted splits (set by :meth:`read`)."""
        self.loads: dict[str, list[float]] = {}
        """The loads of each worker's trusted splits, in the same order (set by :meth:`read`)."""
        self.affinity: dict[str, bool] = {}
        """Whether any of a worker's trusted splits has an affinity (set by :meth:`read`)."""
        self.lowest: dict[str, float] = {}
        """The lightest of a worker's trusted loads, 1.0 when it has none (set by :meth:`read`)."""
        self.trusted_count = 0
        """The trusted splits of the live workers (set by :meth:`read`)."""
        self._lightest: dict[str, list[tuple[float, str, str]] | None] = {}
        """Memo of :meth:`lightest_movable`."""
        self._plain: dict[str, bool] = {}
        """Memo of :meth:`plain`."""
        self.trusted_load: dict[str, float] = {}
        self.untrusted_weight: dict[str, int] = {}
        self.hottest: dict[str, float] = {}
        self.roomiest = 0.0
        """The largest worker's share of the job by capacity (set by :meth:`means`)."""
        self.heavy: set[str] = set()
        """Workers whose mean is their own heavy split (set by :meth:`means`)."""
        self.split_loads: dict[str, float] = {}
        """The load of each trusted split the memory of moves names (rule 6)."""
        self.present: set[str] = set()
        """Every split of a live worker the memory of moves names."""
        self._cooling: set[str] | None = None
        """The splits within their cooldown (set by the first :meth:`cooling` of the round)."""
        # Set by judge(), once the round acts:
        self.load: dict[str, float] = {}
        """Each worker's load, as the moves made so far leave it."""
        self.target: dict[str, float] = {}
        """Each worker's mean."""
        self.mean = 0.0
        """The mean worker load (the job's load over the workers)."""
        self.new: set[str] = set()
        """The workers that joined within ``new_worker_window``."""
        self.hi: dict[str, float] = {}
        """Each worker's top of its band."""
        self.lo: dict[str, float] = {}
        """Each worker's bottom of its band."""
        self.slack = 0.0
        """What a load may lie outside a band by and still count as inside it (rounding)."""

    # -- reading the splits ------------------------------------------------------------------

    def read(self, splits: Iterable[BalanceSplit]) -> tuple[float, int]:
        """Sum each worker's loads. Returns the trusted splits' summed load, and their count.

        The one pass over every split does as little as it can (group by owner); what a round
        reads of each worker's splits is then taken per worker in C loops, at once, while its
        splits are in the cache (read again later, they cost several times as much); but their
        ids only for a worker that donates (:meth:`movable`): listing an id touches its
        string, a miss in the cache each.
        """
        add = {n: group.append for n, group in self.groups.items()}
        for s in splits:
            put = add.get(s.owner)
            if put is not None:
                put(s)
        left = self.state.left
        for n, group in self.groups.items():
            loads = self.loads[n] = [s.load for s in group if s.trusted]
            # every split trusted (the common case): the group is the trusted list
            trusted = self.trusted[n] = (
                group if len(loads) == len(group) else [s for s in group if s.trusted]
            )
            self.affinity[n] = any([s.affinity for s in trusted])
            if left:  # only the splits the memory of moves names are looked up again
                for s in [s for s in group if s.id in left]:
                    self.present.add(s.id)
                    if s.trusted:
                        self.split_loads[s.id] = s.load
            self.count[n] = len(group)
            self.trusted_load[n] = sum(loads)
            self.hottest[n] = max(loads, default=0.0)
            self.lowest[n] = min(loads, default=1.0)
            self.untrusted_weight[n] = (
                sum([s.weight if s.weight > 1 else 1 for s in group if not s.trusted])
                if len(trusted) < len(group)
                else 0
            )
        self.trusted_count = sum(map(len, self.loads.values()))
        return sum(self.trusted_load.values()), self.trusted_count

    def judged_loads(self, trusted_total: float) -> dict[str, float]:
        """Each worker's load: its trusted splits', its untrusted ones at the mean per weight.

        Empty when no split is trusted: there is no mean to count by. The trusted splits'
        weights are summed only when some split is untrusted (none is counted by the mean
        per weight otherwise).
        """
        if not self.trusted_count:
            return {}
        per_weight = 0.0
        if any(self.untrusted_weight.values()):
            weight = sum(
                [
                    sum([s.weight if s.weight > 1 else 1 for s in self.trusted[n]])
                    for n in self.names
                ]
            )
            per_weight = trusted_total / weight
        return {n: self.trusted_load[n] + per_weight * self.untrusted_weight[n] for n in self.names}

    def means(self, total: float) -> dict[str, float]:
        """Each worker's mean (rule 2), and what it sets: the roomiest share, the heavy."""
        means = worker_means(self.names, self.domain, self.workers, self.hottest, total)
        self.roomiest, self.heavy = means.roomiest, means.heavy
        return means.target

    def judge(self, load: dict[str, float], total: float) -> None:
        """Take ``load`` as each worker's load, and set each one's mean and band.

        The band is the one around its mean, but a new worker is out until it reaches its mean
        (new workers are filled to it), and a worker whose mean is its own heavy split has no
        room above it: it sheds everything else it holds.
        """
        self.load = load
        self.target = target = self.means(total)
        self.mean = total / len(self.names)
        band = self.config.load_band
        new = {
            n
            for n in self.names
            if self.now - self.workers[n].joined_at < self.config.new_worker_window
        }
        self.new = new
        self.hi = {n: target[n] * (1.0 if n in self.heavy else 1 + band) for n in self.names}
        self.lo = {n: target[n] * (1.0 if n in new else 1 - band) for n in self.names}
        self.slack = 1e-9 * self.mean

    # -- the potential (rule 6) --------------------------------------------------------------

    def excess(self, worker: str, load: float) -> float:
        """How far ``load`` lies outside ``worker``'s band (0 inside it)."""
        return max(0.0, load - self.hi[worker], self.lo[worker] - load)

    def outside(self, worker: str, load: float) -> bool:
        """Whether ``load`` lies outside ``worker``'s band, past rounding."""
        return self.excess(worker, load) > self.slack

    def gain(self, donor: str, receiver: str, net: float) -> float:
        """How much moving ``net`` from ``donor`` to ``receiver`` lowers the potential.

        In mean loads. The potential: the summed excess of the workers outside their bands
        over the mean worker load, plus ``min_gain`` for each worker outside. A move is made
        only when it lowers it by ``min_gain`` at least: it either takes 1% of the mean out of
        the excess, or brings a worker into its band without pushing another out. The
        potential is never below 0, so with loads that hold still a fleet makes finitely many
        moves, and none once every worker is within its band (the potential is 0 there).
        """
        eps, slack = self.config.min_gain, self.slack
        # excess() four times, written out (asked for every move a round weighs)
        given, taken = self.load[donor], self.load[receiver]
        hi, lo = self.hi, self.lo
        hi_d, lo_d, hi_r, lo_r = hi[donor], lo[donor], hi[receiver], lo[receiver]
        d0, r0 = max(0.0, given - hi_d, lo_d - given), max(0.0, taken - hi_r, lo_r - taken)
        given, taken = given - net, taken + net
        d1, r1 = max(0.0, given - hi_d, lo_d - given), max(0.0, taken - hi_r, lo_r - taken)
        count = (d0 > slack) + (r0 > slack) - (d1 > slack) - (r1 > slack)
        return (d0 + r0 - (d1 + r1)) / self.mean + eps * count

    def worth(self, donor: str, receiver: str, net: float) -> bool:
        """Whether moving ``net`` from ``donor`` to ``receiver`` lowers the potential enough."""
        return self.gain(donor, receiver, net) >= self.config.min_gain * (1 - 1e-9)

    def moves_back(self, split: str, load: float, to: str) -> bool:
        """Whether moving ``split`` to ``to`` is a move back while its load held still."""
        left = self.state.left.get(split)
        return (
            left is not None
            and left[0] == to
            and abs(load - left[1]) <= self.config.load_band / 2 * max(load, left[1])
        )

    # -- the splits a worker may give ----------------------------------------------------------

    def cooling(self) -> set[str]:
        """The splits within their cooldown, worked out once a round, not once a worker."""
        cooling = self._cooling
        if cooling is None:
            moved, round_, cooldown = self.state.moved, self.round, self.config.cooldown_rounds
            cooling = {split for split, last in moved.items() if round_ - last < cooldown}
            self._cooling = cooling
        return cooling

    def movable(self, worker: str) -> Candidates:
        """The splits of a donor that may move, by affinity key, each group sorted by load.

        Trusted (a guess is never moved), of a load above 0 (moving it buys nothing), out of
        their cooldown.
        """
        if self.plain(worker):
            ids = [s.id for s in self.trusted[worker]]
            return {"": sorted(zip(self.loads[worker], ids, strict=True))}
        cooling = self.cooling()
        trusted = self.trusted[worker]
        # the common case in C loops: no affinity, not cooling; the rest one by one
        if cooling:
            plain = [
                (s.load, s.id)
                for s in trusted
                if s.load > 0 and not s.affinity and s.id not in cooling
            ]
        else:
            plain = [(s.load, s.id) for s in trusted if s.load > 0 and not s.affinity]
        groups: Candidates = {"": plain}
        locality = self.workers[worker].locality
        for s in trusted:
            if s.affinity and s.load > 0 and s.id not in cooling:
                key = s.affinity if affinity_matches(s.affinity, locality) else ""
                groups.setdefault(key, []).append((s.load, s.id))
        for candidates in groups.values():
            candidates.sort()
        return groups

    def lightest_movable(self, worker: str) -> list[tuple[float, str, str]] | None:
        """``worker``'s lightest movable splits as :func:`~.candidates.lightest` lists them.

        Before its whole list: for a worker whose every trusted split is movable and has no
        affinity (one group, ""); None for any other, whose list :meth:`movable` builds. Most
        receivers an exchange is tried on give nothing back: listing and sorting all their
        splits, kept for the round, cost more than the rest of the round (the skewed case of
        ``bench/balance.py``).
        """
        if worker in self._lightest:
            return self._lightest[worker]
        few = None
        if self.plain(worker):
            loads, trusted = self.loads[worker], self.trusted[worker]
            # the lightest few's bound is selected from the loads alone (sorting them all, even
            # as floats in C, cost four times as much), and only the splits within it are
            # paired with their ids
            top = heapq.nsmallest(EXCHANGE_CHOICES, loads)[-1] if loads else 0.0
            within = sorted([(y, trusted[i].id) for i, y in enumerate(loads) if y <= top])
            few = [(y, split, "") for y, split in within[:EXCHANGE_CHOICES]]
        self._lightest[worker] = few
        return few

    def plain(self, worker: str) -> bool:
        """Whether every trusted split of ``worker`` may move and none has an affinity.

        The common case, whose list :meth:`movable` builds without a loop in Python.
        """
        plain = self._plain.get(worker)
        if plain is None:
            cooling = self.cooling()
            plain = self._plain[worker] = (
                not self.affinity[worker]
                and self.lowest[worker] > 0
                and (not cooling or cooling.isdisjoint([s.id for s in self.trusted[worker]]))
            )
        return plain
