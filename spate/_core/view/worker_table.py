"""The view's worker table: every worker's presence record, and whose session lives.

A worker's presence key is its membership (its lane budget and locality, which placement
reads) and, on a per-key store, its session: a lease lives while its owner's presence stands
under the lease's nonce. :class:`WorkerTable` keeps the records the view folded and answers
both; the view (:mod:`spate._core.view.view`) decides what a write or a deletion means.

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

from spate._core.records import LeaseRecord, PresenceRecord

__all__ = ["WorkerTable"]


class WorkerTable:
    """The presence records of one job's workers, as one worker's view folded them."""

    def __init__(self, *, session_leases: bool, own: tuple[str, str] | None) -> None:
        self.session_leases = session_leases
        """Leases are durable keys alive by their owner's session (a per-key TTL store)."""
        self._own = own
        """This worker's (instance, nonce): its own session is alive for as long as it runs."""
        self.presence: dict[str, PresenceRecord | None] = {}
        """Instance -> its presence record (None when its value was unreadable)."""
        self.workers_seq = 0
        """Moves whenever a worker comes, goes, or changes its lanes or locality (not on a
        renewal that changes neither): what the leader's placement reads of presence."""

    def put(self, instance: str, presence: PresenceRecord | None) -> tuple[bool, bool, bool]:
        """Store ``instance``'s record; returns (new, membership moved, session moved).

        Its membership moved (:attr:`workers_seq`) when it is new or its lanes or locality
        changed; its session moved when it is new or its nonce changed (or either record was
        unreadable): its leases may live or expire with it.
        """
        new = instance not in self.presence
        before = self.presence.get(instance)
        self.presence[instance] = presence
        moved = new or _cap(before) != _cap(presence) or _locality(before) != _locality(presence)
        if moved:
            self.workers_seq += 1
        nonce = None if presence is None else presence.nonce
        session = new or before is None or presence is None or before.nonce != nonce
        return new, moved, session

    def remove(self, instance: str) -> None:
        """``instance``'s presence key is gone: the worker left."""
        self.presence.pop(instance, None)
        self.workers_seq += 1

    def session_live(self, lease: LeaseRecord) -> bool:
        """Whether ``lease``'s session lives, as far as this view knows.

        On a per-key store a lease is alive while its owner's presence record (its session)
        stands under the lease's nonce; this worker's own session lives while it runs (its
        self-fence ends its tenancies first). An unreadable presence counts as alive: the
        safe side, since a live lease is never taken over. On a session store a lease key
        lives exactly as long as its session, so a lease the view holds is alive.
        """
        if not self.session_leases:
            return True
        if self._own is not None and (lease.owner, lease.nonce) == self._own:
            return True
        if lease.owner not in self.presence:
            return False
        presence = self.presence[lease.owner]
        return presence is None or presence.nonce == lease.nonce


def _cap(presence: PresenceRecord | None) -> int:
    return 0 if presence is None else presence.max_in_flight


def _locality(presence: PresenceRecord | None) -> str:
    return "" if presence is None else presence.locality
