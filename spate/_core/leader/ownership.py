"""How the leader learns a split's progress without watching commits.

See "Who reads what" in docs/protocol.md.

The leader watches the ephemeral keyspace (presence, leases, the leader key) and, of the
durable one, only the plan record and its own assignment record: a plain commit of any worker
is delivered to nobody. What placement, quarantine and the verdict need of a progress record
(status, attempts, the ``advanced`` flag, whether it completed) changes only with ownership,
and every ownership change moves a lease: a claim writes one, and a completion, a failure, a
hand-back, a quarantine of a leased split and an expiry remove one. So each lease event that
begins or ends a tenancy triggers one point read of that split's progress record: O(1) store
traffic per ownership change, whatever the commit rate.

Why a read after the lease event sees what it must:

- **A tenancy's end**: its last progress write (the completed commit, the failure, the
  hand-back's cleared owner) lands before its lease is deleted, and an expiry follows every
  write of the dead tenancy; so the read after the lease is gone sees the record's final state.
  That is when the leader judges completion, fair blame (``advanced``) and quarantine.
- **A claim**: the lease is written before the claim's progress CAS, so the read may see the
  record from before the claim. Nothing the leader decides needs that CAS: the lease names the
  owner (placement's notion of owner is the lease's), and the claim's attempt count matters
  only when that tenancy ends, which triggers a read of its own.

A read that fails is tried again after :data:`RETRY_AFTER`; the backstop listing of the whole
job (every reconcile interval) covers anything else.
"""

from __future__ import annotations

import logging

from spate._core.deadlines import Deadlines
from spate._core.flows import Flow, Op
from spate._core.host import Host
from spate._errors import StoreUnavailable
from spate._store import Entry, Keyspace

__all__ = ["OwnershipReads"]

logger = logging.getLogger("spate.leader")

RETRY_AFTER = 1.0
"""Seconds before a failed progress read of an ownership change is tried again."""


class OwnershipReads:
    """The leader's point reads of progress records, one per ownership change."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._due: set[str] = set()
        self._reading: set[str] = set()
        self._again: set[str] = set()
        self._retry = Deadlines()
        self.reads = 0
        """Progress records read so far (the scale benchmark reports it)."""

    def note(self, split: str) -> None:
        """A lease of ``split`` began or ended a tenancy: read its progress record soon."""
        if split in self._reading:
            self._again.add(split)  # the read in flight may predate this change
        else:
            self._due.add(split)

    def clear(self) -> None:
        """Leadership ended: nothing is read for it any more."""
        self._due.clear()
        self._again.clear()
        self._retry = Deadlines()

    def step(self, now: float) -> None:
        """Start the reads that are due."""
        self._due.update(self._retry.pop_due(now))
        for split in sorted(self._due):
            self._due.discard(split)
            self._reading.add(split)
            self.host.start(self._read(split))

    def next_deadline(self) -> float:
        """When a failed read is tried again."""
        return self._retry.next()

    def _read(self, split: str) -> Flow[None]:
        host = self.host
        try:
            self.reads += 1
            entry: Entry | None = yield Op("get", Keyspace.DURABLE, host.keys.split(split))
        except StoreUnavailable as exc:
            logger.debug("split %s: reading its progress failed (%s); retrying", split, exc)
            self._retry.set(split, host.now() + RETRY_AFTER)
            return
        finally:
            self._reading.discard(split)
            if split in self._again:
                self._again.discard(split)
                self._due.add(split)
        if entry is not None:
            host.fold(host.view.apply_put(Keyspace.DURABLE, entry))
