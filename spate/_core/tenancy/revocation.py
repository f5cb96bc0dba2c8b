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
"""

from __future__ import annotations

import logging
import math

import attrs

from spate._core.flows import Flow
from spate._core.host import Holdings, Host
from spate._events import Lost, RevokeRequested
from spate._metrics import RevocationOutcome
from spate._quote import seconds

__all__ = ["DrainTable", "Revocations", "Revoking"]

logger = logging.getLogger("spate.revocation")


@attrs.define
class Revoking:
    """One split draining away."""

    started: float
    """When the revocation was requested: the live deadline's anchor."""
    last_progress: float
    """When a commit last landed (a cancelled entry's silence watchdog)."""
    cancelled: bool = False


class DrainTable:
    """The splits draining away, as the tenancies see them (:class:`~spate._core.host.Drains`).

    Built before both the claims and the revocations, and given to each: the claims tell it of
    commits and of ends, the revocations decide on it.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self.revoking: dict[str, Revoking] = {}

    def note_progress(self, split: str) -> None:
        """A commit landed: the only liveness signal a draining split gives."""
        entry = self.revoking.get(split)
        if entry is not None:
            entry.last_progress = self.host.now()
            self.host.request_step()  # its deadline moved

    def settle(self, split: str, outcome: RevocationOutcome) -> None:
        """Retire a revocation under ``outcome``, exactly once (no-op if not revoking)."""
        entry = self.revoking.pop(split, None)
        if entry is None or entry.cancelled:
            return  # a cancelled revocation already counted its outcome
        self.host.metrics.revocation(outcome)
        if outcome == "drained":
            self.host.metrics.drain_duration(self.host.now() - entry.started)


class Revocations:
    """The splits this worker is draining away, and their deadlines."""

    def __init__(self, host: Host, holdings: Holdings, drains: DrainTable) -> None:
        self.host = host
        self.holdings = holdings
        self._drains = drains
        self.revoking = drains.revoking
        self.forcing: set[str] = set()

    def step(self, now: float) -> None:
        """Cancel, request and force revocations as the assignment and the clock say."""
        claims = self.holdings
        for split, entry in self.revoking.items():
            if not entry.cancelled and split in claims.assigned and split in claims.owned:
                logger.debug("split %s: revocation cancelled, the leader assigned it back", split)
                entry.cancelled = True
                entry.last_progress = now
                self.host.metrics.revocation("cancelled")
        # An orphan left `owned` by a route that did not settle it: still a revocation that
        # ended, and it must be counted or the in-flight arithmetic drifts.
        for split in [s for s in self.revoking if s not in claims.owned and s not in self.forcing]:
            self._drains.settle(split, "forced")
        if claims.assignment_seen:
            for split in sorted(claims.owned):
                if split in claims.assigned or split in claims.busy or split in self.forcing:
                    continue
                current = self.revoking.get(split)
                if current is None or current.cancelled:
                    self._request(split, now)
        deadline = self.host.config.drain_deadline
        for split, entry in list(self.revoking.items()):
            anchor = entry.last_progress if entry.cancelled else entry.started
            if now - anchor >= deadline and split not in self.forcing:
                if entry.cancelled:
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
        return min(
            (
                (e.last_progress if e.cancelled else e.started) + deadline
                for s, e in self.revoking.items()
                if s not in self.forcing
            ),
            default=math.inf,
        )

    def _request(self, split: str, now: float) -> None:
        entry = self.revoking.get(split)
        if entry is not None:
            # Re-revoking a drain that was cancelled: the drain never stopped, so its clock
            # does not restart — if it already outlived a deadline it is forced now.
            entry.cancelled = False
        else:
            self.revoking[split] = Revoking(started=now, last_progress=now)
        self.host.metrics.revocation("requested")
        self.host.emit(RevokeRequested(split))

    def decline(self, split: str) -> None:
        """The source cannot stop ``split`` at a safe boundary."""
        entry = self.revoking.get(split)
        if entry is None or split in self.forcing:
            return  # never requested, or already settled
        if entry.cancelled:
            # The leader wants it here and it never stopped being read: the good ending.
            del self.revoking[split]
            return
        self.force(split)

    def force(self, split: str) -> None:
        """Take ``split`` back without waiting for its drain (its tail replays)."""
        if split in self.forcing:
            return
        self.forcing.add(split)
        self._drains.settle(split, "forced")
        self.host.start(self._force_flow(split))

    def _force_flow(self, split: str) -> Flow[None]:
        try:
            result = yield from self.holdings.release_flow(split)
        finally:
            self.forcing.discard(split)
        if result in ("released", "failed"):
            # A fenced release already reported its loss; a missing one was not ours.
            self.host.metrics.lost("revoked")
            self.host.emit(Lost(split, "revoked"))
