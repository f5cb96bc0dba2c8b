"""Revocations: giving a split back because the leader wants it elsewhere.

A held split missing from this worker's assignment is asked back (``RevokeRequested``): the
holder drains to a safe boundary, commits its tail and releases it, so nothing replays. What
bounds that, and why:

- **A live revocation** holds a rebalance open, so it gets one absolute ``drain_deadline``
  from the request; past it the split is taken away (released without waiting, ``Lost``
  "revoked"), and its uncommitted tail replays under the next owner.
- **A declined revocation** (the source cannot stop at a safe boundary) is forced at once: the
  answer will not change, and waiting would only delay the rebalance.
- **A cancelled revocation**: the leader names the split here again (the assignment is sticky
  and a draining split still holds its lease, so a membership change can revert the move).
  Forcing it then would satisfy a move nobody wants. The drain it started may still be
  running, though, and a source cannot be asked to resume intake it already stopped; so the
  entry stays as a watchdog bounded by *silence*: no commit landing for a whole
  ``drain_deadline`` forces the split back (it is re-claimed here, on a fresh handler).

Forcing is a release, never an abandonment: the owner is cleared, so the next claim consumes
no attempt — being revoked is not evidence of poison.

Outcomes keep ``requested = drained + forced + cancelled + in flight``: each request settles
exactly once, and the drain that outlives a cancellation settles silently.

Where each split's revocation stands (revoking, cancelled, forcing) is its drain phase, moved
only by the rows of :data:`~spate._core.tenancy.phase.DRAIN_TRANSITIONS`; the open
revocations and the forced releases are indexes of it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Set

import attrs

from spate._core.flows import Flow
from spate._core.host import Holdings, Host
from spate._core.tenancy.phase import DrainEvent, DrainPhase, DrainPhases
from spate._events import Lost, RevokeRequested
from spate._metrics import RevocationOutcome
from spate._quote import seconds

__all__ = ["DrainTable", "Revocations", "Revoking"]

logger = logging.getLogger("spate.revocation")


@attrs.define
class Revoking:
    """The clocks of one split draining away (whether it is cancelled is its drain phase)."""

    started: float
    """When the revocation was requested: the live deadline's anchor."""
    last_progress: float
    """When a commit last landed (a cancelled entry's silence watchdog)."""


class DrainTable:
    """The splits draining away, as the tenancies see them (:class:`~spate._core.host.Drains`).

    Built before both the claims and the revocations, and given to each: the claims tell it of
    commits and of ends, the revocations decide on it.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self.phases: DrainPhases[Revoking] = DrainPhases()
        """Each split's drain (:mod:`.phase`): the one writer of ``revoking`` and ``forcing``."""

    @property
    def revoking(self) -> Mapping[str, Revoking]:
        """The open revocations (draining or cancelled), in the order they were requested."""
        return self.phases.revoking

    def cancelled(self, split: str) -> bool:
        """Whether ``split``'s revocation was cancelled (it stays as a silence watchdog)."""
        return self.phases.drain_of(split) is DrainPhase.CANCELLED

    def note_progress(self, split: str) -> None:
        """A commit landed: the only liveness signal a draining split gives."""
        entry = self.revoking.get(split)
        if entry is not None:
            entry.last_progress = self.host.now()
            self.host.request_step()  # its deadline moved

    def settle(self, split: str, outcome: RevocationOutcome) -> None:
        """Retire a revocation under ``outcome``, exactly once (no-op if not revoking)."""
        entry = self.revoking.get(split)
        if entry is None:
            return
        cancelled = self.cancelled(split)
        self.phases.move(split, DrainEvent.SETTLE)
        if cancelled:
            return  # a cancelled revocation already counted its outcome
        self.host.metrics.revocation(outcome)
        if outcome == "drained":
            self.host.metrics.drain_duration(self.host.now() - entry.started)

    def force(self, split: str) -> None:
        """Take ``split``'s open revocation over into a forced release (counted "forced")."""
        cancelled = self.cancelled(split)
        self.phases.move(split, DrainEvent.FORCE)
        if not cancelled:
            self.host.metrics.revocation("forced")


