"""This worker's presence record: the announce, its renewal (a per-key store's session), its delete.

- **Announce** writes the presence key, taking over one left under this instance id (a
  predecessor not yet expired; a live twin finds our nonce at its next renewal and stops).
- **Renewal**, once a heartbeat, by CAS on the revision it last wrote. A renewal that finds the
  key gone on a per-key store means the session expired: every lease it kept expired with it,
  so those tenancies end before a new presence record could make their leases look alive
  again. A key holding another nonce is a second live worker under this instance id: fatal.
- **The record** advertises the lane budget and locality, and (a follower) the splits it split
  since its last landed write, so a split made without the leader's request reaches the leader
  within a heartbeat, at no extra write. A worker that measures load also carries its capacity
  and a bounded summary of its splits' loads (:mod:`spate._core.tenancy.load_reports`), for the
  leader's balance rounds; one that measures nothing writes exactly what it wrote before.
  The leader also carries the loads it keeps across its balance moves
  (:attr:`PresenceRecord.carried`), so ``spate status`` counts a moved split as it does.
- **Delete** on departure, so the other workers rebalance now, not after a TTL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from spate._core.flows import Flow, Hold, Op
from spate._core.host import Host
from spate._core.records import PresenceRecord, SplitLoad, UnreadableRecord, decode, encode
from spate._core.tenancy.tenancies import Tenancies
from spate._errors import StoreUnavailable
from spate._store import Conflict, Entry, Keyspace, Won

__all__ = ["Presence"]

logger = logging.getLogger("spate.coordinator")

EPHEMERAL = Keyspace.EPHEMERAL


class Presence:
    """This worker's presence key: written at startup, renewed each beat, deleted on leaving."""

    def __init__(
        self,
        host: Host,
        locality: str,
        tenancies: Tenancies,
        leading: Callable[[], bool],
        carried: Callable[[], tuple[SplitLoad, ...]] = tuple,
    ) -> None:
        """``carried()`` answers the loads the leader carries across its moves (while leading)."""
        self.host = host
        self.locality = locality
        self._tenancies = tenancies
        self._leading = leading
        self._carried = carried
        self.rev = 0
        """Revision of this worker's presence key as it last wrote (or adopted) it."""
        self.ok_at = 0.0
        """When the last presence write that landed was sent (on a per-key store, the session's
        last confirmed renewal: every lease of this worker lives until at least then + TTL)."""

    @property
    def key(self) -> str:
        """This worker's presence key."""
        return self.host.keys.worker(self.host.instance)

    def record(self) -> bytes:
        """This worker's presence value (it advertises its lane budget and locality).

        A follower also names the splits it split since its last landed presence write (see
        :attr:`PresenceRecord.parents`): a split made without the leader's request, or under a
        leader that has gone since, reaches the leader within a heartbeat, at no extra write.
        """
        leading = self._leading()
        parents = () if leading else tuple(sorted(self._tenancies.split_since))
        config = self.host.config
        record = PresenceRecord(
            nonce=self.host.nonce,
            max_in_flight=config.max_in_flight,
            locality=self.locality,
            parents=parents,
            capacity=config.capacity,
            split_requests=config.split_requests,
            carried=self._carried() if leading else (),
        )
        loads = self._tenancies.loads
        if loads.measuring:
            summary = loads.summary(self.host.now())
            record = attrs.evolve(
                record,
                loads=summary.loads,
                other_splits=summary.other_splits,
                other_load=summary.other_load,
                untrusted=summary.untrusted,
            )
        return encode(record)

    def heartbeat(self) -> None:
        """Renew the presence key, unless leaving or a write of it is in flight."""
        if not self.host.parting and not self.host.busy(EPHEMERAL, self.key):
            self.host.start(self._renew())

    def announce_flow(self) -> Flow[bool]:
        """Write this worker's presence key, taking over one left under our instance id.

        A key already there is a predecessor not yet expired (taken over), or a live twin
        (which finds our nonce at its next renewal and stops). Returns False when the key
        moved while it was taken over: run it again.
        """
        key = self.key
        value = self.record()
        sent = self.host.now()
        result = yield Op("create", EPHEMERAL, key, value, operation="announce")
        if not isinstance(result, Won):
            entry: Entry | None = yield Op("get", EPHEMERAL, key)
            if entry is None:
                return False  # the old key vanished: create it again
            result = yield Op(
                "update", EPHEMERAL, key, value, expected=entry.revision,
                operation="announce",
            )  # fmt: skip
            if not isinstance(result, Won):
                return False
        self.rev = result.revision
        self.ok_at = sent
        return True

    def _landed(self, value: bytes) -> None:
        """A presence write of ``value`` landed: the splits it named have reached the leader."""
        named = decode(PresenceRecord, self.key, value).parents
        self._tenancies.split_since.difference_update(named)

    def _renew(self) -> Flow[None]:
        host = self.host
        key = self.key
        yield Hold(EPHEMERAL, key)
        if host.parting:
            return
        sent = host.now()
        try:
            if self.rev:
                value = self.record()
                result = yield Op(
                    "update",
                    EPHEMERAL,
                    key,
                    value,
                    expected=self.rev,
                    operation="presence-renew",
                )
                if isinstance(result, Won):
                    self.rev = result.revision
                    self.ok_at = sent
                    self._landed(value)
                    return
            entry = yield Op("get", EPHEMERAL, key)
            if entry is None:
                if host.view.session_leases and self.rev:
                    # The session expired: its leases expired with it, and other workers may
                    # be taking them over already. End those tenancies before a new presence
                    # record could make their leases look alive again.
                    self._tenancies.session_ended()
                value = self.record()
                result = yield Op("create", EPHEMERAL, key, value, operation="announce")
                if isinstance(result, Won):
                    self.rev = result.revision
                    self.ok_at = sent
                    self._landed(value)
                return
            record = _presence_or_none(entry)
            if record is not None and record.nonce != host.nonce:
                raise host.duplicate_instance(f"presence key {key!r}")
            # Our own write whose reply was lost (maybe landed): adopt its revision.
            self.rev = entry.revision
        except StoreUnavailable as exc:
            logger.debug("presence renewal failed (%s); the next heartbeat retries", exc)

    def delete_flow(self) -> Flow[None]:
        """Drop this worker's presence key (departure): the rest rebalance now, not after a TTL."""
        key = self.key
        yield Hold(EPHEMERAL, key)
        try:
            result = yield Op(
                "delete",
                EPHEMERAL,
                key,
                expected=self.rev or None,
                operation="presence-delete",
            )
        except StoreUnavailable as exc:
            logger.warning("could not delete the presence key (%s); it will expire", exc)
            return
        if isinstance(result, Won):
            self.host.fold(self.host.view.forget_own(EPHEMERAL, key, self.rev))
        elif isinstance(result, Conflict):
            logger.debug("presence key already gone or rewritten")


def _presence_or_none(entry: Entry) -> PresenceRecord | None:
    try:
        return decode(PresenceRecord, entry.key, entry.value)
    except UnreadableRecord:
        return None
