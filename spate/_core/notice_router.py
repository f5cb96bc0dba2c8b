"""Where each change the view reports goes: the one routing table of the machine's notices.

A fold of a store entry into the view answers what changed (:mod:`spate._core.view.view`'s
notices); this module hands each to the components that act on it: the claims (a lease, a
progress record, this worker's assignment), the leader (a newer generation, a departure or an
arrival, a lease gone that frees a split for a waiting follower), and, while leading, the
leader's reads of progress records, its residual seeding and its split requests.
"""

from __future__ import annotations

from spate._core.host import Host
from spate._core.leader.leadership import Leadership
from spate._core.leader.ownership import OwnershipReads
from spate._core.leader.residuals import ResidualSeeds
from spate._core.leader.split_requests import SplitRequests
from spate._core.tenancy.claims import Claims
from spate._core.view.scopes import Scopes
from spate._core.view.view import (
    AssignmentChanged,
    AssignmentGone,
    LeaderChanged,
    LeaderGone,
    LeaseChanged,
    LeaseGone,
    Notice,
    PlanChanged,
    PresenceChanged,
    PresenceGone,
    ProgressChanged,
)

__all__ = ["NoticeRouter"]


class NoticeRouter:
    """Hands each notice of a fold to the components that act on it."""

    def __init__(
        self,
        host: Host,
        scopes: Scopes,
        claims: Claims,
        leader: Leadership,
        ownership: OwnershipReads,
        residuals: ResidualSeeds,
        requests: SplitRequests,
    ) -> None:
        self.host = host
        self._scopes = scopes
        self._claims = claims
        self._leader = leader
        self._ownership = ownership
        self._residuals = residuals
        self._requests = requests

    def fold(self, notices: list[Notice]) -> None:
        """Act on what changed in the view."""
        host = self.host
        for notice in notices:
            if type(notice) is ProgressChanged:
                # The bulk of them (one a split when a leader takes over): the branch below,
                # without its tests for the other kinds.
                self._claims.on_notice(notice)
                if self._leader.leading:
                    self._lead_on(notice)
            elif isinstance(notice, LeaseChanged | LeaseGone | ProgressChanged):
                self._claims.on_notice(notice)
                if isinstance(notice, LeaseGone):
                    self._leader.nudge_for(notice.split)
                if self._leader.leading:
                    self._lead_on(notice)
            elif isinstance(notice, AssignmentChanged | AssignmentGone):
                if isinstance(notice, AssignmentChanged):
                    self._leader.on_assignment(notice.record)
                    if self._leader.leading:
                        self._leader.assignment_landed(notice.instance, notice.record, host.now())
                if notice.instance == host.instance:
                    self._claims.on_assignment(notice)
            elif isinstance(notice, PresenceChanged):
                self._requests.membership_changed()
                self._on_presence(notice)
            elif isinstance(notice, PresenceGone):
                self._requests.membership_changed()
                if notice.instance != host.instance:
                    self._leader.on_departure(notice.instance, host.now())
            elif isinstance(notice, LeaderChanged | LeaderGone | PlanChanged):
                self._leader.on_notice(notice)
                if (
                    isinstance(notice, PlanChanged)
                    and notice.previous is not None
                    and notice.previous.verdict is not None
                    and notice.plan.verdict is None
                ):
                    # The operator reopened the job (spate requeue): progress records moved
                    # that no lease event tells the leader of.
                    self._scopes.relist()

    def _lead_on(self, notice: LeaseChanged | LeaseGone | ProgressChanged) -> None:
        """What a split's lease or progress tells the leader (reads, residuals, requests)."""
        host = self.host
        if isinstance(notice, ProgressChanged):
            self._residuals.found(notice.record)
            self._requests.progressed(notice.split, notice.record, notice.previous)
            return
        if isinstance(notice, LeaseGone):
            self._requests.ended(notice.split)
            self._leader.freed(notice.split, host.now())
        elif notice.new_tenancy:
            self._requests.began(notice.split, host.now())
            self._leader.claimed(notice.lease.owner, host.now())
        else:
            return
        self._ownership.note(notice.split)

    def _on_presence(self, notice: PresenceChanged) -> None:
        host = self.host
        if notice.instance == host.instance:
            if notice.nonce not in (None, host.nonce) and notice.revision > host.presence_rev:
                raise host.duplicate_instance(f"presence key {host.keys.worker(host.instance)!r}")
            return
        self._leader.on_presence_changed(notice.instance, notice.new, host.now())
        presence = host.view.presence.get(notice.instance)
        if presence is not None and presence.parents and self._leader.leading:
            # A follower split these: their records name residuals for this leader to seed.
            for parent in presence.parents:
                self._ownership.note(parent)
