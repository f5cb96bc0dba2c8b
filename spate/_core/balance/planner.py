"""One balance round: which running splits move, given their measured loads.

The rules (``docs/balancing.md``), each with what it prevents:

1. **Trust before acting.** A split counts by its smoothed load once that load is *trusted*
   (:mod:`.meter`); until then it counts as the job's mean load per unit of weight, and it is
   never moved (a guess moved is a drain paid for nothing). A job with no trusted split makes
   no move at all.
2. **The band.** Each worker has a *mean*: its share of the job by capacity. With failure
   domains (any worker has a locality) each domain's mean is an equal share of the job, as
   placement's blast-radius rule puts it, split among the domain's workers by capacity. The
   round acts only when some worker's load lies outside its mean ± ``load_band``, and the job
   is not *idle* (its load is above 0 and above ``idle_share`` of its recent peak): an idle job
   whose smoothed loads decay never shuffles.
3. **A bounded price.** The moves of a round carry at most ``max_moved_load`` of the job's
   load, and at most ``excess_share`` of each hot worker's excess over its mean (all of it
   when the receiver is a *new* worker: new workers are filled toward their mean). A move
   goes from a worker above its mean to one below it, and only when one of the two lies outside
   the band (or the receiver is new); it must remove more imbalance (the summed distance of
   the loads from their means) than ``churn_price`` x its load; the receiver ends at most at
   the top of its band and the donor never below its mean. A moved split stays put
   ``cooldown_rounds`` rounds.
4. **Every placement rule still holds.** A receiver takes a split into a free lane (its lane
   cap is ``max_in_flight``). One without a free lane, or with no room in its band for any
   split the donor could give, takes one in *exchange* for one of its own lighter splits, the
   pair judged as one move of their difference (both loads count against the budget and the
   churn price). A move across failure domains never lifts the
   receiving domain's load above the largest domain load the round began with: the blast
   radius never rises. A split whose affinity its owner honours moves only to another worker
   that honours it. A split of load 0 never moves (a move that buys nothing).
5. **Hot splits split, down to pieces moves can place.** A trusted split whose load exceeds
   ``split_factor`` x the mean worker load is reported in :attr:`BalanceRound.split_requests`
   (Slicer's trigger). Once asked, it and its *pieces* (the residuals split off it, named by
   their ``parent``, and theirs) are asked again, round after round, while a piece alone
   exceeds what the band of the roomiest worker holds, ``(1 + load_band)`` x the largest
   worker's share of the job: a piece that heavy keeps whichever worker holds it above the
   band, and no move can fix that. A piece below it is left to the moves (a split that moves
   alone can balance is never asked). A piece not yet measured is remembered, not asked, and so is
   one whose residual is not yet measured: its smoothed load still counts the work it gave
   away (after a halving it reads about 1.4x its new load a round later). The
   memory of a piece lasts ``cooldown_rounds`` rounds past the last round it was asked (or
   unmeasured), so a piece out of sight for a moment (handed over) keeps its place. Each
   piece asked weighs more than the job's mean worker load, so a round asks fewer splits than
   there are workers; a split that ignores its requests backs off as any other
   (:mod:`spate._core.leader.split_requests`).

6. **Settled means settled.** Every move lowers a potential (:meth:`_Round._gain`) by
   ``min_gain`` at least, a split is not moved back to the worker it left while its load holds
   still, and loads within half a band of the last round that found the fleet within its band
   move nothing.
7. **A worker no move within the bands helps is rescued** by a move that may push its receiver
   over (a two-step shed) or an exchange for one or more lighter splits, judged by the
   potential alone (:meth:`_Round._rescue`).
8. **The budget never strands a worker over its band.** A round that moved nothing else may
   make one step of rule 7 that costs more than its budget, alone.

A worker holding a split heavier than its share has that split's load as its mean, and the
others share the rest (``_Round._fill``): no placement does better than that split, and without
it the band would see that worker as over forever.

The greedy: the hottest donor first (by load over mean), each time to the coldest receiver
that can take one of its splits, the largest split that fits every limit above (largest: the
fewest drains for the load moved). Cost: one pass over the splits to group them by owner and
sum each worker's load in C loops, then a sort of each donor's movable splits and O(log n) per
move; a receiver an exchange is tried on has only its lightest few listed until one of them
moves, and a pair that cannot net enough to be worth it is rejected before the potential is
worked out (``_Round._cut``); never splits x workers; the cooldown set is built once a round,
and the memory of moves looks up only the splits it names (``bench/balance.py`` times 100,000
splits x 100 workers).

Pure: no I/O, no clock; the round number and the time are passed in.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Iterable, Sequence

from spate._core.balance.candidates import Candidates, bound, find, lightest, prefixes
from spate._core.balance.means import worker_means
from spate._core.balance.model import (
    BalanceConfig,
    BalanceRound,
    BalanceSplit,
    BalanceState,
    BalanceWorker,
    Move,
)
from spate._core.balance.requests import split_requests
from spate._core.placement.vocabulary import affinity_matches, domain_of
from spate._errors import ConfigError

__all__ = [
    "EXCHANGE_CHOICES",
    "PEAK_HALF_LIFE_ROUNDS",
    "judge_loads",
    "plan_balance_round",
]

EXCHANGE_CHOICES = 8
"""A receiver's lightest splits an exchange considers giving back."""
RESCUE_DONORS = 2
"""Rule 7 tries the hottest this many workers over their band as donors..."""
RESCUE_SPLITS = 16
"""...each one's this many heaviest movable splits..."""
RESCUE_RECEIVERS = 6
"""...on this many of the coldest workers (bounded: a round's cost stays O(log n) a move)."""
PEAK_HALF_LIFE_ROUNDS = 60
"""Rounds over which the remembered peak load halves (an hour at the default interval)."""


