"""The folded view of a job's two keyspaces: pure, no I/O, no clock.

The coordinator feeds every watch event, every listing and every one of its own won writes
into a :class:`View`; the view keeps the latest record of every key and returns
:data:`Notice` values describing what changed, which the coordinator interprets against its
own ownership state (a thief on a held lease, a newer epoch on a held split, ...).

Guards that make the view safe to feed out of order:

- **Stale echoes**: a put at or below the revision already held for its key is ignored (a
  delayed broadcast, our own write's echo, a listing that overlaps the watch), and so is a
  put at or below the revision of a deletion already applied (a listing started before the
  delete must not resurrect the key).
- **Authoritative absence**: a listing or watch snapshot says a key we believed live is gone
  only if we learned that key *before* the listing started (:attr:`View.seq`); a key we
  learned since (say, our own claim landing while the listing was in flight) is kept.
- **Pending records**: a lease or spec seen before its split's progress record is buffered
  and attached when the record arrives, so a held split is never misread as unleased.

Status tallies (runnable / completed / quarantined) are kept incrementally;
:meth:`View.recount` recomputes them for checking.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeAlias

import attrs

from spate._core.changes import PlacementChanges
from spate._core.listing_fold import ListingFold
from spate._core.records import (
    AssignmentRecord,
    KeyKind,
    Keys,
    LeaderRecord,
    LeaseRecord,
    PlanRecord,
    PresenceRecord,
    ProgressRecord,
    SpecRecord,
    Status,
    UnreadableRecord,
    decode,
)
from spate._core.revisions import Revisions
from spate._core.split_counts import SplitCounts, Tallies
from spate._store import Entry, Keyspace

__all__ = [
    "AssignmentChanged",
    "AssignmentGone",
    "LeaderChanged",
    "LeaderGone",
    "LeaseChanged",
    "LeaseGone",
    "Notice",
    "PlanChanged",
    "PresenceChanged",
    "PresenceGone",
    "ProgressChanged",
    "SplitState",
    "Tallies",
    "View",
]

logger = logging.getLogger("spate.view")


@attrs.frozen
class LeaseChanged:
    """A split's lease was written (by anyone, this worker included)."""

    split: str
    lease: LeaseRecord
    revision: int
    new_tenancy: bool = True
    """Whether it names another tenancy than the lease before it (a claim, not a renewal)."""


@attrs.frozen
class LeaseGone:
    """A split's lease disappeared; ``revision`` is None when a listing proved it absent."""

    split: str
    revision: int | None


@attrs.frozen
class ProgressChanged:
    """A split's progress record moved to ``record`` (``previous`` is None for a new split)."""

    split: str
    previous: ProgressRecord | None
    record: ProgressRecord
    revision: int


@attrs.frozen
class PresenceChanged:
    """A worker's presence key was written."""

    instance: str
    nonce: str | None
    revision: int
    new: bool


@attrs.frozen
class PresenceGone:
    """A worker's presence key disappeared (left, or its process stopped renewing)."""

    instance: str
    revision: int | None


@attrs.frozen
class LeaderChanged:
    """The leader key was written."""

    leader: LeaderRecord
    revision: int


@attrs.frozen
class LeaderGone:
    """The leader key disappeared (resigned or expired)."""

    revision: int | None


@attrs.frozen
class PlanChanged:
    """The plan record moved (new generation, finality, count)."""

    previous: PlanRecord | None
    plan: PlanRecord
    revision: int


@attrs.frozen
class AssignmentChanged:
    """An instance's assignment record was written."""

    instance: str
    record: AssignmentRecord
    revision: int


@attrs.frozen
class AssignmentGone:
    """An instance's assignment record was deleted: "nothing decided" for that instance."""

    instance: str


Notice: TypeAlias = (
    LeaseChanged
    | LeaseGone
    | ProgressChanged
    | PresenceChanged
    | PresenceGone
    | LeaderChanged
    | LeaderGone
    | PlanChanged
    | AssignmentChanged
    | AssignmentGone
)
"""What a change to the view means, for the coordinator to act on."""


