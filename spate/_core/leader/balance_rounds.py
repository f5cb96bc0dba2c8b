"""The leader's balance rounds: running splits move by measured load (docs/balancing.md).

Every ``Config.balance_interval`` of the leader's clock, while it leads and only once some
worker's presence record carries a load summary (:mod:`spate._core.tenancy.load_reports`), the
leader builds the inputs of :func:`~spate._core.balance.plan_balance_round` from the workers'
summaries and the running splits, and hands back what the decision asks of the rest of the
leader (a :class:`RoundOutcome`, which :class:`~spate._core.leader.leadership.Leadership`
applies):

- **A move is a placement change**: the split is anchored on its target in the placement
  index (:meth:`LoadBalancer.target_of`, read by
  :meth:`~spate._core.leader.placement_inputs.PlacementInputs.placement_input`), so the target's
  assignment names it and the source's no longer does: the source gets the graceful
  revocation every reassignment gets (drain, commit, hand back: nothing replayed when the
  handler commits on ``revoke_requested``). The anchor stands until the target holds it (or
  leaves).
- **A moved split stays put for the cooldown** (``cooldown_rounds`` rounds): the rebalance
  policy holds it (:meth:`~spate._core.leader.rebalance_policy.RebalancePolicy.hold_for`), so a
  membership change in the meantime does not undo the move, and the next rounds do not move
  it either (the round's own state).
- **The last trusted load is kept across a move** until the new owner's measurement is
  trusted: a split's new owner measures it afresh, and without it the receiver would read as
  colder than it is and be given more.
- **Placement weighs splits by the same load** once loads are reported
  (:meth:`LoadBalancer.load_units`): otherwise the next membership change would balance by
  weight and undo the moves made by load.
- **Hot splits are asked to split** (``Config.split_requests``): a trusted split hotter than
  twice the mean worker load, then it and its residuals while a piece alone is too heavy for
  any worker's band (the planner's rule 5).
- **A new leader honours its predecessor's cooldowns**: it runs no round until a full
  cooldown (``cooldown_rounds`` x ``balance_interval``) after its leadership began, unless it
  is the job's first leader (generation 1), whose first round comes one interval in.

  Why: the rounds' state (which split moved when) lives in the leader's memory, so a new
  leader starts with none. Any split a predecessor moved, it moved before the new leader's
  generation bump landed (a deposed leader's later writes lose to the newer generation), so
  a full cooldown later every such cooldown has run out, and the new leader's first round
  cannot move a split within its cooldown, whoever moved it. No store write is needed, and
  nothing can fool the rule: it reads nothing but its own clock. The finer rule (seed the
  state from the splits whose current tenancy began within the cooldown) would need each
  tenancy's start on a clock the leader can trust, which the records carry only as advisory
  wall-clock stamps. The price is a pause: after a failover the job is balanced again
  ``cooldown_rounds`` intervals later (three minutes at the defaults) instead of one, which
  a failover's own reshuffling mostly overshadows, and a generation-1 leader has had no
  predecessor to honour. (Placement's holds, :meth:`~spate._core.leader.rebalance_policy.
  RebalancePolicy.hold_for`, are also the old leader's alone: a membership change right
  after a failover may move a just-moved split, as any placement change may.)

A job whose workers report nothing is untouched: no round runs, no input changes, placement
weighs by weight exactly as before.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Set

import attrs

from spate._config import Config
from spate._core.balance import (
    BalanceConfig,
    BalanceRound,
    BalanceSplit,
    BalanceState,
    BalanceWorker,
)
from spate._core.balance import plan_balance_round as plan
from spate._core.balance.loads import split_loads
from spate._core.host import Host
from spate._core.placement.split_load import measured_units, split_load, unmeasured_units
from spate._core.records import PresenceRecord, SplitLoad, Status
from spate._metrics import SPLIT_LOADS_REPORTED, BalanceReport

__all__ = ["LoadBalancer", "RoundOutcome", "balance_config"]


def balance_config(config: Config) -> BalanceConfig:
    """The balance knobs of a worker's ``config`` (what its rounds run with, when it leads).

    ``Config`` built them once, when it checked them: the fields it shares with
    :class:`BalanceConfig` are copied by their shared names (``spate._config.BALANCE_KNOBS``).
    """
    return config._balance


@attrs.frozen
class RoundOutcome:
    """What one round asks of the rest of the leader: its caller applies it, in this order.

    For each move, in the round's order: hold it (the rebalance policy) until ``held_until``,
    and tell placement its input moved; then ask the hot splits to split; then tell placement
    the splits whose load units changed.
    """

    decision: BalanceRound
    """The round's decision (its moves are the placement changes)."""
    held_until: float
    """When the moved splits' holds end (a cooldown from the round)."""
    asks: tuple[str, ...]
    """The running splits to ask to split (none when ``Config.split_requests`` is off)."""
    reweighed: Set[str]
    """The splits whose load in placement's units changed (:meth:`LoadBalancer.load_units`)."""


