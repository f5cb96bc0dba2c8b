"""What a claim's failed write leaves to do: hold the split back, read an unsure lease back.

Two rules, each with the race it prevents:

- **A split whose write failed waits a moment.** A store error, or a refusal the watch has
  yet to explain, holds the split back for :data:`RETRY_AFTER_ERROR`: retrying at once would
  meet the same refusal and spin against the store until the watch catches up. The claims
  skip a held-back split until its retry comes due (:class:`ClaimRetries.retry_at`).
- **A lease write of unknown outcome is read back.** A write that timed out for its sender
  can still land later; a follower watches no lease, its own included, so a key of ours that
  landed unseen would stand for ever under this worker's live session. Its key is read back
  every beat for :data:`UNSURE_LEASE_FOR` leases; read back, a key of ours becomes a stray
  that the tenancies give back.

:class:`~spate._core.tenancy.claims.Claims` builds one :class:`ClaimRetries` and starts the
read-backs it names on each heartbeat.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Final

from spate._core.deadlines import Deadlines
from spate._core.flows import Flow, Op
from spate._core.host import Host
from spate._core.tenancy.tenancies import Tenancies
from spate._errors import StoreUnavailable
from spate._store import Entry, Won

__all__ = ["REFUSED", "RETRY_AFTER_ERROR", "UNSURE_LEASE_FOR", "ClaimRetries"]

logger = logging.getLogger("spate.claims")


class Refused(enum.Enum):
    """The one value of :data:`REFUSED`."""

    REFUSED = "refused"


REFUSED: Final = Refused.REFUSED
"""A guarded write of a claim that lost, left for the caller to read its key again."""

RETRY_AFTER_ERROR = 1.0
"""Seconds before a split whose claim or quarantine hit a store error is tried again."""
UNSURE_LEASE_FOR = 3
"""Leases after a lease write of unknown outcome for which its key is read back every beat:
a write that timed out for its sender can still land later (a request the store applies
after its client gave up on it)."""


class ClaimRetries:
    """Splits held back after a failed write, and lease writes of ours of unknown outcome."""

    def __init__(self, host: Host, tenancies: Tenancies) -> None:
        self.host = host
        self.tenancies = tenancies
        """The splits held here: a lease read back for a split held is settled."""
        self.retry_at = Deadlines()
        """Splits held back after a store error, until their retry is due."""
        self._unsure_leases: dict[str, float] = {}
        """Splits whose lease write of ours failed with an unknown outcome (it may have landed,
        or land later), and until when to keep reading its key back."""

    # -- holding a split back ----------------------------------------------------------------

    def retry_later(self, split: str) -> None:
        """Hold ``split`` back a moment: a store error or a refusal the watch has yet to explain."""
        logger.debug(
            "split %s: held back %g s before its claim is tried again", split, RETRY_AFTER_ERROR
        )
        self.retry_at.set(split, self.host.now() + RETRY_AFTER_ERROR)

    def write_or_retry_later(
        self, op: Op, what: str, *, maybe_landed: Callable[[], None] | None = None
    ) -> Flow[Won | None]:
        """Perform ``op``, a write on a split's key: Won, or None with the split held back.

        A store error, or a refusal the watch has yet to explain, holds the split back for
        :data:`RETRY_AFTER_ERROR`: retrying at once would meet the same refusal and spin
        against the store until the watch catches up.
        """
        result = yield from self.write_or_refused(op, what, maybe_landed=maybe_landed)
        if result is REFUSED:
            assert op.split is not None
            self.retry_later(op.split)
            return None
        return result

    def write_or_refused(
        self, op: Op, what: str, *, maybe_landed: Callable[[], None] | None = None
    ) -> Flow[Won | Refused | None]:
        """Perform ``op`` as :meth:`write_or_retry_later` does, but answer a refusal REFUSED.

        A refusal holds nothing back: the caller reads the key again, so that its one retry
        is built on what the store holds now.
        """
        assert op.split is not None
        try:
            result = yield op
        except StoreUnavailable as exc:
            logger.warning("split %s: %s failed (%s); retrying later", op.split, what, exc)
            self.retry_later(op.split)
            if maybe_landed is not None:
                maybe_landed()
            return None
        if not isinstance(result, Won):
            return REFUSED
        return result

    # -- lease writes of unknown outcome -----------------------------------------------------

    def unsure(self, split: str, *, again: bool = False) -> None:
        """A lease write of ours for ``split`` may have landed, or may land: read it back.

        ``again``: a read-back failed. The window then runs UNSURE_LEASE_FOR leases from this
        failure, not from the write: an outage longer than the window left no read-back that
        reached the store (simulator seed 2006: a 12 s outage after a lost reply, with a 2 s
        lease), and the key stood under this worker's live session for ever.
        """
        until = self.host.now() + UNSURE_LEASE_FOR * self.host.lease
        if again:
            until = max(until, self._unsure_leases.get(split, until))
            self._unsure_leases[split] = until
        else:
            self._unsure_leases.setdefault(split, until)

    def leases_to_read(self, now: float) -> list[str]:
        """The splits whose unsure lease to read back now (those settled or past are dropped).

        In split order; the caller skips a split that has a flow in flight.
        """
        owned = self.tenancies.owned
        due: list[str] = []
        for split, until in sorted(self._unsure_leases.items()):
            if split in owned or now > until:
                del self._unsure_leases[split]
            else:
                due.append(split)
        return due

    def read_lease(self, split: str) -> Flow[None]:
        """Read back a lease write of ours whose outcome is unknown.

        A follower watches no lease, its own included: a claim whose lease write landed unseen
        and whose split then left its assignment would leave a key nobody else can claim past,
        and that on a session store this worker's keepalive keeps for ever. Read back, a key of
        ours becomes a stray, given back a beat later; a failed read tries again next beat.
        """
        host = self.host
        view = host.view
        keyspace, key = view.lease_keyspace, view.lease_key(split)
        try:
            entry: Entry | None = yield Op("get", keyspace, key)
        except StoreUnavailable:
            if split not in self.tenancies.owned:
                self.unsure(split, again=True)  # read again next beat, for longer
            return
        if split in self.tenancies.owned:
            return
        if entry is None:
            # Not there yet: a write that timed out for us may still land later (simulator
            # seed 18773: it landed after this read, and its split had left our assignment).
            # Read again every beat, for UNSURE_LEASE_FOR leases from the write.
            host.fold(view.apply_delete(keyspace, key, None))
        else:
            self._unsure_leases.pop(split, None)
            host.fold(view.apply_put(keyspace, entry))
