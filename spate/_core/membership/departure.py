"""Leaving the job: resign, hand every split back at once, then delete the presence key.

Every split is handed back at once (their writes go to different keys); once every owner is
cleared, the leases are dropped at once and the presence key with them. So leaving takes two
writes' time however many splits are held, and the leader sees the departure with the leases
already freed: the new owners claim them all together. From the first moment of a departure
the worker claims nothing new (:attr:`Departure.parting`).
"""

from __future__ import annotations

from spate._core.flows import Flow, Fork
from spate._core.host import Host, ReleaseOutcome
from spate._core.leader.leadership import Leadership
from spate._core.membership.handover import HandoverPoll
from spate._core.membership.presence import Presence
from spate._core.tenancy.tenancies import Tenancies
from spate._errors import StoreUnavailable

__all__ = ["Departure"]


class Departure:
    """This worker's departure, and the API's hand-back of some of its splits."""

    def __init__(
        self,
        host: Host,
        leader: Leadership,
        tenancies: Tenancies,
        handover: HandoverPoll,
        presence: Presence,
    ) -> None:
        self.host = host
        self._leader = leader
        self._tenancies = tenancies
        self._handover = handover
        self._presence = presence
        self.parting = False
        """Whether this worker is leaving the job (it claims nothing new)."""

    def release_all_flow(self, splits: list[str]) -> Flow[None]:
        """Hand ``splits`` back, all at once (different keys: their writes overlap)."""
        outcomes = yield Fork(tuple(self._tenancies.release_flow(split) for split in splits))
        # An exception out of a hand-back is fatal, as it was when they ran one after another.
        self.host.metrics.released(sum(o.unwrap() == "released" for o in outcomes))

    def depart_flow(self) -> Flow[BaseException | None]:
        """Leave the job: resign, hand every split back at once, delete the presence key."""
        self.parting = True
        self.host.request_step()
        self._leader.demote(resign=True)
        tenancies = self._tenancies
        self._handover.handing_over = sorted(tenancies.owned)
        results = yield from tenancies.hand_back_all_flow(
            sorted(tenancies.owned), self._presence_after
        )
        self.host.metrics.released(results.count("released"))
        if "failed" in results:
            # The store cannot be reached: the hand-backs were all in flight together, so they
            # timed out together (about one operation timeout). Stop holding whatever is left
            # without writing, and let the session's end (expiry, if it cannot be revoked)
            # free it.
            for rest in sorted(tenancies.owned):
                tenancies.abandon(rest)
            return StoreUnavailable(
                "the store could not be reached while leaving, so the hand-back was not "
                "written; this worker's splits move to others when its session's keys expire "
                "(within a lease)"
            )
        return None

    def _presence_after(self, results: list[ReleaseOutcome]) -> Flow[None] | None:
        """The presence delete that goes with a departure's lease drops (none if it failed)."""
        return None if "failed" in results else self._presence.delete_flow()