def plan_balance_round(
    workers: Sequence[BalanceWorker],
    splits: Iterable[BalanceSplit],
    config: BalanceConfig,
    state: BalanceState,
    *,
    round: int,
    now: float,
) -> BalanceRound:
    """Decide round ``round`` at time ``now``: the moves, the split requests, the next state.

    ``workers`` are the live workers; ``splits`` the running splits (one whose owner is not in
    ``workers`` is left to placement). Deterministic in its arguments, whatever their order.
    Raises :class:`~spate.ConfigError` for two workers of one name.
    """
    return _Round(workers, config, state, round, now).plan(splits)


def judge_loads(
    workers: Sequence[BalanceWorker], splits: Iterable[BalanceSplit], config: BalanceConfig
) -> tuple[dict[str, float], dict[str, float]]:
    """Each worker's (load, mean) as a round judges them before it moves anything.

    The load counts an untrusted split at the job's mean per unit of weight (rule 1); the mean
    is the worker's share (rule 2). What ``spate status`` shows, so it reads a fleet exactly as
    the leader's next round would. Both empty while no split is trusted (the round makes no
    move then), or while the job has no load to share.
    """
    judged = _Round(workers, config, BalanceState(), 0, 0.0)
    load = judged.judged_loads(*judged._read(splits))
    total = sum(load.values())
    if total <= 0:
        return {}, {}
    return load, judged._means(total)


