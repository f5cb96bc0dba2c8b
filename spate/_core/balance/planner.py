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

6. **Settled means settled.** Every move lowers a potential (:meth:`.reading.FleetReading.gain`) by
   ``min_gain`` at least, a split is not moved back to the worker it left while its load holds
   still, and loads within half a band of the last round that found the fleet within its band
   move nothing.
7. **A worker no move within the bands helps is rescued** by a move that may push its receiver
   over (a two-step shed) or an exchange for one or more lighter splits, judged by the
   potential alone (:mod:`.rescue`).
8. **The budget never strands a worker over its band.** A round that moved nothing else may
   make one step of rule 7 that costs more than its budget, alone.

A worker holding a split heavier than its share has that split's load as its mean, and the
others share the rest (:mod:`.means`): no placement does better than that split, and without
it the band would see that worker as over forever.

The greedy: the hottest donor first (by load over mean), each time to the coldest receiver
that can take one of its splits, the largest split that fits every limit above (largest: the
fewest drains for the load moved). Cost: one pass over the splits to group them by owner,
then what the round reads of each worker's splits (their loads, sum, heaviest, lightest, any
affinity) in C loops at once, while they are in the cache; a sort of each donor's movable
splits and O(log n) per move; a receiver the donor's heaviest split cannot net enough for is
passed over before any split is looked for, a receiver an exchange is tried on has only its
lightest few listed until one of them moves, and a pair that cannot net enough to be worth it
is rejected before the potential is worked out (:func:`.exchange.worthless_net`); a rescue
reads the last few of a donor's sorted list and a receiver's list as it is; never splits x
workers; the cooldown set is built once a round, and the memory of moves looks up only the
splits it names (``bench/balance.py`` times 100,000 splits x 100 workers).

The round's parts: :mod:`.reading` (the fleet as the round reads it: loads, means, bands,
the potential, the movable splits), :mod:`.band_moves` (the greedy of rules 3 and 4),
:mod:`.exchange` (rule 4's exchanges), :mod:`.rescue` (rules 7 and 8), :mod:`.means` (rule 2)
and :mod:`.requests` (rule 5); here, the order of one round and the next state.

Pure: no I/O, no clock; the round number and the time are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from spate._core.balance.band_moves import band_moves
from spate._core.balance.model import (
    BalanceConfig,
    BalanceRound,
    BalanceSplit,
    BalanceState,
    BalanceWorker,
    Move,
)
from spate._core.balance.reading import EXCHANGE_CHOICES, FleetReading
from spate._core.balance.requests import split_requests

__all__ = [
    "EXCHANGE_CHOICES",
    "PEAK_HALF_LIFE_ROUNDS",
    "judge_loads",
    "plan_balance_round",
]

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
    return _Round(FleetReading(workers, config, state, round, now)).plan(splits)


def judge_loads(
    workers: Sequence[BalanceWorker], splits: Iterable[BalanceSplit], config: BalanceConfig
) -> tuple[dict[str, float], dict[str, float]]:
    """Each worker's (load, mean) as a round judges them before it moves anything.

    The load counts an untrusted split at the job's mean per unit of weight (rule 1); the mean
    is the worker's share (rule 2). What ``spate status`` shows, so it reads a fleet exactly as
    the leader's next round would. Both empty while no split is trusted (the round makes no
    move then), or while the job has no load to share.
    """
    fleet = FleetReading(workers, config, BalanceState(), 0, 0.0)
    load = fleet.judged_loads(fleet.read(splits)[0])
    total = sum(load.values())
    if total <= 0:
        return {}, {}
    return load, fleet.means(total)


class _Round:
    """One round: its reading of the fleet, its decision and the next state (the module text)."""

    def __init__(self, fleet: FleetReading) -> None:
        self.fleet = fleet
        self.config = fleet.config
        self.state = fleet.state
        self.round = fleet.round
        self.splitting: dict[str, int] | None = None
        """The next state's memory of pieces (None until :func:`.requests.split_requests` ran)."""
        self.settled: dict[str, float] = {}
        """The next state's settled loads (rule 6)."""

    def plan(self, splits: Iterable[BalanceSplit]) -> BalanceRound:
        """Read ``splits``, and decide."""
        config, fleet = self.config, self.fleet
        trusted_total, trusted = fleet.read(splits)
        decay = 0.5 ** (1 / PEAK_HALF_LIFE_ROUNDS)
        if trusted == 0:
            return self._idle("unmeasured", 0.0, self.state.peak_load * decay)
        load = fleet.judged_loads(trusted_total)
        total = sum(load.values())
        peak = max(total, self.state.peak_load * decay)
        if total <= 0 or total < config.idle_share * peak:
            return self._idle("idle", total, peak)
        fleet.judge(load, total)
        names, target = fleet.names, fleet.target
        before = max(load[n] / target[n] for n in names)
        requests, self.splitting = split_requests(
            config,
            self.round,
            self.state.splitting,
            names,
            fleet.hottest,
            fleet.groups,
            total,
            fleet.roomiest,
        )
        settled = self.state.settled
        if settled.keys() == load.keys() and all(
            abs(load[n] - settled[n]) <= config.load_band / 2 * fleet.mean for n in names
        ):
            # rule 6: loads that hold still since the fleet was within the band move nothing
            self.settled = dict(settled)
            return self._result("within band", total, peak, (), requests, before)
        if not any(fleet.outside(n, load[n]) for n in names):
            self.settled = dict(load)
            return self._result("within band", total, peak, (), requests, before)
        moves = band_moves(fleet, total)
        return self._result(
            "moved" if moves else "no move worth its price", total, peak, moves, requests, before
        )

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
            now = self.fleet.split_loads.get(split)
            if now is None and split in self.fleet.present:
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
        fleet = self.fleet
        return BalanceRound(
            round=self.round,
            moves=moves,
            split_requests=requests,
            reason=reason,
            job_load=total,
            moved_load=sum(m.load for m in moves),
            imbalance_before=before,
            imbalance_after=max(fleet.load[n] / fleet.target[n] for n in fleet.names),
            state=self._next_state(peak, moves),
            loads=dict(fleet.load),
            targets=dict(fleet.target),
        )
