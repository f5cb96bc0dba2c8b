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

The view folds each keyspace's puts, deletions and listings as a facade over its parts, each
in its own module: the worker table (:mod:`spate._core.view.worker_table`: presence, sessions),
the split table (:mod:`spate._core.view.split_table`: progress, specs, leases, pending records),
the revisions (:mod:`spate._core.view.revisions`), the listing fold
(:mod:`spate._core.view.listing_fold`) and the split counts (:mod:`spate._core.view.split_counts`).
The notices it returns are in :mod:`spate._core.view.notices`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

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
from spate._core.view import unreadable
from spate._core.view.changes import PlacementChanges
from spate._core.view.listing_fold import ListingFold
from spate._core.view.notices import (
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
from spate._core.view.revisions import Revisions
from spate._core.view.split_counts import SplitCounts, Tallies
from spate._core.view.split_table import SplitState, SplitTable
from spate._core.view.vanished import record_vanished
from spate._core.view.worker_table import WorkerTable
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
        self.revisions = Revisions()
        """The revision each key was folded at, deletions, and :attr:`seq`."""
        # Where the placement inputs this view folds are reported (the leader reads them).
        self._changes = PlacementChanges() if changes is None else changes
        self.counts = SplitCounts(max_attempts)
        """Split counts by status, and the near-quarantine set (kept split by split)."""
        self.near_quarantine = self.counts.near_quarantine
        """Runnable splits whose next charged takeover reaches ``max_attempts`` (a split whose
        last tenancy advanced is charged nothing, so it is not near)."""
        # Its parts: the worker table (presence, sessions) and the split table (records).
        self._workers = WorkerTable(session_leases=session_leases, own=own)
        self._splits = SplitTable(self.revisions, self.counts, self._changes, self._workers)
        self.splits: dict[str, SplitState] = self._splits.splits
        """Split -> everything known of it (the split table's, never rebound)."""
        self.presence: dict[str, PresenceRecord | None] = self._workers.presence
        """Instance -> its presence record (the worker table's, never rebound)."""
        self.assignments: dict[str, tuple[AssignmentRecord, int]] = {}
        self.plan: PlanRecord | None = None
        self.plan_rev = 0
        self.plan_unreadable: str | None = None
        """Why the plan record cannot be read, while it cannot
        (:mod:`~spate._core.view.unreadable`)."""
        self._plan_unreadable_rev = 0  # (the unreadable record's: older writes are stale)
        self.leader: LeaderRecord | None = None
        self.leader_rev = 0
        self._listings = ListingFold(
            keys,
            self.revisions,
            apply_put=self.apply_put,
            apply_delete=self.apply_delete,
            fold_first_run=self._splits.fold_first_run,
            fold_spec=self._splits.fold_spec,
        )
        self.assigned: dict[str, set[str]] = {}
        """Split -> the instances whose assignment record (of any generation) names it."""

    # -- queries ---------------------------------------------------------------------------

    @property
    def seq(self) -> int:
        """Grows with every change; a listing records it when it starts (see module doc)."""
        return self.revisions.seq

    @property
    def workers_seq(self) -> int:
        """Moves when a worker comes, goes, or changes its lanes or locality (see WorkerTable)."""
        return self._workers.workers_seq

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
        ownership of the job (plan, lease, leader); an unreadable progress record or spec holds
        its split aside (folded as quarantined, the reason naming the key); presence and
        assignment records that cannot be read are logged and skipped.
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
                    return self._splits.old_layout_lease(name, entry.key, lease, entry.revision)
                return self._splits.fold_lease(name, entry.key, lease, entry.revision)
            if kind is KeyKind.WORKER:
                try:
                    presence: PresenceRecord | None = decode(PresenceRecord, entry.key, entry.value)
                except UnreadableRecord as exc:
                    logger.warning("%s; counting the worker as live with the default budget", exc)
                    presence = None
                return self.put_presence(name, presence, entry.revision)
            if kind is KeyKind.LEADER:
                try:
                    leader = decode(LeaderRecord, entry.key, entry.value)
                except UnreadableRecord as exc:
                    leader = unreadable.leader_stand_in(self.keys, exc)
                return self.put_leader(leader, entry.revision)
            return []
        if kind is KeyKind.SPLIT:
            try:
                record = decode(ProgressRecord, entry.key, entry.value, split=name)
            except UnreadableRecord as exc:
                return self._unreadable(name, exc, entry.revision, spec=False)
            return self._splits.fold_progress(name, entry.key, record, entry.revision)
        if kind is KeyKind.LEASE:
            lease = decode(LeaseRecord, entry.key, entry.value)
            return self._splits.fold_lease(name, entry.key, lease, entry.revision, Keyspace.DURABLE)
        if kind is KeyKind.SPEC:
            try:
                spec = decode(SpecRecord, entry.key, entry.value, split=name)
            except UnreadableRecord as exc:
                return self._unreadable(name, exc, entry.revision, spec=True)
            return self._splits.fold_spec(name, entry.key, spec, entry.revision)
        if kind is KeyKind.PLAN:
            try:
                plan = decode(PlanRecord, entry.key, entry.value)
            except UnreadableRecord as exc:
                return self._unreadable_plan(exc, entry.revision)
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

    def _unreadable(
        self, split: str, exc: UnreadableRecord, revision: int, *, spec: bool
    ) -> list[Notice]:
        """A split's progress record or spec cannot be read: hold it aside (module text)."""
        unreadable.say_split_held_aside(self.keys, split, exc)
        return self._splits.hold_aside(split, exc.key, exc.problem, revision, spec=spec)

    def _unreadable_plan(self, exc: UnreadableRecord, revision: int) -> list[Notice]:
        """Keep the last readable plan (and its revision: no write built on it lands)."""
        if revision <= max(self.plan_rev, self._plan_unreadable_rev):
            return []
        self.revisions.remember(Keyspace.DURABLE, self.keys.plan, revision)
        self._plan_unreadable_rev, self.plan_unreadable = revision, str(exc)
        unreadable.say_plan_unreadable(self.keys, exc)
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
                return self._splits.drop_lease(name, revision)
            if kind is KeyKind.WORKER:
                self._workers.remove(name)
                self._touch_assignment()
                return [PresenceGone(name, revision), *self._splits.recheck_sessions(name)]
            if kind is KeyKind.LEADER:
                self.leader = None
                return [LeaderGone(revision)]
            return []
        if kind is KeyKind.ASSIGN:
            self._reassign(name, self.assignments.pop(name, None), None)
            self._touch_assignment()
            return [AssignmentGone(name)]
        if kind is KeyKind.LEASE:
            return self._splits.drop_lease(name, revision)
        # The protocol never deletes plan, spec or progress records: a forced delete or
        # someone else did. Keep the view's copy (the terminal verdict refuses to judge while
        # listing and view disagree) and say so.
        logger.warning("%s", record_vanished(key, "while this worker ran", stops=False))
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
        ever deleted by the protocol). See :mod:`spate._core.view.listing_fold`.
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
        return self._splits.fold_lease(split, key, lease, revision, keyspace)

    @property
    def lease_keyspace(self) -> Keyspace:
        """Where leases live: durable keys alive by session (per-key stores), or ephemeral."""
        return Keyspace.DURABLE if self.session_leases else Keyspace.EPHEMERAL

    def lease_key(self, split: str) -> str:
        """The key of ``split``'s lease (see :attr:`lease_keyspace`)."""
        return self.keys.lease(split) if self.session_leases else self.keys.split(split)

    def put_progress(self, split: str, record: ProgressRecord, revision: int) -> list[Notice]:
        """Fold a progress record; the only place a split's status changes."""
        key = self.keys.split(split)
        if self.revisions.stale(Keyspace.DURABLE, key, revision):
            return []
        return self._splits.fold_progress(split, key, record, revision)

    def put_spec(self, split: str, spec: SpecRecord, revision: int) -> list[Notice]:
        """Fold a spec record (immutable: a re-delivery is an echo)."""
        return self._splits.fold_spec(split, self.keys.spec(split), spec, revision)

    def put_presence(
        self, instance: str, presence: PresenceRecord | None, revision: int
    ) -> list[Notice]:
        """Fold a presence write (``presence`` None when its value was unreadable)."""
        key = self.keys.worker(instance)
        if self.revisions.stale(Keyspace.EPHEMERAL, key, revision):
            return []
        self.revisions.remember(Keyspace.EPHEMERAL, key, revision)
        new, moved, session = self._workers.put(instance, presence)
        if moved:
            self._touch_assignment()
        nonce = None if presence is None else presence.nonce
        notices: list[Notice] = [PresenceChanged(instance, nonce, revision, new)]
        if self.session_leases and session:
            notices.extend(self._splits.recheck_sessions(instance))
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
        if revision <= self.plan_rev or revision <= self._plan_unreadable_rev:
            return []  # (older than the unreadable record it would hide)
        self.revisions.remember(Keyspace.DURABLE, self.keys.plan, revision)
        previous, self.plan, self.plan_rev = self.plan, plan, revision
        self.plan_unreadable = None  # (a readable record over an unreadable one: repaired)
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

    def session_live(self, lease: LeaseRecord) -> bool:
        """Whether ``lease``'s session lives, as far as this view knows (see WorkerTable)."""
        return self._workers.session_live(lease)

    def take_spec_arrivals(self) -> set[str]:
        """The splits whose spec record arrived after their progress record, since last asked.

        A spec arrival changes no progress or lease, so it has no notice; the claims ask for
        these to know which splits just became claimable.
        """
        return self._splits.take_spec_arrivals()

    def already_seen(self, keyspace: Keyspace, key: str, revision: int) -> bool:
        """Whether an entry at ``revision`` is one the view already folded, or older.

        This is how the echo of one's own write is recognised: by its revision, before
        anything is decoded.
        """
        return self.revisions.stale(keyspace, key, revision)
