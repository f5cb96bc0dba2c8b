"""Leadership: this worker's part in leading the job, as one facade over named parts.

The machine talks to :class:`Leadership` alone; each rule lives in the part that owns it:

- :mod:`spate._core.leader.phase` — the leader's phase (follower, electing, fencing, deposed,
  gathering, leading) and the table of its transitions.
- :mod:`spate._core.leader.election` — election, the generation fence, renewal, resignation,
  deposition.
- :mod:`spate._core.leader.plan_writer` — the planner's runs and the records its answers become.
- :mod:`spate._core.leader.rebalance_policy` — when running splits move: the debounce, the join
  window, owed and unfinished rebalances, holds.
- :mod:`spate._core.leader.publisher` — assignment writes, nudges, split-request asks;
  :mod:`spate._core.leader.assignment_writes` — the writes in flight and the splits they anchor.
- :mod:`spate._core.leader.placement_inputs` — the worker table, the grace windows of departed
  workers, and each split's input to the placement index;
  :mod:`spate._core.leader.claim_deadline` — the workers set aside for never claiming.
- :mod:`spate._core.leader.balance_rounds` — the balance rounds: running splits moved by measured
  load.

Each module's text states its rules, each with the race it prevents. Here only the order of
one step: elect (a follower), else — once fenced and the whole job is in view — plan, let a
hold that ended owe a rebalance, run a balance round when one is due, publish, nudge, ask.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from spate._core.host import Host
from spate._core.leader.assignment_writes import AssignmentWrites
from spate._core.leader.balance_rounds import LoadBalancer, RoundOutcome
from spate._core.leader.election import Election, fingerprint_mismatch
from spate._core.leader.phase import LeaderPhase, LeaderPhases
from spate._core.leader.placement_inputs import PlacementInputs
from spate._core.leader.plan_writer import PlanWriter
from spate._core.leader.publisher import AssignmentPublisher
from spate._core.leader.rebalance_policy import RebalancePolicy
from spate._core.records import AssignmentRecord, SplitRequest
from spate._core.view.view import LeaderChanged, LeaderGone, PlanChanged
from spate._plan import Planner

__all__ = ["Leadership", "fingerprint_mismatch"]

logger = logging.getLogger("spate.leader")


def _no_requests(instance: str) -> tuple[SplitRequest, ...]:
    return ()


def _no_asks(splits: Iterable[str], now: float) -> None:
    return None


class Leadership:
    """This worker's part in leading the job (most of the time: watching someone else lead).

    ``requests`` gives the split requests outstanding to a worker (the machine's
    :class:`~spate._core.leader.split_requests.SplitRequests`); ``ask_split`` asks running splits to
    split (its ``ask_hot``: a balance round's hot splits).
    """

    def __init__(
        self,
        host: Host,
        planner: Planner,
        requests: Callable[[str], tuple[SplitRequest, ...]] = _no_requests,
        ask_split: Callable[[Iterable[str], float], None] = _no_asks,
    ) -> None:
        self.host = host
        self.phases = LeaderPhases()
        self.election = Election(host, self.phases, fenced=self._fenced, demote=self._demote)
        self.plans = PlanWriter(host, planner, self.election, demote=self._demote)
        self.policy = RebalancePolicy(host, self.phases)
        self.writes = AssignmentWrites(host, self.election)
        self.balance = LoadBalancer(host)
        self._ask_split = ask_split
        self.inputs = PlacementInputs(host, self.election, self.writes, self.balance)
        self.publisher = AssignmentPublisher(
            host, self.election, self.inputs, self.writes, self.policy, requests
        )

    @property
    def phase(self) -> LeaderPhase:
        """Where this worker stands in leading the job."""
        return self.phases.phase

    @property
    def leading(self) -> bool:
        """Whether this worker holds the leader key."""
        return self.phases.leading

    @property
    def generation(self) -> int:
        """The generation this worker leads (or last led) under."""
        return self.election.generation

    @generation.setter
    def generation(self, generation: int) -> None:
        self.election.generation = generation

    @property
    def departed(self) -> dict[str, float]:
        """Instance -> when its presence vanished, while its grace window is open."""
        return self.inputs.departed

    @property
    def verdict_generation(self) -> int | None:
        """The generation under which this worker may write the verdict now, or None.

        Only while it leads and its generation bump has landed (the verdict is fenced like every
        leader write), and never while its own plan publish is in flight: that write and the
        verdict's both CAS the plan record, and the publish that lost would step it down.
        """
        plan = self.host.view.plan
        if not self.leading or plan is None or plan.generation != self.generation:
            return None
        if not self.host.sees_job:
            return None  # its view is still a follower's share: it would judge a subset
        return None if self.plans.running else self.generation

    @property
    def seeding(self) -> int:
        """Splits of the plan this leader is writing now (0 when it writes none)."""
        return self.plans.seeding

    # -- step --------------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """Elect, plan and publish as the state says."""
        view = self.host.view
        if view.plan_unreadable is not None:
            # The plan record cannot be read: every leader write (the generation bump, the
            # plan's count, the verdict) would be built on a record it cannot see. The leader
            # stops leading and nobody is elected until it is repaired (the view said how);
            # the followers keep their assignments, their splits and their commits.
            if self.leading:
                logger.error("the plan record is unreadable; this worker stops leading")
                self.demote(resign=True)
            return
        if not self.leading:
            self.election.step(now)
            return
        if view.plan is None or view.plan.generation != self.generation:
            return  # the generation bump has not landed: no unfenced leader write
        if not self.host.sees_job:
            return  # the whole job's snapshots are not in yet: placing now would place a share
        self.plans.step(now)
        if self.policy.wake(now):
            self.host.placement_changes.owe()
        if self.inputs.claims.step(now):
            self._workers_moved(now)
        outcome = self.balance.step(now)
        if outcome is not None:
            self._apply(outcome, now)
        self.publisher.step(now)

    def _apply(self, outcome: RoundOutcome, now: float) -> None:
        """Apply what a balance round asks: hold and re-place its moves, ask its hot splits."""
        changes = self.host.placement_changes
        for move in outcome.decision.moves:
            self.policy.hold_for(move.split, outcome.held_until)
            changes.split_moved(move.split)
        if outcome.asks:
            self._ask_split(outcome.asks, now)
        changes.splits_moved(outcome.reweighed)

    def next_deadline(self, now: float) -> float:
        """The next time-based leader decision (grace windows, retries, debounce)."""
        times = [self.policy.next_deadline(now)]
        for t in (
            self.inputs.next_deadline(),
            self.publisher.next_deadline(now),
            self.plans.next_deadline(now),
            self.election.next_deadline(now),
            self.balance.next_deadline(),
            self.inputs.claims.next_deadline(),
        ):
            if t is not None:
                times.append(t)
        return min(times)

    # -- membership ----------------------------------------------------------------------------

    def on_departure(self, instance: str, now: float) -> None:
        """Another worker's presence vanished: open its grace window, and owe a rebalance.

        Every worker tracks it, not only the leader: leadership can move between the
        departure and the next publish, and a successor must still honour the window.
        """
        self.inputs.on_departure(instance, now)
        self.inputs.claims.gone(instance)
        self.policy.membership_changed(now)

    def on_presence_changed(self, instance: str, new: bool, now: float) -> None:
        """Another worker's presence was written: a returning worker closes its own grace window."""
        self.inputs.on_presence_changed(instance)
        if new:
            self.policy.membership_changed(now)

    def claimed(self, instance: str, now: float) -> None:
        """A lease of ``instance`` appeared (while leading): it claims: placement counts it."""
        if self.inputs.claims.claimed(instance):
            self._workers_moved(now)

    def freed(self, split: str, now: float) -> None:
        """``split``'s lease went (while leading): its assignees' claim clocks start."""
        self.inputs.claims.freed(split, now)

    def assignment_landed(self, instance: str, record: AssignmentRecord, now: float) -> None:
        """``instance``'s record was written (while leading): its claim clock may start."""
        self.inputs.claims.assigned(instance, record, now)

    def _workers_moved(self, now: float) -> None:
        """A worker was set aside or taken back: placement's workers moved, as on a join."""
        self.policy.membership_changed(now)
        self.host.placement_changes.owe()

    def sees_job_now(self, now: float) -> None:
        """This leader's view holds the whole job now: honour the departures it did not see."""
        self.inputs.sees_job_now(now)

    def prune_departed(self, now: float) -> None:
        """Expire grace windows (on every worker, so the map never grows without bound)."""
        self.inputs.prune_departed(now)

    def nudge_for(self, split: str) -> None:
        """``split``'s lease is gone: tell the workers it is assigned to that it is free."""
        self.publisher.nudge_for(split)

    def ask(self, instances: set[str]) -> None:
        """Rewrite these workers' assignment records to carry their split requests."""
        self.publisher.ask(instances)

    def replan_tick(self) -> None:
        """The replan timer: an open plan is planned again."""
        self.plans.replan_tick()

    def heartbeat(self) -> None:
        """Renew the leader key (while leading); give back a key of ours we do not lead by."""
        self.election.heartbeat()

    # -- what the view tells us ----------------------------------------------------------------

    def on_notice(self, notice: LeaderChanged | LeaderGone | PlanChanged) -> None:
        """Check the fingerprint; step down when deposed."""
        self.election.on_notice(notice)

    def on_assignment(self, record: AssignmentRecord) -> None:
        """An assignment record was written: one of a newer generation deposes this leader."""
        self.election.on_assignment(record)

    # -- beginning and ending ------------------------------------------------------------------

    def _fenced(self, now: float) -> None:
        """The generation bump landed: the leadership's parts begin."""
        self.policy.began_leading(now)
        self.inputs.claims.clear()
        # the job's first leader has no predecessor whose balance cooldowns it must honour
        self.balance.began_leading(now, first=self.generation == 1)
        # Every new leader plans at least once, even a final plan: a predecessor may have
        # died between seeding and publishing.
        self.plans.owed = True
        self.host.placement_changes.owe()

    def _demote(self, resign: bool) -> None:
        self.demote(resign=resign)

    def demote(self, *, resign: bool) -> None:
        """Stop leading; ``resign`` also deletes the leader key so a successor is elected now."""
        rev = self.election.step_down()
        self.plans.stop()
        self.publisher.stop()
        self.inputs.drop()
        self.balance.stop()
        self.publisher.drop()
        self.host.metrics.placement(None)
        self.plans.abandon()
        if resign and rev is not None:
            self.election.resign(rev)