class LoadBalancer:
    """The leader's balance rounds and the moves they made (see the module text)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.state = BalanceState()
        self.round = 0
        self.last: BalanceRound | None = None
        """The last round's decision (``spate status`` and the metrics read it)."""
        self._next_at: float | None = None
        self._moving: dict[str, str] = {}
        """Split -> the worker a round moved it to, until that worker holds it (or leaves)."""
        self._carried: dict[str, float] = {}
        """Split -> its last trusted load, kept across a move (see the module text)."""
        self._joined: dict[str, float] = {}
        """Worker -> when this leader first saw it."""
        self._units: dict[str, int] = {}
        """Split -> its load in placement's units (empty until loads are reported)."""

    @property
    def config(self) -> BalanceConfig:
        """The balance knobs of this worker's config (built once, with the config)."""
        return balance_config(self.host.config)

    # -- leadership ------------------------------------------------------------------------------

    def began_leading(self, now: float, *, first: bool = False) -> None:
        """Leadership began, with a fresh state: the first round comes a full cooldown from now.

        ``first``: this is the job's first leadership (generation 1), with no predecessor whose
        cooldowns to honour: its first round comes one interval from now (see the module text).
        """
        self.stop()
        interval = self.host.config.balance_interval
        if interval > 0:
            self._next_at = now + (interval if first else self.config.cooldown_rounds * interval)

    def stop(self) -> None:
        """Leadership ended: what a round decided is the next leader's to decide again."""
        if self.last is not None:
            self.host.metrics.balance(None)
            self.last = None
        self.state = BalanceState()
        self.round = 0
        self._next_at = None
        self._moving.clear()
        self._carried.clear()
        self._joined.clear()
        self._units.clear()

    def next_deadline(self) -> float | None:
        """When the next round is due (None: balancing is off, or this worker does not lead)."""
        return self._next_at

    # -- what placement reads ----------------------------------------------------------------------

    def target_of(self, split: str) -> str | None:
        """The worker a round moved ``split`` to, while that move has not landed."""
        target = self._moving.get(split)
        if target is None:
            return None
        view = self.host.view
        state = view.splits.get(split)
        if target not in view.presence or state is None or state.current_owner == target:
            del self._moving[split]  # landed, or the target left: placement's again
            return None
        return target

    def load_units(self, split: str, weight: int) -> int:
        """The load ``split`` puts on a worker, for placement (its weight's until measured)."""
        units = self._units.get(split)
        if units is not None:
            return units
        return unmeasured_units(weight) if self._units else split_load(weight)

    # -- a round -----------------------------------------------------------------------------------

    def step(self, now: float) -> RoundOutcome | None:
        """Run a round if one is due and some load was reported; return what it asks."""
        if self._next_at is None or now < self._next_at:
            return None
        self._next_at = now + self.host.config.balance_interval
        view = self.host.view
        reports = {i: p for i, p in view.presence.items() if p is not None and p.reports_load}
        if not reports:
            return None  # nothing measured: the job is placed exactly as before
        for instance in view.presence:
            self._joined.setdefault(instance, now)
        self.round += 1
        workers = self._workers()
        splits = self._splits(reports)
        decision = plan(workers, splits, self.config, self.state, round=self.round, now=now)
        self.state = decision.state
        self.last = decision
        cooldown = self.config.cooldown_rounds * self.host.config.balance_interval
        for move in decision.moves:
            self._moving[move.split] = move.target
            self._carried[move.split] = move.load
        asks = decision.split_requests if self.host.config.split_requests else ()
        reweighed = self._reweigh(splits)
        self.host.metrics.balance(_report(decision, splits))
        return RoundOutcome(decision, now + cooldown, tuple(asks), reweighed)

    def _workers(self) -> list[BalanceWorker]:
        view, cap = self.host.view, self.host.config.max_in_flight
        return [
            BalanceWorker(
                name=instance,
                lanes=max(1, p.max_in_flight if p is not None and p.max_in_flight > 0 else cap),
                capacity=p.capacity if p is not None and p.capacity > 0 else 1.0,
                locality=p.locality if p is not None else "",
                joined_at=self._joined[instance],
            )
            for instance, p in sorted(view.presence.items())
        ]

    def _splits(self, reports: dict[str, PresenceRecord]) -> list[BalanceSplit]:
        """The running splits with the loads the leader balances by (:mod:`.balance_loads`)."""
        view = self.host.view
        held: dict[str, list[str]] = {}
        for split, state in view.splits.items():
            owner = state.current_owner
            if (
                owner is None
                or owner not in view.presence
                or state.spec is None
                or state.progress.status is not Status.RUNNABLE
                or state.progress.completed
            ):
                continue
            held.setdefault(owner, []).append(split)
        owner_of = {split: owner for owner, names in held.items() for split in names}
        loads = split_loads(held, reports, self._carried)
        out: list[BalanceSplit] = []
        for split, (load, carried) in loads.items():
            if load is not None and not carried:
                self._carried.pop(split, None)  # its new owner's own load is trusted now
            spec = view.splits[split].spec
            assert spec is not None
            out.append(
                BalanceSplit(
                    id=split, owner=owner_of[split], load=load or 0.0,
                    trusted=load is not None, weight=spec.weight, affinity=spec.locality,
                    parent=spec.parent,
                )
            )  # fmt: skip
        return out

    def carried_loads(self) -> tuple[SplitLoad, ...]:
        """The loads carried across moves, of the splits still running.

        The leader's presence record publishes them, so ``spate status`` counts a moved split
        as this leader does.
        """
        view = self.host.view
        out = []
        for split, load in sorted(self._carried.items()):
            state = view.splits.get(split)
            if (
                state is None
                or state.progress.status is not Status.RUNNABLE
                or state.progress.completed
            ):
                continue
            out.append(SplitLoad(split=split, rate=load))
        return tuple(out)

    def _reweigh(self, splits: list[BalanceSplit]) -> Set[str]:
        """Give placement each split's load in its units, scaled by the job's mean per weight.

        Returns the splits whose units changed (placement's inputs that moved).
        """
        trusted = [s for s in splits if s.trusted]
        weight = sum(split_load(s.weight) for s in trusted)
        total = math.fsum(s.load for s in trusted)
        if weight == 0 or total <= 0:
            return frozenset()
        per_weight = total / weight
        units = {
            s.id: measured_units(s.load, per_weight) if s.trusted else unmeasured_units(s.weight)
            for s in splits
        }
        if not self._units:
            changed = set(self.host.view.splits)  # every split now counts in load units
        else:
            changed = {s for s, u in units.items() if self._units.get(s) != u}
            changed.update(s for s in self._units if s not in units)
        self._units = units
        return changed


def _report(decision: BalanceRound, splits: list[BalanceSplit]) -> BalanceReport:
    heaviest = heapq.nlargest(SPLIT_LOADS_REPORTED, ((s.load, s.id) for s in splits if s.trusted))
    return BalanceReport(
        round=decision.round,
        reason=decision.reason,
        moves=tuple((m.split, m.source, m.target, m.load) for m in decision.moves),
        moved_load=decision.moved_load,
        job_load=decision.job_load,
        imbalance_before=decision.imbalance_before,
        imbalance_after=decision.imbalance_after,
        worker_loads=tuple(sorted(decision.loads.items())),
        split_loads=tuple((split, load) for load, split in heaviest),
    )
