"""When running splits move: the leader's rebalance policy, in one place.

Placement (:class:`~spate._core.placement.index.PlacementIndex`) only moves a running split for
spread and balance when it is told a rebalance is allowed, and never moves a split it is told is
held. This module decides both; the view and the publisher only report what happened. A new
trigger (say, measured load drifting out of its band) is one more caller of
:meth:`RebalancePolicy.owe`.

- **Gathering**: the first assignment of a *new job* (the leader sees no assignment record at
  all: no worker can have claimed a split, since claims follow assignments) waits until
  membership has been quiet for ``membership_debounce`` (the join window), each arrival or
  departure extending it, but never past ``JOIN_WINDOWS`` windows after leadership began (a
  steady trickle of joins must not postpone the first assignment for ever). A fleet started
  together then places each split once: published at once, the first worker to see the plan
  would be given everything and the others would take it back from it, a drain each.
- **The debounce**: after a join or departure the full placement waits until membership has
  been quiet for ``membership_debounce``; meanwhile the publisher hands out unowned splits only.
- **Moves with a cause**: the placement's spread and balance steps, which move running splits,
  run only when a *rebalance is owed*: a join or departure since the last one (or leadership
  began: a new leader cannot know what changed while nobody led), or a rebalance the last
  publish could not finish (a worker's write was still in flight). Completions, claims and
  hand-backs alone never move a running split; the debounce still hands unowned splits out
  at once. At the end of a bounded job no worker comes or goes, so running splits stay put:
  an idle lane there is for splitting, and a move would only add a drain.
- **Moves by load stay put**: a split a balance round moved
  (:mod:`spate._core.leader.balance_rounds`)
  is held until its cooldown ends (:meth:`RebalancePolicy.hold_for`), so a membership change
  meanwhile does not undo it.
- **One drain per split per window**: a running split a rebalance moved is *held* for
  ``drain_deadline``: no rebalance in that window moves it again (its first drain may still be
  under way). The window holds that split, not the fleet: a second join right after the first
  is still served at once from the splits nobody moved, so a live worker with free lanes never
  waits out a drain window idle while another holds more than its share (two workers joining
  10 ms apart, the second was once left idle for the whole job). When the window of a held
  split ends, the rebalance runs once more, for what holding it kept from moving.
"""

from __future__ import annotations

import math

from spate._core.host import Host
from spate._core.leader.phase import LeaderEvent, LeaderPhase, LeaderPhases
from spate._core.placement.index import PlacementIndex
from spate._core.records import Status

__all__ = ["JOIN_WINDOWS", "RebalancePolicy"]

JOIN_WINDOWS = 3
"""A new job's first assignment waits at most this many join windows after leadership began."""