class _Round:
    """The working state of one round (see the module text)."""

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
        self.trusted: dict[str, list[BalanceSplit]] = {}
        """Each worker's trusted splits (set by :meth:`_read`)."""
        self.loads: dict[str, list[float]] = {}
        """The loads of each worker's trusted splits, in the same order (set by :meth:`_read`)."""
        self.few: dict[str, list[tuple[float, str, str]] | None] = {}
        """A worker's lightest movable splits while its whole list is not built (:meth:`_few`)."""
        self.plain: dict[str, bool] = {}
        """Memo of :meth:`_plain`."""
        self.trusted_load: dict[str, float] = {}
        self.untrusted_weight: dict[str, int] = {}
        self.hottest: dict[str, float] = {}
        self.roomiest = 0.0
        """The largest worker's share of the job by capacity (set by :meth:`_means`)."""
        self.splitting: dict[str, int] | None = None
        """The next state's memory of pieces (None until :func:`.requests.split_requests` ran)."""
        self.heavy: set[str] = set()
        """Workers whose mean is their own heavy split (set by :meth:`_means`)."""
        self.settled: dict[str, float] = {}
        """The next state's settled loads (rule 6)."""
        self.split_loads: dict[str, float] = {}
        """The load of each trusted split the memory of moves names (rule 6)."""
        self.present: set[str] = set()
        """Every split of a live worker the memory of moves names."""
        self.cooling: set[str] | None = None
        """The splits within their cooldown (set by the first :meth:`_movable` of the round)."""

    # -- reading the splits ------------------------------------------------------------------

    def _read(self, splits: Iterable[BalanceSplit]) -> tuple[float, int]:
        """Sum each worker's loads. Returns the trusted splits' summed (load, weight).

        The one pass over every split does as little as it can (group by owner); the sums
        are then taken per worker in C loops, and a worker's movable splits are listed only
        when it donates (:meth:`_movable`).
        """
        add = {n: group.append for n, group in self.groups.items()}
        for s in splits:
            put = add.get(s.owner)
            if put is not None:
                put(s)
        weight_sum = 0
        left = self.state.left
        for n, group in self.groups.items():
            trusted = self.trusted[n] = [s for s in group if s.trusted]
            loads = self.loads[n] = [s.load for s in trusted]
            if left:  # only the splits the memory of moves names are looked up again
                for s in [s for s in group if s.id in left]:
                    self.present.add(s.id)
                    if s.trusted:
                        self.split_loads[s.id] = s.load
            self.count[n] = len(group)
            self.trusted_load[n] = sum(loads)
            self.hottest[n] = max(loads, default=0.0)
            weight_sum += sum([s.weight if s.weight > 1 else 1 for s in trusted])
            self.untrusted_weight[n] = (
                sum([s.weight if s.weight > 1 else 1 for s in group if not s.trusted])
                if len(trusted) < len(group)
                else 0
            )
        return sum(self.trusted_load.values()), weight_sum

    def judged_loads(self, trusted_total: float, trusted_weight: int) -> dict[str, float]:
        """Each worker's load: its trusted splits', its untrusted ones at the mean per weight.

        Empty when no split is trusted (``trusted_weight`` 0): there is no mean to count by.
        """
        if trusted_weight == 0:
            return {}
        per_weight = trusted_total / trusted_weight
        return {n: self.trusted_load[n] + per_weight * self.untrusted_weight[n] for n in self.names}

    def _cooling(self) -> set[str]:
        """The splits within their cooldown, worked out once a round, not once a worker."""
        cooling = self.cooling
        if cooling is None:
            moved, round_, cooldown = self.state.moved, self.round, self.config.cooldown_rounds
            cooling = {split for split, last in moved.items() if round_ - last < cooldown}
            self.cooling = cooling
        return cooling

    def _movable(self, worker: str) -> Candidates:
        """The splits of a donor that may move, by affinity key, each group sorted by load.

        Trusted (a guess is never moved), of a load above 0 (moving it buys nothing), out of
        their cooldown.
        """
        if self._plain(worker):
            ids = [s.id for s in self.trusted[worker]]
            return {"": sorted(zip(self.loads[worker], ids, strict=True))}
        cooling = self._cooling()
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

    # -- the round ---------------------------------------------------------------------------

    def plan(self, splits: Iterable[BalanceSplit]) -> BalanceRound:
        config = self.config
        trusted_total, trusted_weight = self._read(splits)
        decay = 0.5 ** (1 / PEAK_HALF_LIFE_ROUNDS)
        if trusted_weight == 0:
            return self._idle("unmeasured", 0.0, self.state.peak_load * decay)
        load = self.judged_loads(trusted_total, trusted_weight)
        total = sum(load.values())
        peak = max(total, self.state.peak_load * decay)
        if total <= 0 or total < config.idle_share * peak:
            return self._idle("idle", total, peak)
        self.load = load
        self.target = self._means(total)
        self.mean = total / len(self.names)
        self._bounds()
        ratio = {n: load[n] / self.target[n] for n in self.names}
        before = max(ratio.values())
        requests, self.splitting = split_requests(
            config,
            self.round,
            self.state.splitting,
            self.names,
            self.hottest,
            self.groups,
            total,
            self.roomiest,
        )
        settled = self.state.settled
        if settled.keys() == load.keys() and all(
            abs(load[n] - settled[n]) <= config.load_band / 2 * self.mean for n in self.names
        ):
            # rule 6: loads that hold still since the fleet was within the band move nothing
            self.settled = dict(settled)
            return self._result("within band", total, peak, (), requests, before)
        if not any(self._outside(n, load[n]) for n in self.names):
            self.settled = dict(load)
            return self._result("within band", total, peak, (), requests, before)
        moves = self._moves(total)
        return self._result(
            "moved" if moves else "no move worth its price", total, peak, moves, requests, before
        )

    # -- the potential (rule 6) --------------------------------------------------------------

    def _bounds(self) -> None:
        """Each worker's band: ``hi`` and ``lo``, the loads outside which it counts as out.

        The band around its mean, but a new worker is out until it reaches its mean (new
        workers are filled to it), and a worker whose mean is its own heavy split has no room
        above it: it sheds everything else it holds.
        """
        band, target = self.config.load_band, self.target
        new = {
            n
            for n in self.names
            if self.now - self.workers[n].joined_at < self.config.new_worker_window
        }
        self.new = new
        self.hi = {n: target[n] * (1.0 if n in self.heavy else 1 + band) for n in self.names}
        self.lo = {n: target[n] * (1.0 if n in new else 1 - band) for n in self.names}
        self.slack = 1e-9 * self.mean

    def _excess(self, n: str, load: float) -> float:
        """How far ``load`` lies outside worker ``n``'s band (0 inside it)."""
        return max(0.0, load - self.hi[n], self.lo[n] - load)

    def _outside(self, n: str, load: float) -> bool:
        return self._excess(n, load) > self.slack

    def _gain(self, d: str, r: str, net: float) -> float:
        """How much moving ``net`` from ``d`` to ``r`` lowers the potential, in mean loads.

        The potential: the summed excess of the workers outside their bands over the mean
        worker load, plus ``min_gain`` for each worker outside. A move is made only when it
        lowers it by ``min_gain`` at least: it either takes 1% of the mean out of the excess,
        or brings a worker into its band without pushing another out. The potential is never
        below 0, so with loads that hold still a fleet makes finitely many moves, and none once
        every worker is within its band (the potential is 0 there).
        """
        load, eps, slack, excess = self.load, self.config.min_gain, self.slack, self._excess
        d0, r0 = excess(d, load[d]), excess(r, load[r])
        d1, r1 = excess(d, load[d] - net), excess(r, load[r] + net)
        count = (d0 > slack) + (r0 > slack) - (d1 > slack) - (r1 > slack)
        return (d0 + r0 - (d1 + r1)) / self.mean + eps * count

    def _worth(self, d: str, r: str, net: float) -> bool:
        return self._gain(d, r, net) >= self.config.min_gain * (1 - 1e-9)

    def _back(self, split: str, load: float, to: str) -> bool:
        """Whether moving ``split`` to ``to`` is a move back while its load held still."""
        left = self.state.left.get(split)
        return (
            left is not None
            and left[0] == to
            and abs(load - left[1]) <= self.config.load_band / 2 * max(load, left[1])
        )

    def _means(self, total: float) -> dict[str, float]:
        """Each worker's mean (rule 2), and what it sets: the roomiest share, the heavy."""
        means = worker_means(self.names, self.domain, self.workers, self.hottest, total)
        self.roomiest, self.heavy = means.roomiest, means.heavy
        return means.target

    def _moves(self, total: float) -> tuple[Move, ...]:
        config, load, target = self.config, self.load, self.target
        band = config.load_band
        budget = config.max_moved_load * total
        excess = {n: load[n] - target[n] for n in self.names}
        shed = dict.fromkeys(self.names, 0.0)
        domain_load: dict[str, float] = {}
        for n in self.names:
            domain_load[self.domain[n]] = domain_load.get(self.domain[n], 0.0) + load[n]
        blast_cap = max(domain_load.values())
        new = {
            n for n in self.names if self.now - self.workers[n].joined_at < config.new_worker_window
        }

        def ratio(n: str) -> float:
            return load[n] / target[n]

        def over(n: str) -> bool:
            return ratio(n) > 1 + band

        def under(n: str) -> bool:
            return ratio(n) < 1 - band

        def wanting(n: str) -> bool:
            # under the band, or new and under its mean: new workers are filled to the mean
            return under(n) or (n in new and load[n] < target[n])

        def receiving(n: str) -> bool:
            return load[n] < target[n]  # one without a free lane takes a split in exchange

        receivers = sorted((ratio(n), n) for n in self.names if receiving(n))
        entry = {n: key for key, n in receivers}  # a receiver's entry in the sorted list
        donors = [(-ratio(n), n) for n in self.names if excess[n] > 0]
        heapq.heapify(donors)
        candidates: dict[str, Candidates] = {}
        moves: list[Move] = []
        moved_load = 0.0
        while donors and budget - moved_load > 0:
            _, d = heapq.heappop(donors)
            if not over(d) and not (
                (receivers and under(receivers[0][1])) or any(wanting(n) for n in new)
            ):
                break  # donors come hottest first: no later one is over the band either
            chosen: tuple[str, Move, Move | None] | None = None
            for _, r in receivers:
                if not (over(d) or wanting(r)):
                    continue
                share = 1.0 if r in new else config.excess_share
                allowance = share * excess[d] - shed[d]
                if allowance <= 0:
                    break  # the donor gave its share of this round (to this receiver, and so
                    # to every later one: only a new worker's share is larger, and they are
                    # not ordered first)
                shortfall = target[r] - load[r]
                # what may pass from d to r: d never ends below its mean, r never above its
                # band, and past r's mean its distance grows again, so the move removes
                # 2 x shortfall, which must beat the churn price
                limit = min(
                    load[d] - target[d],
                    shortfall + band * target[r],
                    math.nextafter(2 * shortfall / config.churn_price, 0)
                    if config.churn_price
                    else math.inf,
                )
                if self.domain[r] != self.domain[d]:
                    limit = min(limit, blast_cap - domain_load[self.domain[r]])
                if limit <= 0:
                    continue
                if d not in candidates:
                    candidates[d] = self._movable(d)
                keys = prefixes(self.workers[r].locality)
                if self.count[r] < self.workers[r].lanes:
                    given = self._take(
                        candidates[d], keys, allowance, min(limit, budget - moved_load), d, r
                    )
                    if given is not None:
                        chosen = (r, Move(given[1], d, r, given[0]), None)
                        break
                swap = self._swap(
                    d, r, candidates, allowance, limit, budget - moved_load, shortfall
                )
                if swap is not None:
                    chosen = (r, *swap)
                    break
            if chosen is None:
                continue  # this donor has nothing any receiver can take: done with it
            r, move, back = chosen
            net = move.load - (back.load if back else 0.0)
            moves.append(move)
            moved_load += move.load
            if back is not None:
                moves.append(back)
                moved_load += back.load
            else:
                self.count[d] -= 1
                self.count[r] += 1
            shed[d] += net
            load[d] -= net
            load[r] += net
            domain_load[self.domain[d]] -= net
            domain_load[self.domain[r]] += net
            receivers.pop(bisect.bisect_left(receivers, (entry[r], r)))
            if receiving(r):
                entry[r] = ratio(r)
                bisect.insort(receivers, (entry[r], r))
            if load[d] > target[d]:
                heapq.heappush(donors, (-ratio(d), d))
        if budget - moved_load > 0 and any(load[n] > self.hi[n] + self.slack for n in self.names):
            moves.extend(
                self._rescue(candidates, budget, moved_load, domain_load, blast_cap, moves)
            )
        return tuple(moves)

    def _take(
        self,
        groups: Candidates,
        keys: tuple[str, ...],
        allowance: float,
        limit: float,
        d: str,
        r: str,
    ) -> tuple[float, str] | None:
        """Take out the split :func:`find` finds for ``d`` to give ``r``, if worth it.

        A split that would go back to the worker it left while its load held still is passed
        over (rule 6), for the next one :func:`find` finds; one not worth its move is left.
        """
        passed: list[tuple[str, tuple[float, str]]] = []
        given = None
        while True:
            found = find(groups, keys, allowance, limit)
            if found is None:
                break
            load, split, key, i = found
            if self._back(split, load, r):
                passed.append((key, groups[key].pop(i)))
                continue
            if self._worth(d, r, load):
                groups[key].pop(i)
                given = (load, split)
            break
        for key, entry in passed:
            bisect.insort(groups[key], entry)
        return given

    def _swap(
        self,
        d: str,
        r: str,
        candidates: dict[str, Candidates],
        allowance: float,
        limit: float,
        budget: float,
        shortfall: float,
    ) -> tuple[Move, Move] | None:
        """An exchange: one of d's splits for a lighter one of r's (see the module text).

        Its net load (the difference) keeps every limit of a single move, both loads count
        against the budget, and what it removes must beat the churn price of both. Of r's
        lightest splits (``EXCHANGE_CHOICES``), each paired with the split d would give for
        it, the pair whose removal exceeds its price most. Without exchanges a fleet whose
        every lane is full (64 splits on 8 workers of the default ``max_in_flight`` of 8)
        could never be balanced, nor a worker holding three 4s next to workers holding 1s
        with 2.75 of room each (no 4 fits; a 4 for a 1 does).
        """
        back_keys = prefixes(self.workers[d].locality)
        backs = self._few(r) if r not in candidates else None
        if backs is None:
            if r not in candidates:
                candidates[r] = self._movable(r)
            backs = lightest(candidates[r], back_keys, EXCHANGE_CHOICES)
        price = self.config.churn_price
        give_keys = prefixes(self.workers[r].locality)
        cut = self._cut(d, r)
        if backs and bound(candidates[d], give_keys, backs[-1][0] + allowance) <= cut:
            # each pair nets less than the split d gives, and that is at most the bound (r's
            # splits are the lighter the earlier, and find's choice grows with them)
            return None
        best: tuple[float, tuple[float, str, str, int], tuple[float, str, str]] | None = None
        for back in backs:
            y = back[0]
            room = min(limit, budget - 2 * y)
            if room <= 0:
                break  # heavier ones leave less of the budget still
            found = find(candidates[d], give_keys, y + allowance, y + room)
            if found is None:
                continue
            x = found[0]
            net = x - y
            if net <= cut:
                continue  # not worth it, without working out the potential
            value = net + min(net, 2 * shortfall - net) - price * (x + y)
            if (
                net > 0
                and value > 0
                and (best is None or value > best[0])
                and self._worth(d, r, net)
                and not self._back(found[1], x, r)
                and not self._back(back[1], y, d)
            ):
                best = (value, found, back)
        if best is None:
            return None
        _, (x, given, key, i), (y, returned, back_key) = best
        candidates[d][key].pop(i)
        if r not in candidates:
            candidates[r] = self._movable(r)
        group = candidates[r][back_key]
        group.pop(bisect.bisect_left(group, (y, returned)))
        return Move(given, d, r, x, exchange=returned), Move(returned, r, d, y, exchange=given)

    def _few(self, r: str) -> list[tuple[float, str, str]] | None:
        """``r``'s lightest movable splits as :func:`lightest` lists them, before its whole list.

        For a worker whose every trusted split is movable and has no affinity (one group, "");
        None for any other, whose list :meth:`_movable` builds. Most receivers an exchange is
        tried on give nothing back: listing and sorting all their splits, kept for the round,
        cost more than the rest of the round (the skewed case of ``bench/balance.py``).
        """
        if r in self.few:
            return self.few[r]
        few = None
        if self._plain(r):
            loads, trusted = self.loads[r], self.trusted[r]
            # the loads alone are sorted (floats, in C) for the lightest few's bound, and only
            # the splits within it are paired with their ids
            ordered = sorted(loads)
            top = ordered[min(EXCHANGE_CHOICES, len(ordered)) - 1] if ordered else 0.0
            within = sorted([(y, trusted[i].id) for i, y in enumerate(loads) if y <= top])
            few = [(y, split, "") for y, split in within[:EXCHANGE_CHOICES]]
        self.few[r] = few
        return few

    def _plain(self, worker: str) -> bool:
        """Whether every trusted split of ``worker`` may move and none has an affinity.

        The common case, whose list :meth:`_movable` builds without a loop in Python.
        """
        plain = self.plain.get(worker)
        if plain is None:
            trusted = self.trusted[worker]
            cooling = self._cooling()
            plain = self.plain[worker] = (
                not any([s.affinity for s in trusted])
                and min(self.loads[worker], default=1.0) > 0
                and (not cooling or cooling.isdisjoint([s.id for s in trusted]))
            )
        return plain

    def _cut(self, d: str, r: str) -> float:
        """A net load at or below which no move from ``d`` to ``r`` is worth it (-inf if none).

        While ``d`` stays over its band, a net lowers its excess by itself and brings it no
        nearer in; ``r`` inside its band gains nothing, and under it gains at most the net
        too and stays out. So a net under ``min_gain`` (``r`` inside) or half of it (``r``
        under) is never worth it, with margins far wider than any rounding in :meth:`_gain`:
        the rule says exactly what :meth:`_worth` says, at a fraction of its cost.
        """
        load, hi, lo, mean = self.load, self.hi, self.lo, self.mean
        over, under = load[d] - hi[d], lo[r] - load[r]
        if over <= 0:
            return -math.inf
        scale = 1e-12 * max(load[d], load[r], hi[d], lo[d], hi[r], lo[r])
        floor = 1e-6 * mean + scale
        worth = self.config.min_gain * mean * (1 - 1e-6) - scale
        if under > 0:
            return min(worth / 2, over - floor, under - floor)
        if self._excess(r, load[r]) == 0:
            return min(worth, over - floor)
        return -math.inf

    def _rescue(
        self,
        candidates: dict[str, Candidates],
        budget: float,
        moved_load: float,
        domain_load: dict[str, float],
        blast_cap: float,
        made: Sequence[Move],
    ) -> list[Move]:
        """Rule 7: moves for a worker still over its band that no move within the bands helps.

        Each of the hottest donors' heaviest splits is tried on the coldest workers, alone
        (if the receiver has a free lane) or in exchange for one or more of the receiver's
        lighter splits, and the one that lowers the potential most is made, again while one
        is worth it. Here a receiver may end above its band and a donor below its mean, and
        the potential, not the churn price, is the judge (a receiver pushed over sheds its
        small splits the next round: a two-step shed). The round's budget holds, but for rule
        8: a round that has moved nothing, and finds no such step within its budget, makes the
        best one that costs more, alone (without it a worker whose only helpful step outweighs
        the budget, as one holding two splits heavier than it together, stays over its band
        for good). The cooldown and the memory of moves hold.
        """
        load = self.load
        out: list[Move] = []
        while budget - moved_load > 0:
            best = self._rescue_option(candidates, budget - moved_load, domain_load, blast_cap)
            alone = False
            if best is None and not made and not out:
                # rule 8: the budget never strands a worker over its band
                best = self._rescue_option(candidates, math.inf, domain_load, blast_cap)
                alone = True
            if best is None:
                break
            d, r, x, split, backs = best
            self._drop(candidates[d], split, x)
            out.append(Move(split, d, r, x, exchange=backs[0][1] if backs else "", rescue=True))
            net = x
            moved_load += x
            for y, back in backs:
                self._drop(candidates[r], back, y)
                out.append(Move(back, r, d, y, exchange=split, rescue=True))
                net -= y
                moved_load += y
            self.count[d] += len(backs) - 1
            self.count[r] += 1 - len(backs)
            load[d] -= net
            load[r] += net
            domain_load[self.domain[d]] -= net
            domain_load[self.domain[r]] += net
            if alone:
                break  # the one step past the budget is the round's only one
        return out

    def _rescue_option(
        self,
        candidates: dict[str, Candidates],
        room: float,
        domain_load: dict[str, float],
        blast_cap: float,
    ) -> tuple[str, str, float, str, list[tuple[float, str]]] | None:
        """The best move or exchange of rule 7 costing at most ``room``: (d, r, x, split, backs)."""
        load, target, eps = self.load, self.target, self.config.min_gain
        left = self.state.left
        donors = sorted(
            (n for n in self.names if load[n] > self.hi[n] + self.slack),
            key=lambda n: (-(load[n] - self.hi[n]) / target[n], n),
        )[:RESCUE_DONORS]
        receivers = sorted(self.names, key=lambda n: (load[n] / target[n], n))
        best: tuple[float, float] | None = None
        chosen = None
        for d in donors:
            if d not in candidates:
                candidates[d] = self._movable(d)
            heavy = heapq.nlargest(
                RESCUE_SPLITS,
                ((x, split, key) for key, group in candidates[d].items() for x, split in group),
            )
            for r in receivers[: RESCUE_RECEIVERS + 1]:
                if r == d:
                    continue
                keys = prefixes(self.workers[r].locality)
                if r not in candidates:
                    candidates[r] = self._movable(r)
                back_keys = prefixes(self.workers[d].locality)
                offered = sorted(  # ascending: those lighter than x are a prefix
                    (y, back)
                    for key in back_keys
                    for y, back in candidates[r].get(key, ())
                    if not left or not self._back(back, y, d)
                )
                free = self.count[r] < self.workers[r].lanes
                for x, split, key in heavy:
                    if key not in keys or self._back(split, x, r):
                        continue
                    options: list[list[tuple[float, str]]] = [[]] if free else []
                    # the splits lighter than x, heaviest first, by slices of the prefix
                    below = bisect.bisect_left(offered, (x, ""))
                    options.extend([o] for o in offered[: min(below, EXCHANGE_CHOICES)][::-1])
                    # one for many: the receiver's heaviest lighter splits, while they fit the
                    # net that brings the donor into its band and keeps the receiver in its
                    most = x - (load[d] - self.hi[d])
                    least_back = x - max(0.0, self.hi[r] - load[r])
                    group: list[tuple[float, str]] = []
                    total = 0.0
                    for y, back in offered[max(0, below - 4 * EXCHANGE_CHOICES) : below][::-1]:
                        if total + y <= most:
                            group.append((y, back))
                            total += y
                            if total >= least_back or len(group) == EXCHANGE_CHOICES:
                                break
                    if len(group) > 1:
                        options.append(group)
                    for backs in options:
                        y = math.fsum(b[0] for b in backs)
                        net, cost = x - y, x + y
                        if net <= 0 or cost > room:
                            continue
                        if self.count[d] + len(backs) - 1 > self.workers[d].lanes:
                            continue  # the donor takes several back only into free lanes
                        if self.domain[r] != self.domain[d] and (
                            domain_load[self.domain[r]] + net > blast_cap
                        ):
                            continue
                        gain = self._gain(d, r, net)
                        if gain < eps * (1 - 1e-9):
                            continue
                        if best is None or (gain, -cost) > best:
                            best = (gain, -cost)
                            chosen = (d, r, x, split, backs)
        return chosen

    @staticmethod
    def _drop(groups: Candidates, split: str, load: float) -> None:
        for group in groups.values():
            i = bisect.bisect_left(group, (load, split))
            if i < len(group) and group[i] == (load, split):
                group.pop(i)
                return

    # -- results -----------------------------------------------------------------------------

    def _next_state(self, peak: float, moves: Sequence[Move]) -> BalanceState:
        cooldown = self.config.cooldown_rounds
        moved = {s: r for s, r in self.state.moved.items() if self.round - r < cooldown}
        for move in moves:
            moved[move.split] = self.round
        splitting = self.splitting
        if splitting is None:  # an idle round asks nothing, and forgets on time
            splitting = {
                s: r for s, r in self.state.splitting.items() if self.round - r <= cooldown
            }
        # a split's memory of the worker it left lasts while its load holds still
        band = self.config.load_band
        left = {}
        for split, (worker, then) in self.state.left.items():
            now = self.split_loads.get(split)
            if now is None and split in self.present:
                left[split] = (worker, then)  # not yet measured by its new owner: kept
            elif now is not None and abs(now - then) <= band / 2 * max(now, then):
                left[split] = (worker, then)
        for move in moves:
            left[move.split] = (move.source, move.load)
        return BalanceState(
            moved=moved, peak_load=peak, splitting=splitting, left=left, settled=self.settled
        )

    def _idle(self, reason: str, total: float, peak: float) -> BalanceRound:
        return BalanceRound(
            round=self.round,
            moves=(),
            split_requests=(),
            reason=reason,
            job_load=total,
            moved_load=0.0,
            imbalance_before=1.0,
            imbalance_after=1.0,
            state=self._next_state(peak, ()),
        )

    def _result(
        self,
        reason: str,
        total: float,
        peak: float,
        moves: tuple[Move, ...],
        requests: tuple[str, ...],
        before: float,
    ) -> BalanceRound:
        return BalanceRound(
            round=self.round,
            moves=moves,
            split_requests=requests,
            reason=reason,
            job_load=total,
            moved_load=sum(m.load for m in moves),
            imbalance_before=before,
            imbalance_after=max(self.load[n] / self.target[n] for n in self.names),
            state=self._next_state(peak, moves),
            loads=dict(self.load),
            targets=dict(self.target),
        )
