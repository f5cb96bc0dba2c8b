"""The view's split table: every split's records, as one worker's view folded them.

A split's state (:class:`SplitState`) is its progress record, its spec once seen, and its
lease: live, or (on a per-key store, its owner's session gone) stale. :class:`SplitTable`
folds each of those writes, buffers a lease or spec seen before its split's progress record
(so a held split is never misread as unleased), keeps which splits each owner's durable lease
keys name (so a session's end expires exactly its leases), and reports every change of a
placement input to the leader's :class:`~spate._core.view.changes.PlacementChanges`. The view
(:mod:`spate._core.view.view`) checks that a write is not stale before it hands it here.

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

import logging

import attrs

from spate._core.records import LeaseRecord, ProgressRecord, SpecRecord, Status, bounded_reason
from spate._core.view.changes import PlacementChanges
from spate._core.view.notices import LeaseChanged, LeaseGone, Notice, ProgressChanged
from spate._core.view.revisions import Revisions
from spate._core.view.split_counts import SplitCounts
from spate._core.view.worker_table import WorkerTable
from spate._store import Keyspace

__all__ = ["SplitState", "SplitTable"]

logger = logging.getLogger("spate.view")


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


class SplitTable:
    """The splits of one job as one worker's view folded them (see the module text)."""

    def __init__(
        self,
        revisions: Revisions,
        counts: SplitCounts,
        changes: PlacementChanges,
        workers: WorkerTable,
    ) -> None:
        self._revisions = revisions
        self._counts = counts
        self._changes = changes
        self._workers = workers
        self.splits: dict[str, SplitState] = {}
        self._leased_by: dict[str, set[str]] = {}
        """Owner instance -> the splits whose durable lease key names it (live or stale)."""
        self._lease_owner: dict[str, str] = {}
        self._old_layout: set[str] = set()
        """Splits whose previous-layout lease was reported (see :meth:`old_layout_lease`)."""
        self._pending_leases: dict[str, tuple[LeaseRecord, int]] = {}
        self._pending_specs: dict[str, SpecRecord] = {}
        self._spec_arrivals: set[str] = set()
        self.unreadable: dict[str, dict[str, str]] = {}
        """Split -> its records that cannot be read (key -> the problem): the split is *held
        aside* (see :meth:`hold_aside`) until every one of them reads again."""
        self._readable: dict[str, ProgressRecord] = {}
        """The real progress record of a split held aside by its spec alone."""

    def fold_lease(
        self,
        split: str,
        key: str,
        lease: LeaseRecord,
        revision: int,
        keyspace: Keyspace = Keyspace.EPHEMERAL,
    ) -> list[Notice]:
        # (The caller checked that the write is not stale.)
        self._revisions.remember(keyspace, key, revision)
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
        if self._workers.session_live(lease):
            state.lease, state.lease_rev = lease, revision
            state.stale_lease, state.stale_lease_rev = None, 0
        else:
            state.lease, state.lease_rev = None, 0
            state.stale_lease, state.stale_lease_rev = lease, revision
        if state.current_owner != owner_before:
            self._changes.split_moved(split)
        self._counts.check_near_quarantine(split, state.progress)
        if state.lease is None:
            # A lease written under a session already gone: expired the moment it landed. Over
            # a live one it is still news of its own (a holder learns its key was taken).
            if previous is None:
                return []
            return [LeaseChanged(split, lease, revision), LeaseGone(split, None)]
        new = previous is None or (previous.nonce, previous.epoch) != (lease.nonce, lease.epoch)
        return [LeaseChanged(split, lease, revision, new_tenancy=new)]

    def old_layout_lease(
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
        return self.fold_lease(split, key, lease, revision)

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

    def recheck_sessions(self, instance: str) -> list[Notice]:
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
            if (state.lease is not None) != self._workers.session_live(lease):
                notices.extend(self._set_lease(split, state, lease, revision))
        return notices

    def drop_lease(self, split: str, revision: int | None) -> list[Notice]:
        self._pending_leases.pop(split, None)
        if self._workers.session_leases:
            self._index_lease(split, None)
        state = self.splits.get(split)
        if state is not None:
            state.stale_lease, state.stale_lease_rev = None, 0
        if state is not None and state.lease is not None:
            owner_before = state.current_owner
            state.lease, state.lease_rev = None, 0
            if state.current_owner != owner_before:
                self._changes.split_moved(split)
            self._counts.check_near_quarantine(split, state.progress)
        return [LeaseGone(split, revision)]

    def fold_progress(
        self, split: str, key: str, record: ProgressRecord, revision: int
    ) -> list[Notice]:
        # (The caller checked that the write is not stale.)
        self._revisions.remember_durable(key, revision)
        if self.unreadable:  # (rare: only while some record of the job cannot be read)
            problems = self.unreadable.get(split)
            if problems is not None:
                problems.pop(key, None)  # the progress record reads (again)
                if problems:
                    self._readable[split] = record
                    record = _held_aside(record, problems, progress_unreadable=False)
                else:
                    del self.unreadable[split]
                    self._readable.pop(split, None)
        return self._fold(split, record, revision)

    def fold_first_progress(
        self, split: str, key: str, record: ProgressRecord, revision: int
    ) -> Notice:
        """:meth:`fold_progress` of a split never folded, and its one notice (a listing's).

        A new leader's listing brings the progress record of every split of the job, nearly
        all of them never folded: this is :meth:`fold_progress` and the first branch of
        :meth:`_fold` in one call, for a split with nothing held aside. Anything else (a split
        already known, a record of the job unreadable) takes :meth:`fold_progress`.
        """
        # (The caller checked that the write is not stale.)
        splits = self.splits
        if self.unreadable or split in splits:
            (notice,) = self.fold_progress(split, key, record, revision)
            return notice
        self._revisions.remember_durable(key, revision)
        pending = self._pending_leases.pop(split, None) if self._pending_leases else None
        spec = self._pending_specs.pop(split, None) if self._pending_specs else None
        state = splits[split] = SplitState(record, revision, spec)
        if pending is not None:
            self._set_lease(split, state, pending[0], pending[1])
        self._counts.count(record.status, +1)
        self._changes.split_moved(split)
        self._counts.check_near_quarantine(split, record)
        return ProgressChanged(split, None, record, revision)

    def fold_first_run(
        self,
        splits: list[str],
        keys: list[str],
        records: list[ProgressRecord],
        revisions: list[int],
    ) -> list[Notice]:
        """:meth:`fold_first_progress` of each of a run of a listing's records, in order.

        A new leader's listing is, after its specs, one run of 100,000 progress records of
        splits never folded: folded here in one call, each part of the fold (the revisions,
        the counts, the placement changes) once for the run. Anything :meth:`fold_first_progress`
        would not take at once (a split already known, an unreadable record waiting) takes it
        record by record.
        """
        table = self.splits
        if self.unreadable or not table.keys().isdisjoint(splits):
            return [
                self.fold_first_progress(split, key, record, revision)
                for split, key, record, revision in zip(
                    splits, keys, records, revisions, strict=True
                )
            ]
        self._revisions.remember_durable_run(keys, revisions)
        pending = self._pending_specs
        specs = [pending.pop(split, None) for split in splits] if pending else None
        if specs is None:
            table.update(zip(splits, map(SplitState, records, revisions), strict=True))
        else:
            table.update(zip(splits, map(SplitState, records, revisions, specs), strict=True))
        self._counts.add_first(splits, records)
        self._changes.splits_first_seen(splits)
        leases = self._pending_leases
        # A lease seen before its split's record (another worker's, from a watch): put on its
        # split now. Only this run's splits are new to the table, so those are the ones here.
        for split in [s for s in leases if s in table]:
            lease, lease_rev = leases.pop(split)
            self._set_lease(split, table[split], lease, lease_rev)
        return list(map(_first_seen, splits, records, revisions))

    def hold_aside(
        self, split: str, key: str, problem: str, revision: int, *, spec: bool
    ) -> list[Notice]:
        """``key``, the progress record or spec of ``split``, cannot be read: hold it aside.

        The split is folded as quarantined, with a reason naming the key, so no worker claims
        it, the leader places nothing on it and the verdict counts it, while the rest of the
        job runs. An unreadable progress record hides the split's real one: the view keeps a
        stand-in, which carries the last epoch it knew and which nobody builds a write on
        (every writer of a progress record writes only over a runnable one). A split whose
        spec alone cannot be read is held aside only while it is runnable: finished, it
        needs no spec. The split is itself again once readable records stand at its keys
        (``spate repair``).
        """
        # (The caller checked that the write is not stale.)
        self._revisions.remember_durable(key, revision)
        problems = self.unreadable.setdefault(split, {})
        problems[key] = problem
        state = self.splits.get(split)
        if spec:
            if state is None:
                return []  # held aside when its progress record arrives
            record = self._readable.setdefault(split, state.progress)
            return self._fold(split, _held_aside(record, problems, False), state.progress_rev)
        self._readable.pop(split, None)
        stand_in = ProgressRecord(id=split, epoch=0 if state is None else state.progress.epoch)
        return self._fold(split, _held_aside(stand_in, problems, True), revision)

    def _fold(self, split: str, record: ProgressRecord, revision: int) -> list[Notice]:
        state = self.splits.get(split)
        if state is None:
            # A split seen for the first time (every split of a new leader's listing).
            pending = self._pending_leases.pop(split, None) if self._pending_leases else None
            spec = self._pending_specs.pop(split, None) if self._pending_specs else None
            state = self.splits[split] = SplitState(record, revision, spec)
            if pending is not None:
                self._set_lease(split, state, pending[0], pending[1])
            self._counts.count(record.status, +1)
            self._changes.split_moved(split)
            self._counts.check_near_quarantine(split, state.progress)
            return [ProgressChanged(split, None, record, revision)]
        previous = state.progress
        owner_before = state.current_owner
        state.progress, state.progress_rev = record, revision
        if previous.status is not record.status:
            self._counts.count(previous.status, -1)
            self._counts.count(record.status, +1)
            self._changes.split_moved(split)
        if state.current_owner != owner_before or previous.completed != record.completed:
            self._changes.split_moved(split)
        self._counts.check_near_quarantine(split, state.progress)
        return [ProgressChanged(split, previous, record, revision)]

    def fold_spec(self, split: str, key: str, spec: SpecRecord, revision: int) -> list[Notice]:
        self._revisions.remember_durable(key, revision)
        state = self.splits.get(split)
        if state is None:
            self._pending_specs.setdefault(split, spec)
        elif state.spec is None:
            # A split becomes assignable once its weight is known.
            state.spec = spec
            self._changes.split_moved(split)
            self._spec_arrivals.add(split)
        problems = self.unreadable.get(split) if self.unreadable else None
        if problems is None or problems.pop(key, None) is None:
            return []
        # The spec reads again (written over by hand): the split is itself again, unless its
        # progress record is unreadable too.
        if problems:
            if state is None:
                return []
            held = _held_aside(state.progress, problems, True)
            return self._fold(split, held, state.progress_rev)
        del self.unreadable[split]
        readable = self._readable.pop(split, None)
        if state is None or readable is None:
            return []
        return self._fold(split, readable, state.progress_rev)

    def held_aside(self, split: str) -> bool:
        """Whether ``split`` is held aside: a record of it cannot be read."""
        return split in self.unreadable

    def take_spec_arrivals(self) -> set[str]:
        """The splits whose spec record arrived after their progress record, since last asked.

        A spec arrival changes no progress or lease, so it has no notice; the claims ask for
        these to know which splits just became claimable.
        """
        arrivals, self._spec_arrivals = self._spec_arrivals, set()
        return arrivals


def _first_seen(split: str, record: ProgressRecord, revision: int) -> Notice:
    """The notice of a split's first progress record."""
    return ProgressChanged(split, None, record, revision)


def _held_aside(
    record: ProgressRecord, problems: dict[str, str], progress_unreadable: bool
) -> ProgressRecord:
    """``record`` as the view holds a split with unreadable records: quarantined, saying why."""
    if not progress_unreadable and record.status is not Status.RUNNABLE:
        return record  # finished: a split that will not run again needs no spec
    reason = "; ".join(f"unreadable record {k}: {p}" for k, p in sorted(problems.items()))
    return attrs.evolve(
        record, status=Status.QUARANTINED, owner=None, owner_nonce="", reason=bounded_reason(reason)
    )