class Revocations:
    """The splits this worker is draining away, and their deadlines."""

    def __init__(self, host: Host, holdings: Holdings, drains: DrainTable) -> None:
        self.host = host
        self.holdings = holdings
        self._drains = drains
        self._phases = drains.phases
        self.revoking = drains.revoking
        """The open revocations (an index of the drains)."""

    @property
    def forcing(self) -> Set[str]:
        """The splits whose forced release is in flight (an index of the drains)."""
        return self._phases.forcing

    def step(self, now: float) -> None:
        """Cancel, request and force revocations as the assignment and the clock say."""
        claims = self.holdings
        drains = self._drains
        for split, entry in self.revoking.items():
            if not drains.cancelled(split) and split in claims.assigned and split in claims.owned:
                logger.debug("split %s: revocation cancelled, the leader assigned it back", split)
                self._phases.move(split, DrainEvent.CANCEL)
                entry.last_progress = now
                self.host.metrics.revocation("cancelled")
        # An orphan left `owned` by a route that did not settle it: still a revocation that
        # ended, and it must be counted or the in-flight arithmetic drifts. (A split being
        # forced has no open revocation: its drain is FORCING.)
        for split in [s for s in self.revoking if s not in claims.owned]:
            drains.settle(split, "forced")
        if claims.assignment_seen:
            for split in sorted(claims.owned):
                if split in claims.assigned or split in claims.busy or split in self.forcing:
                    continue
                if split not in self.revoking or drains.cancelled(split):
                    self._request(split, now)
        deadline = self.host.config.drain_deadline
        for split, entry in list(self.revoking.items()):
            cancelled = drains.cancelled(split)
            anchor = entry.last_progress if cancelled else entry.started
            if now - anchor >= deadline:
                if cancelled:
                    logger.warning(
                        "split %s: a cancelled revocation's drain committed nothing for %s; "
                        "releasing it to be re-claimed (its uncommitted tail replays)",
                        split,
                        seconds(deadline),
                    )
                else:
                    logger.warning(
                        "split %s: drain deadline (%s) passed; forcing the revocation (its "
                        "uncommitted tail replays)",
                        split,
                        seconds(deadline),
                    )
                self.force(split)

    def next_deadline(self) -> float:
        """When the earliest drain deadline passes."""
        deadline = self.host.config.drain_deadline
        cancelled = self._drains.cancelled
        return min(
            (
                (e.last_progress if cancelled(s) else e.started) + deadline
                for s, e in self.revoking.items()
            ),
            default=math.inf,
        )

    def _request(self, split: str, now: float) -> None:
        # Re-revoking a drain that was cancelled keeps its entry: the drain never stopped, so
        # its clock does not restart — if it already outlived a deadline it is forced now.
        self._phases.move(split, DrainEvent.REQUEST, Revoking(started=now, last_progress=now))
        self.host.metrics.revocation("requested")
        self.host.emit(RevokeRequested(split))

    def decline(self, split: str) -> None:
        """The source cannot stop ``split`` at a safe boundary."""
        if split not in self.revoking:
            return  # never requested, or already settled (or being forced)
        if self._drains.cancelled(split):
            # The leader wants it here and it never stopped being read: the good ending.
            self._phases.move(split, DrainEvent.KEEP)
            return
        self.force(split)

    def force(self, split: str) -> None:
        """Take ``split`` back without waiting for its drain (its tail replays)."""
        if split in self.forcing:
            return
        self._drains.force(split)
        self.host.start(self._force_flow(split))

    def _force_flow(self, split: str) -> Flow[None]:
        try:
            result = yield from self.holdings.release_flow(split)
        finally:
            self._phases.move(split, DrainEvent.FORCED)
        if result in ("released", "failed"):
            # A fenced release already reported its loss; a missing one was not ours.
            self.host.metrics.lost("revoked")
            self.host.emit(Lost(split, "revoked"))