class RebalancePolicy:
    """The decision of when running splits move: the debounce, the join window, owed, holds."""

    def __init__(self, host: Host, phases: LeaderPhases) -> None:
        self.host = host
        self.phases = phases
        self._debounce_until = 0.0
        self._lead_since = 0.0
        self._join_until = 0.0
        """While the job is new: when its first assignment may be published."""
        self._owed = True
        """A rebalance is owed: a trigger fired (or the last one could not finish)."""
        self._held_back = False
        """The last rebalance left a move undone for a held split: owed when a hold ends."""
        self._held: dict[str, tuple[float, str]] = {}
        """Split -> when a rebalance moved it while it ran, and to whom (see :meth:`_holding`)."""
        self._wake_at = math.inf
        """When the first hold may end: the leader looks again then."""
        self._balanced: dict[str, float] = {}
        """Split -> until when a balance round's move of it holds (its cooldown)."""

    # -- triggers ------------------------------------------------------------------------------

    def owe(self) -> None:
        """A rebalance is owed: the next publish out of the debounce runs one."""
        self._owed = True

    def began_leading(self, now: float) -> None:
        """The fence landed: a new job waits for the fleet, and a rebalance is owed."""
        self._lead_since = now
        self._join_until = now + self.host.config.membership_debounce
        self.owe()
        self._held.clear()
        self._balanced.clear()
        self._held_back = False
        self._wake_at = math.inf

    def membership_changed(self, now: float) -> None:
        """A worker came or went: owe a rebalance, after the debounce (and the join window)."""
        self.owe()
        debounce = self.host.config.membership_debounce
        if debounce > 0:
            self._debounce_until = now + debounce
            if self.phases.phase is LeaderPhase.GATHERING:
                self._join_until = min(
                    max(self._join_until, now + debounce),
                    self._lead_since + JOIN_WINDOWS * debounce,
                )

    def wake(self, now: float) -> bool:
        """Whether a hold may have ended by ``now`` (the placement is to be decided again)."""
        if now >= self._wake_at:
            self._wake_at = math.inf
            return True
        return False

    def next_deadline(self, now: float) -> float:
        """The next time this policy decides anew: a debounce, a join window, a hold ending."""
        times = [math.inf]
        for t in (self._debounce_until, self._wake_at):
            if t > now:
                times.append(t)
        if self.phases.phase is LeaderPhase.GATHERING and self._join_until > now:
            times.append(self._join_until)
        return min(times)

    # -- the decision --------------------------------------------------------------------------

    def gathering(self, now: float) -> bool:
        """Whether a new job's first assignment still waits for the fleet to gather."""
        if self.phases.phase is not LeaderPhase.GATHERING:
            return False
        if self.host.view.assignments or now >= self._join_until:
            # Gathered: the join window was the debounce of this first placement.
            self.phases.apply(LeaderEvent.GATHERED)
            self._debounce_until = min(self._debounce_until, now)
            return False
        return True

    def debouncing(self, now: float) -> bool:
        """Whether membership changed within the debounce: only unowned splits go out."""
        return now < self._debounce_until

    def decide(self, index: PlacementIndex, now: float, *, debouncing: bool) -> bool:
        """Tell ``index`` whether running splits may move now, and which are held; return it."""
        held = self._holding(now)
        rebalance = not debouncing and self._owed
        index.set_rebalance(rebalance)
        if rebalance:
            index.set_held(held)
        return rebalance

    def rebalanced(self, index: PlacementIndex) -> set[str]:
        """The rebalance ``index`` solved is made: the running splits it moves."""
        self._owed = False
        moving = index.moves_running()
        self._held_back = index.held_back()
        return moving

    def unfinished(self) -> None:
        """A rebalance's move could not be written yet: the next publish carries it on."""
        self._owed = True

    def hold(self, moving: set[str], splits: tuple[str, ...], now: float, to: str) -> None:
        """``to``'s write that makes these moves started: hold each moved split a window.

        Held once its move is written: a move whose write waits is not made yet, and the
        publish that carries the rebalance on must still be free to make it.
        """
        for split in moving.intersection(splits):
            self._held.setdefault(split, (now, to))

    def hold_for(self, split: str, until: float) -> None:
        """A balance round moved ``split``: no rebalance moves it again before ``until``."""
        self._balanced[split] = max(until, self._balanced.get(split, until))

    def wake_for_holds(self, now: float) -> None:
        """Have the leader look again when the next hold may end."""
        window = self.host.config.drain_deadline
        for since, _ in self._held.values():
            at = since + window if now < since + window else since + 2 * window
            if at > now:
                self._wake_at = min(self._wake_at, at)

    def _holding(self, now: float) -> frozenset[str]:
        """The splits a rebalance moved and holds still (see the module text).

        A hold lasts a drain window, and past it for as long as the move has not landed (the
        split's owner is not yet the worker it was moved to), up to a second window: a drain
        forced at its deadline is still in transit, and moving it again then would ask for a
        second drain of a split whose first has only just been forced. A hold that ends owes
        a rebalance: the one it held back.
        """
        window = self.host.config.drain_deadline
        view = self.host.view
        ended = []
        for split, (since, target) in self._held.items():
            if now < since + window:
                continue
            state = view.splits.get(split)
            landed = (
                state is None
                or state.progress.status is not Status.RUNNABLE
                or state.progress.completed
                or state.current_owner == target
                or target not in view.presence
            )
            if landed or now >= since + 2 * window:
                ended.append(split)
        for split in ended:
            del self._held[split]
        if ended and self._held_back:
            self._held_back = False
            self._owed = True
        if self._balanced:
            for split in [s for s, until in self._balanced.items() if now >= until]:
                del self._balanced[split]
            return frozenset(self._held).union(self._balanced)
        return frozenset(self._held)