@attrs.define
class SplitState:
    """Everything known about one split."""

    progress: ProgressRecord
    progress_rev: int
    spec: SpecRecord | None = None
    lease: LeaseRecord | None = None
    """The live lease (on a per-key store: a lease whose session, its owner's presence, lives)."""
    lease_rev: int = 0
    stale_lease: LeaseRecord | None = None
    """A lease key whose session is gone (per-key stores): expired, kept only to take over."""
    stale_lease_rev: int = 0

    @property
    def lease_key_rev(self) -> int:
        """The revision of the split's lease key, live or stale (0 when there is none)."""
        return self.lease_rev if self.lease is not None else self.stale_lease_rev

    @property
    def current_owner(self) -> str | None:
        """The live lease's owner, else the record's owner (placement's notion of owner)."""
        return self.lease.owner if self.lease is not None else self.progress.owner


class View:
    """The folded state of one job as seen by one worker."""

    def __init__(
        self,
        keys: Keys,
        *,
        max_attempts: int,
        changes: PlacementChanges | None = None,
        session_leases: bool = False,
        own: tuple[str, str] | None = None,
    ) -> None:
        self.keys = keys
        self.max_attempts = max_attempts
        self.session_leases = session_leases
        """Leases are durable keys alive by their owner's session (a per-key TTL store)."""
        self._own = own
        """This worker's (instance, nonce): its own session is alive for as long as it runs."""
        self._leased_by: dict[str, set[str]] = {}
        """Owner instance -> the splits whose durable lease key names it (live or stale)."""
        self._lease_owner: dict[str, str] = {}
        self._old_layout: set[str] = set()
        """Splits whose previous-layout lease was reported (see :meth:`_old_layout_lease`)."""
        self.splits: dict[str, SplitState] = {}
        self.presence: dict[str, PresenceRecord | None] = {}
        self.members_seq = 0
        """Moves whenever a member comes, goes, or changes its lanes or locality (not on a
        renewal that changes neither): what the leader's placement reads of presence."""
        self.assignments: dict[str, tuple[AssignmentRecord, int]] = {}
        self.plan: PlanRecord | None = None
        self.plan_rev = 0
        self.leader: LeaderRecord | None = None
        self.leader_rev = 0
        self.revisions = Revisions()
        """The revision each key was folded at, deletions, and :attr:`seq`."""
        self._listings = ListingFold(
            keys,
            self.revisions,
            apply_put=self.apply_put,
            apply_delete=self.apply_delete,
            fold_progress=self._fold_progress,
            fold_spec=self._fold_spec,
        )
        # Where the placement inputs this view folds are reported (the leader reads them).
        self._changes = PlacementChanges() if changes is None else changes
        self.assigned: dict[str, set[str]] = {}
        """Split -> the instances whose assignment record (of any generation) names it."""
        self.counts = SplitCounts(max_attempts)
        """Split counts by status, and the near-quarantine set (kept split by split)."""
        self.near_quarantine = self.counts.near_quarantine
        """Runnable splits whose next charged takeover reaches ``max_attempts`` (a split whose
        last tenancy advanced is charged nothing, so it is not near)."""
        self._pending_leases: dict[str, tuple[LeaseRecord, int]] = {}
        self._pending_specs: dict[str, SpecRecord] = {}
        self._spec_arrivals: set[str] = set()

    # -- queries ---------------------------------------------------------------------------

    @property
    def seq(self) -> int:
        """Grows with every change; a listing records it when it starts (see module doc)."""
        return self.revisions.seq

    @property
    def tallies(self) -> Tallies:
        """Split counts by status (kept incrementally)."""
        return self.counts.tallies

    def recount(self) -> Tallies:
        """Split counts by status, recounted from scratch (for checks)."""
        statuses = [s.progress.status for s in self.splits.values()]
        return Tallies(
            statuses.count(Status.RUNNABLE),
            statuses.count(Status.COMPLETED),
            statuses.count(Status.QUARANTINED),
        )

    # -- feeding ---------------------------------------------------------------------------

    def apply_put(self, keyspace: Keyspace, entry: Entry) -> list[Notice]:
        """Fold one stored entry (watch put, listing entry, or own write read back).

        Raises :class:`~spate._core.records.UnreadableRecord` for an unreadable record that carries
        ownership (plan, spec, progress, lease, leader); presence and assignment records that
        cannot be read are logged and skipped.
        """
        found = self.keys.classify(entry.key)
        if found is None or found[0] is KeyKind.PROBE:
            return []
        kind, name = found
        if self.revisions.stale(keyspace, entry.key, entry.revision):
            return []
        if keyspace is Keyspace.EPHEMERAL:
            if kind is KeyKind.SPLIT:
                lease = decode(LeaseRecord, entry.key, entry.value)
                if self.session_leases:
                    # A lease of the previous layout (renewed by its owner, per key): the
                    # worker that wrote it runs an older spate, which this one cannot share
                    # a job with safely. Said once per key; the split is left alone.
                    return self._old_layout_lease(name, entry.key, lease, entry.revision)
                return self._fold_lease(name, entry.key, lease, entry.revision)
            if kind is KeyKind.WORKER:
                try:
                    presence: PresenceRecord | None = decode(PresenceRecord, entry.key, entry.value)
                except UnreadableRecord as exc:
                    logger.warning("%s; counting the worker as live with the default budget", exc)
                    presence = None
                return self.put_presence(name, presence, entry.revision)
            if kind is KeyKind.LEADER:
                leader = decode(LeaderRecord, entry.key, entry.value)
                return self.put_leader(leader, entry.revision)
            return []
        if kind is KeyKind.SPLIT:
            record = decode(ProgressRecord, entry.key, entry.value, split=name)
            return self._fold_progress(name, entry.key, record, entry.revision)
        if kind is KeyKind.LEASE:
            lease = decode(LeaseRecord, entry.key, entry.value)
            return self._fold_lease(name, entry.key, lease, entry.revision, Keyspace.DURABLE)
        if kind is KeyKind.SPEC:
            spec = decode(SpecRecord, entry.key, entry.value, split=name)
            self._fold_spec(name, entry.key, spec, entry.revision)
            return []
        if kind is KeyKind.PLAN:
            plan = decode(PlanRecord, entry.key, entry.value)
            return self.put_plan(plan, entry.revision)
        if kind is KeyKind.ASSIGN:
            try:
                assignment = decode(AssignmentRecord, entry.key, entry.value)
            except UnreadableRecord as exc:
                # An assignment carries no ownership: ignoring it costs balance, never safety.
                logger.warning("%s; ignoring it (the worker keeps what it holds)", exc)
                self.revisions.remember(keyspace, entry.key, entry.revision)
                return []
            return self.put_assignment(name, assignment, entry.revision)
        return []

    def apply_delete(self, keyspace: Keyspace, key: str, revision: int | None) -> list[Notice]:
        """Fold a deletion: from a watch (``revision`` given) or a listing's proven absence."""
        found = self.keys.classify(key)
        if found is None or found[0] is KeyKind.PROBE:
            return []
        known = self.revisions.known[keyspace].get(key)
        if known is None:
            if revision is not None:
                self.revisions.tomb(keyspace, key, revision)
            return []
        if revision is not None and revision <= known[0]:
            return []  # a delete the key has since been rewritten past
        self.revisions.forget(keyspace, key, known[0] if revision is None else revision)
        kind, name = found
        if keyspace is Keyspace.EPHEMERAL:
            if kind is KeyKind.SPLIT:
                return self._drop_lease(name, revision)
            if kind is KeyKind.WORKER:
                self.presence.pop(name, None)
                self.members_seq += 1
                self._touch_assignment()
                return [PresenceGone(name, revision), *self._recheck_sessions(name)]
            if kind is KeyKind.LEADER:
                self.leader = None
                return [LeaderGone(revision)]
            return []
        if kind is KeyKind.ASSIGN:
            self._reassign(name, self.assignments.pop(name, None), None)
            self._touch_assignment()
            return [AssignmentGone(name)]
        if kind is KeyKind.LEASE:
            return self._drop_lease(name, revision)
        # The protocol never deletes plan, spec or progress records: someone else did. Keep
        # the view's copy (the terminal verdict refuses to judge while listing and view
        # disagree) and say so.
        logger.warning("durable record %r was deleted by something other than spate", key)
        return []

    def apply_listing(
        self,
        keyspace: Keyspace,
        entries: Iterable[Entry],
        *,
        since: int,
        covers: Callable[[str], bool] | None = None,
        prefix: str | None = None,
    ) -> list[Notice]:
        """Fold an authoritative listing (or watch snapshot) of the job's keys in ``keyspace``.

        ``since`` is :attr:`seq` when the listing started: tracked keys learned before it and
        absent from the listing are deleted. ``covers`` says which keys the listing speaks for
        (an exact-key watch's snapshot speaks for its one key; by default, for all of them);
        ``prefix``, when given, says so of the keys under it (a prefix watch's snapshot).
        In the durable keyspace only assignment records are pruned this way (nothing else is
        ever deleted by the protocol). See :mod:`spate._core.listing_fold`.
        """
        return self._listings.apply_listing(
            keyspace, entries, since=since, covers=covers, prefix=prefix
        )

    def apply_page(self, keyspace: Keyspace, entries: Iterable[Entry]) -> list[Notice]:
        """Fold one page of a paged listing of the job's keys (its puts; see end_listing).

        A page speaks for the keys it holds only: what the listing did not bring is decided
        once its last page is in (:meth:`end_listing`).
        """
        return self._listings.apply_page(keyspace, entries)

    def end_listing(self, keyspace: Keyspace, seen: set[str], *, since: int) -> list[Notice]:
        """A paged listing's last page is in: tracked keys it never brought are deleted.

        ``seen`` holds every key its pages brought; ``since`` is :attr:`seq` when it began
        (keys learned since outlive it, as with :meth:`apply_listing`).
        """
        return self._listings.end_listing(keyspace, seen, since=since)

    # -- typed puts (also used for the coordinator's own won writes) -----------------------

    def put_lease(self, split: str, lease: LeaseRecord, revision: int) -> list[Notice]:
        """Fold a lease write (in the keyspace this store keeps leases in)."""
        keyspace = self.lease_keyspace
        key = self.lease_key(split)
        if self.revisions.stale(keyspace, key, revision):
            return []
        return self._fold_lease(split, key, lease, revision, keyspace)

    @property
    def lease_keyspace(self) -> Keyspace:
        """Where leases live: durable keys alive by session (per-key stores), or ephemeral."""
        return Keyspace.DURABLE if self.session_leases else Keyspace.EPHEMERAL

    def lease_key(self, split: str) -> str:
        """The key of ``split``'s lease (see :attr:`lease_keyspace`)."""
        return self.keys.lease(split) if self.session_leases else self.keys.split(split)

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

    def _fold_lease(
        self,
        split: str,
        key: str,
        lease: LeaseRecord,
        revision: int,
        keyspace: Keyspace = Keyspace.EPHEMERAL,
    ) -> list[Notice]:
        # (The caller checked that the write is not stale.)
        self.revisions.remember(keyspace, key, revision)
        if keyspace is Keyspace.DURABLE:
            self._index_lease(split, lease.owner)
        state = self.splits.get(split)
        if state is None:
            pending = self._pending_leases.get(split)
            previous = None if pending is None else pending[0]
            self._pending_leases[split] = (lease, revision)
            new = previous is None or (previous.nonce, previous.epoch) != (lease.nonce, lease.epoch)
            return [LeaseChanged(split, lease, revision, new_tenancy=new)]
        return self._set_lease(split, state, lease, revision)

    def _set_lease(
        self, split: str, state: SplitState, lease: LeaseRecord, revision: int
    ) -> list[Notice]:
        """Put ``lease`` on ``state``: live, or (its session gone) stale."""
        previous = state.lease
        owner_before = state.current_owner
        if self.session_live(lease):
            state.lease, state.lease_rev = lease, revision
            state.stale_lease, state.stale_lease_rev = None, 0
        else:
            state.lease, state.lease_rev = None, 0
            state.stale_lease, state.stale_lease_rev = lease, revision
        if state.current_owner != owner_before:
            self._touch_assignment(split)
        self.counts.check_near_quarantine(split, state.progress)
        if state.lease is None:
            # A lease written under a session already gone: expired the moment it landed. Over
            # a live one it is still news of its own (a holder learns its key was taken).
            if previous is None:
                return []
            return [LeaseChanged(split, lease, revision), LeaseGone(split, None)]
        new = previous is None or (previous.nonce, previous.epoch) != (lease.nonce, lease.epoch)
        return [LeaseChanged(split, lease, revision, new_tenancy=new)]

    def _old_layout_lease(
        self, split: str, key: str, lease: LeaseRecord, revision: int
    ) -> list[Notice]:
        """A per-key store's lease in the ephemeral keyspace: written by an earlier release.

        Read as the live lease it is (it lives by its own TTL, renewed by its owner), so the
        split is not placed elsewhere while that worker holds it; and said loudly, because a
        worker of this release claiming beside it would only find out at the progress
        record's compare-and-swap.
        """
        if split not in self._old_layout:
            self._old_layout.add(split)
            logger.error(
                "split %s is leased by %s under the lease layout of an earlier spate release "
                "(a per-split key renewed on its own); this release keeps leases by session. "
                "Upgrade every worker of a job together: stop the older workers (or let them "
                "finish the job) before starting this release",
                split,
                lease.owner,
            )
        return self._fold_lease(split, key, lease, revision)

    def _index_lease(self, split: str, owner: str | None) -> None:
        before = self._lease_owner.pop(split, None)
        if before is not None:
            splits = self._leased_by[before]
            splits.discard(split)
            if not splits:
                del self._leased_by[before]
        if owner is not None:
            self._lease_owner[split] = owner
            self._leased_by.setdefault(owner, set()).add(split)

    def _recheck_sessions(self, instance: str) -> list[Notice]:
        """``instance``'s session changed: its leases live or expire with it."""
        notices: list[Notice] = []
        for split in sorted(self._leased_by.get(instance, ())):
            state = self.splits.get(split)
            if state is None:
                continue
            lease = state.lease if state.lease is not None else state.stale_lease
            if lease is None:
                continue
            revision = state.lease_rev if state.lease is not None else state.stale_lease_rev
            if (state.lease is not None) != self.session_live(lease):
                notices.extend(self._set_lease(split, state, lease, revision))
        return notices

    def _drop_lease(self, split: str, revision: int | None) -> list[Notice]:
        self._pending_leases.pop(split, None)
        if self.session_leases:
            self._index_lease(split, None)
        state = self.splits.get(split)
        if state is not None:
            state.stale_lease, state.stale_lease_rev = None, 0
        if state is not None and state.lease is not None:
            owner_before = state.current_owner
            state.lease, state.lease_rev = None, 0
            if state.current_owner != owner_before:
                self._touch_assignment(split)
            self.counts.check_near_quarantine(split, state.progress)
        return [LeaseGone(split, revision)]

    def put_progress(self, split: str, record: ProgressRecord, revision: int) -> list[Notice]:
        """Fold a progress record; the only place a split's status changes."""
        key = self.keys.split(split)
        if self.revisions.stale(Keyspace.DURABLE, key, revision):
            return []
        return self._fold_progress(split, key, record, revision)

    def _fold_progress(
        self, split: str, key: str, record: ProgressRecord, revision: int
    ) -> list[Notice]:
        # (The caller checked that the write is not stale.)
        self.revisions.remember_durable(key, revision)
        state = self.splits.get(split)
        if state is None:
            # A split seen for the first time (every split of a new leader's listing).
            pending = self._pending_leases.pop(split, None) if self._pending_leases else None
            spec = self._pending_specs.pop(split, None) if self._pending_specs else None
            state = self.splits[split] = SplitState(record, revision, spec)
            if pending is not None:
                self._set_lease(split, state, pending[0], pending[1])
            self.counts.count(record.status, +1)
            self._changes.split_moved(split)
            self.counts.check_near_quarantine(split, state.progress)
            return [ProgressChanged(split, None, record, revision)]
        previous = state.progress
        owner_before = state.current_owner
        state.progress, state.progress_rev = record, revision
        if previous.status is not record.status:
            self.counts.count(previous.status, -1)
            self.counts.count(record.status, +1)
            self._touch_assignment(split)
        if state.current_owner != owner_before or previous.completed != record.completed:
            self._touch_assignment(split)
        self.counts.check_near_quarantine(split, state.progress)
        return [ProgressChanged(split, previous, record, revision)]

    def put_spec(self, split: str, spec: SpecRecord, revision: int) -> None:
        """Fold a spec record (immutable: a re-delivery is an echo)."""
        self._fold_spec(split, self.keys.spec(split), spec, revision)

    def _fold_spec(self, split: str, key: str, spec: SpecRecord, revision: int) -> None:
        self.revisions.remember_durable(key, revision)
        state = self.splits.get(split)
        if state is None:
            self._pending_specs.setdefault(split, spec)
        elif state.spec is None:
            # A split becomes assignable once its weight is known.
            state.spec = spec
            self._touch_assignment(split)
            self._spec_arrivals.add(split)

    def put_presence(
        self, instance: str, presence: PresenceRecord | None, revision: int
    ) -> list[Notice]:
        """Fold a presence write (``presence`` None when its value was unreadable)."""
        key = self.keys.worker(instance)
        if self.revisions.stale(Keyspace.EPHEMERAL, key, revision):
            return []
        self.revisions.remember(Keyspace.EPHEMERAL, key, revision)
        new = instance not in self.presence
        before = self.presence.get(instance)
        self.presence[instance] = presence
        if new or _cap(before) != _cap(presence) or _locality(before) != _locality(presence):
            self.members_seq += 1
            self._touch_assignment()
        nonce = None if presence is None else presence.nonce
        notices: list[Notice] = [PresenceChanged(instance, nonce, revision, new)]
        if self.session_leases and (
            new or before is None or presence is None or before.nonce != nonce
        ):
            notices.extend(self._recheck_sessions(instance))
        return notices

    def put_leader(self, leader: LeaderRecord, revision: int) -> list[Notice]:
        """Fold a leader-key write."""
        if self.revisions.stale(Keyspace.EPHEMERAL, self.keys.leader, revision):
            return []
        self.revisions.remember(Keyspace.EPHEMERAL, self.keys.leader, revision)
        self.leader, self.leader_rev = leader, revision
        return [LeaderChanged(leader, revision)]

    def put_plan(self, plan: PlanRecord, revision: int) -> list[Notice]:
        """Fold a plan-record write."""
        if revision <= self.plan_rev:
            return []
        self.revisions.remember(Keyspace.DURABLE, self.keys.plan, revision)
        previous, self.plan, self.plan_rev = self.plan, plan, revision
        return [PlanChanged(previous, plan, revision)]

    def put_assignment(
        self, instance: str, record: AssignmentRecord, revision: int
    ) -> list[Notice]:
        """Fold an assignment-record write."""
        key = self.keys.assign(instance)
        if self.revisions.stale(Keyspace.DURABLE, key, revision):
            return []
        self.revisions.remember(Keyspace.DURABLE, key, revision)
        before = self.assignments.get(instance)
        self.assignments[instance] = (record, revision)
        self._reassign(instance, before, record)
        return [AssignmentChanged(instance, record, revision)]

    def forget_assignment(self, instance: str) -> None:
        """Drop a cached assignment whose revision proved stale (a publish CAS lost)."""
        key = self.keys.assign(instance)
        before = self.assignments.pop(instance, None)
        self.revisions.known[Keyspace.DURABLE].pop(key, None)
        self._reassign(instance, before, None)
        self._touch_assignment()

    def forget_own(self, keyspace: Keyspace, key: str, deleted: int) -> list[Notice]:
        """Fold this worker's own won guarded delete of the entry at revision ``deleted``."""
        known = self.revisions.known[keyspace].get(key)
        if known is not None and known[0] > deleted:
            return []  # the key was rewritten after the entry we deleted
        if known is None:
            # Not folded yet: remember the deletion so a listing in flight cannot resurrect it.
            self.revisions.tomb(keyspace, key, deleted)
            return []
        self.revisions.known[keyspace][key] = (deleted, known[1])
        return self.apply_delete(keyspace, key, None)

    # -- internals -------------------------------------------------------------------------

    def _touch_assignment(self, split: str | None = None) -> None:
        self._changes.split_moved(split)

    def _reassign(
        self,
        instance: str,
        before: tuple[AssignmentRecord, int] | None,
        record: AssignmentRecord | None,
    ) -> None:
        """Keep :attr:`assigned` in step with ``instance``'s record, noting what moved."""
        old = set(before[0].splits) if before is not None else set()
        new = set(record.splits) if record is not None else set()
        if before is not None and record is not None and before[0].generation != record.generation:
            moved = old | new  # the leader reads only its own generation's records
        else:
            moved = old ^ new
        for split in old - new:
            holders = self.assigned.get(split)
            if holders is not None:
                holders.discard(instance)
                if not holders:
                    del self.assigned[split]
        for split in new - old:
            self.assigned.setdefault(split, set()).add(instance)
        self._changes.assignment_moved(instance)
        # A split in transit is anchored on its assignee: its placement input moved.
        self._changes.splits_moved(moved)

    def take_spec_arrivals(self) -> set[str]:
        """The splits whose spec record arrived after their progress record, since last asked.

        A spec arrival changes no progress or lease, so it has no notice; the claims ask for
        these to know which splits just became claimable.
        """
        arrivals, self._spec_arrivals = self._spec_arrivals, set()
        return arrivals

    def already_seen(self, keyspace: Keyspace, key: str, revision: int) -> bool:
        """Whether an entry at ``revision`` is one the view already folded, or older.

        This is how the echo of one's own write is recognised: by its revision, before
        anything is decoded.
        """
        return self.revisions.stale(keyspace, key, revision)


def _cap(presence: PresenceRecord | None) -> int:
    return 0 if presence is None else presence.max_in_flight


def _locality(presence: PresenceRecord | None) -> str:
    return "" if presence is None else presence.locality
