"""The order of one machine step: which rules move, in which order, and when to wake next.

:meth:`spate._core.machine.Machine.step` is this: the scopes first (a worker that stopped
leading reads its share again), then the job listing, the leader's reads and requests, the
verdict (a published verdict ends the job here before any other rule acts on it), the leader,
the claims, the revocations, the hand-over poll, the gauges, and last the earliest deadline
any rule reported, which the runtime is asked to wake the machine at.

The machine builds one :class:`StepOrder` after every component it orders, and gives it
them through its constructor; it decides nothing of its own, it only keeps the order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from spate._core.host import Host
from spate._core.leader.job_listing import JobListing
from spate._core.leader.leadership import Leadership
from spate._core.leader.ownership import OwnershipReads
from spate._core.leader.residuals import ResidualSeeds
from spate._core.leader.split_requests import SplitRequests
from spate._core.leader.verdict import VerdictJudge
from spate._core.membership.handover import HandoverPoll
from spate._core.protocol import live_workers
from spate._core.tenancy.claims import Claims
from spate._core.tenancy.revocation import Revocations
from spate._core.view.scopes import Scopes
from spate._metrics import Gauges

__all__ = ["RECHECK_AFTER", "StepOrder"]

RECHECK_AFTER = 0.1
"""Seconds before the machine looks again at a rule whose deadline passed without it acting."""


class StepOrder:
    """The rules one step moves, in order, and the wake-up at the earliest deadline they report."""

    def __init__(
        self,
        host: Host,
        wake_at: Callable[[float], None],
        *,
        scopes: Scopes,
        job_listing: JobListing,
        leader: Leadership,
        ownership: OwnershipReads,
        residuals: ResidualSeeds,
        requests: SplitRequests,
        claims: Claims,
        revocations: Revocations,
        verdict: VerdictJudge,
        handover: HandoverPoll,
    ) -> None:
        self.host = host
        self._wake_at = wake_at
        """The runtime's :meth:`~spate._core.machine.Effects.wake_at`."""
        self._scopes = scopes
        self._job_listing = job_listing
        self._leader = leader
        self._ownership = ownership
        self._residuals = residuals
        self._requests = requests
        self._claims = claims
        self._revocations = revocations
        self._verdict = verdict
        self._handover = handover

    def step(self) -> None:
        """Move every rule forward from the current state (never awaits)."""
        host = self.host
        now = host.now()
        if self._scopes.read_whole_job(self._leader.leading):
            self._job_listing.scope_changed()
            if not self._leader.leading:
                # Back to a follower's watches: what it learned of its own share while it
                # led may be stale by now, so it reads its share again.
                self._ownership.clear()
                self._residuals.clear()
                self._requests.clear()
                self._claims.reread_share()
        self._job_listing.step(now)
        if self._leader.leading:
            self._residuals.step(now)
            if host.sees_job and not host.parting:
                self._requests.step(now)
                self._leader.ask(self._requests.take_unsent())
            self._ownership.step(now)
        self._leader.prune_departed(now)
        # A published verdict ends the job here before any other rule acts on it.
        self._verdict.observe()
        if not self._verdict.reported:
            if not host.parting:
                self._leader.step(now)
                self._claims.step(now)
                self._revocations.step(now)
            self._verdict.step(now)
        poll = self._handover.poll(now)
        self._report_gauges()
        for deadline in (
            poll,
            self._ownership.next_deadline(),
            self._residuals.next_deadline(),
            self._requests.next_deadline() if self._leader.leading else math.inf,
            self._job_listing.next_deadline(),
            self._leader.next_deadline(now),
            self._revocations.next_deadline(),
            self._verdict.next_deadline(),
            self._claims.next_deadline(),
        ):
            # A rule may report a deadline that has passed but that it cannot act on yet
            # (its key busy with a write in flight, say). Waking at once would step again at
            # the same instant and decide the same, forever: a busy spin, and under a mock
            # clock a hang, since virtual time never advances. Look again a moment later.
            if deadline < math.inf:
                self._wake_at(max(deadline, now + RECHECK_AFTER))

    def _report_gauges(self) -> None:
        host = self.host
        tallies = host.view.tallies
        host.metrics.gauges(
            Gauges(
                owned=len(self._claims.owned),
                completed=tallies.completed,
                quarantined=tallies.quarantined,
                draining=len(self._revocations.revoking),
                live_workers=live_workers(host.view.presence.keys(), host.instance),
                leader=self._leader.leading,
                idle=not self._claims.owned,
            )
        )
