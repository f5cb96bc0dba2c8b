"""What the leader's placement is fed: the worker table, the grace windows, each split's input.

- **The worker table**: the live workers as placement sees them (lanes, localities), built
  again only when one of them comes, goes or changes.
- **Grace windows**: the splits of a departed worker are withheld for ``rebalance_delay`` so
  a restarting worker reclaims its own. Every worker tracks departures, not only the leader:
  leadership can move between the departure and the next publish, and a successor must
  still honour the window.
- **Workers set aside** (:mod:`spate._core.leader.claim_deadline`): a live worker that never claimed
  what it was given within the claim deadline is no worker for placement until it is tried
  again or claims.
- **Each split's input** (:meth:`PlacementInputs.placement_input`): its weight, the load it
  puts on a worker (:func:`spate._core.placement.split_load.split_load`, or its measured load
  once the job reports loads: :mod:`spate._core.leader.balance_rounds`), its affinity, and the
  worker it is anchored on (its owner, the assignee of a split in transit, or the target a
  balance round moved it to).
- **The index** (:class:`~spate._core.placement.index.PlacementIndex`) is fed only the splits
  the view names as changed, so one ownership change costs the splits in flight, not the job.
"""

from __future__ import annotations

from spate._core.host import Host
from spate._core.leader.assignment_writes import AssignmentWrites
from spate._core.leader.balance_rounds import LoadBalancer
from spate._core.leader.claim_deadline import ClaimDeadlines
from spate._core.leader.election import Election
from spate._core.placement.index import PlacementIndex
from spate._core.placement.split_load import split_load
from spate._core.placement.vocabulary import Placement, Worker
from spate._core.records import Status

__all__ = ["PlacementInputs"]


class PlacementInputs:
    """The leader's placement index and everything it is fed."""

    def __init__(
        self,
        host: Host,
        election: Election,
        writes: AssignmentWrites,
        balance: LoadBalancer | None = None,
    ) -> None:
        self.host = host
        self._balance = balance
        """The balance rounds: their moves anchor splits, their loads weigh them."""
        self._election = election
        self._writes = writes
        self.departed: dict[str, float] = {}
        """Instance -> when its presence vanished (its grace window is open)."""
        self.claims = ClaimDeadlines(host)
        """The workers that never claimed what they were given: set aside for placement."""
        self.index: PlacementIndex | None = None
        """The placement kept split by split while leading (see spate._core.placement.index)."""
        self._index_key: tuple[int, frozenset[str]] | None = None
        self._index_workers: frozenset[str] = frozenset()
        """The live workers the index's inputs were read against."""
        self._workers_at: tuple[tuple[int, int], dict[str, Worker], frozenset[str]] | None = None
        """The view's workers_seq and the set-aside version, and the workers placement saw
        then (see workers)."""
        self._index_workers_seq: tuple[int, int] | None = None
        """The view's workers_seq and the set-aside version when the index was last given the
        workers."""

    # -- grace windows -------------------------------------------------------------------------

    def on_departure(self, instance: str, now: float) -> None:
        """Another worker's presence vanished: open its grace window."""
        self.departed.setdefault(instance, now)

    def on_presence_changed(self, instance: str) -> None:
        """Another worker's presence was written: a returning worker closes its own grace window."""
        self.departed.pop(instance, None)

    def sees_job_now(self, now: float) -> None:
        """This leader's view holds the whole job now: honour the departures it did not see.

        Followers do not watch presence, so a worker that becomes leader has seen no other
        worker leave. A worker with an assignment record but no presence left while someone else
        led (or just now): its grace window opens here, so a successor still withholds a
        restarting pod's splits for ``rebalance_delay`` (counted from now, the conservative
        side of when it really left).
        """
        view = self.host.view
        for instance in view.assignments:
            if instance not in view.presence and instance != self.host.instance:
                self.departed.setdefault(instance, now)

    def prune_departed(self, now: float) -> None:
        """Expire grace windows (on every worker, so the map never grows without bound)."""
        for instance in [i for i in self.departed if i in self.host.view.presence]:
            del self.departed[instance]
        delay = self.host.config.rebalance_delay
        if delay == 0:
            # Its own branch: a zero that flowed through the general comparison is how
            # "withhold nothing" turns into "withhold forever".
            self.departed.clear()
            return
        expired = [i for i, since in self.departed.items() if now - since >= delay]
        for instance in expired:
            del self.departed[instance]
        if expired:
            self.host.placement_changes.owe()

    def next_deadline(self) -> float | None:
        """When the first grace window closes (None: none is open, or none applies)."""
        delay = self.host.config.rebalance_delay
        if self.departed and delay > 0:
            return min(self.departed.values()) + delay
        return None

    # -- the worker table and the index -------------------------------------------------------

    def workers(self) -> dict[str, Worker]:
        """The live workers as placement sees them: their lanes and localities.

        Built again only when one of them comes, goes or changes: a publish follows every
        ownership change, and a dict of a thousand workers rebuilt and compared each time
        made its cost O(workers).
        """
        view = self.host.view
        seq = (view.workers_seq, self.claims.version)
        if self._workers_at is None or self._workers_at[0] != seq:
            aside = self.claims.set_aside
            workers = {
                i: Worker(p.max_in_flight, p.locality) if p is not None else Worker(0)
                for i, p in view.presence.items()
                if i not in aside
            }
            self._workers_at = (seq, workers, frozenset(workers))
        return self._workers_at[1]

    def placement_index(self) -> PlacementIndex:
        """The index, fed every placement input that moved since the last publish.

        Built from the whole view when leadership starts and when the withheld set changes
        (a departure, a grace window closing) or the generation does: all O(n) and rare.
        Otherwise only the splits the view names as changed are read again, and on a join or
        a departure the splits that name the worker as their assignee (an input anchors a
        split in transit only on a live assignee, see :meth:`placement_input`). Given the
        workers anew when they changed.
        """
        index = self._fed_index()
        seq = (self.host.view.workers_seq, self.claims.version)
        if self._index_workers_seq != seq:
            # (Comparing a thousand workers with the index's own, each publish, was O(W).)
            index.set_workers(self.workers())
            self._index_workers_seq = seq
        return index

    def _fed_index(self) -> PlacementIndex:
        host, view = self.host, self.host.view
        key = (self._election.generation, frozenset(self.departed))
        self.workers()
        assert self._workers_at is not None
        workers = self._workers_at[2]
        index = self.index
        changes = host.placement_changes.take_placement_changes()
        if index is None or key != self._index_key or changes is None:
            self._index_key = key
            self._index_workers = workers
            host.placement_changes.track()
            if index is None:
                self._index_workers_seq = None  # a new index has no workers yet
                index = self.index = PlacementIndex(
                    default_cap=host.config.max_in_flight,
                    seed=host.tie_seed,
                    isolation_tier=host.config.isolation_tier,
                )
                # A new leader's index takes the whole pool at once: what an update of each
                # split would leave, at the cost of one sort (a takeover feeds 100,000).
                index.load(self._every_input())
                return index
            for split in view.splits:
                index.update(split, self.placement_input(split))
            return index
        if workers != self._index_workers:
            changes = set(changes)
            for worker in workers ^ self._index_workers:
                record = view.assignments.get(worker)
                if record is not None:
                    changes.update(record[0].splits)
                changes.update(self._writes.by_worker.get(worker, ()))
            self._index_workers = workers
        for split in changes:
            index.update(split, self.placement_input(split))
        return index

    def drop(self) -> None:
        """Leadership ended: the index goes, and which splits move no longer matters."""
        self.claims.clear()
        self.index = None
        self._index_key = None
        self.host.placement_changes.stop_tracking()

    def _every_input(self) -> dict[str, Placement]:
        """:meth:`placement_input` of every split of the view that is to be placed.

        A takeover asks it of 100,000 splits: the common case (runnable, named by no record
        and no write in flight: queued) is answered here without the per-split lookups and
        calls of the general path, which takes the rest.
        """
        view = self.host.view
        assigned, writing = view.assigned, self._writes.by_split
        departed = self.departed
        runnable = Status.RUNNABLE
        placement = self._placement
        inputs: dict[str, Placement] = {}
        for split, state in view.splits.items():
            spec = state.spec
            progress = state.progress
            if spec is None or progress.status is not runnable or progress.completed:
                continue
            if split in assigned or split in writing:
                found = self.placement_input(split)
                if found is not None:
                    inputs[split] = found
                continue
            owner = state.lease.owner if state.lease is not None else progress.owner
            if departed and owner in departed:
                continue
            inputs[split] = placement(split, spec.weight, owner, spec.locality)
        return inputs

    def placement_input(self, split: str) -> Placement | None:
        """What placement needs to know of ``split``, or None when it is not to be placed.

        A split in transit (this leader gave it to a live worker that has not claimed it yet:
        its owner handed it back, died, or still holds it while a revocation is in flight) is
        anchored on that assignee, as named by the assignment write in flight or else by the
        worker's record of this generation; that keeps the placement a fixpoint while moves
        land one by one. Anchoring on ownership alone re-placed such splits afresh on every
        solve, so assignments flip-flopped between workers until the moves settled. The
        splits of a departed worker are withheld (None) during its grace window.
        """
        view = self.host.view
        state = view.splits.get(split)
        if (
            state is None
            or state.spec is None
            or state.progress.status is not Status.RUNNABLE
            or state.progress.completed
        ):
            return None
        owner = state.current_owner
        if self.departed and owner in self.departed:
            # (The lease's owner first: this leader reads a claimed split's progress record
            # when its lease appears, which may be before the claim's own write landed.)
            return None
        weight = state.spec.weight
        # Each worker's assignment as this leader last decided it: the write in flight when
        # there is one (the records of one publish land one by one, and a worker's stale record
        # would anchor the split where it no longer goes), else its record of this generation.
        # Only live workers anchor: a dead worker's record, not yet deleted, does not. When
        # two workers name it (a move being published), the first by name: a rule every
        # leader applies alike, whatever order the records arrived in.
        assigned = view.assigned.get(split)
        writing = self._writes.by_split.get(split)
        if not assigned and not writing:
            # Named by no record and no write (most of a large job's splits, queued): no
            # holder to anchor on. Said before building the lists, once per split a takeover.
            return self._placement(split, weight, owner, state.spec.locality)
        generation = self._election.generation
        aside = self.claims.set_aside
        holders = [
            i
            for i in assigned or ()
            if i not in self._writes.by_worker
            and i in view.presence
            and i not in aside
            and (record := view.assignments.get(i)) is not None
            and record[0].generation == generation
        ]
        holders.extend(i for i in writing or () if i in view.presence and i not in aside)
        if holders and owner not in holders:
            # In transit: its owner handed it back (no owner), is gone (a dead worker's
            # expired lease leaves the record naming it), or still holds it while this
            # leader has already given it to another worker (a revocation in flight). All
            # three are anchored on the assignee. Anchored on the owner instead, every solve
            # placed such splits afresh: while the moves landed one by one they swapped
            # between workers, a claim racing a swap took a split back to a worker it had
            # left, and a domain overfilled that way was evened out by moving a split that
            # was never in transit.
            owner = min(holders)
        return self._placement(split, weight, owner, state.spec.locality)

    def _placement(self, split: str, weight: int, owner: str | None, locality: str) -> Placement:
        """The placement input, with a balance round's move and the measured load applied.

        A split a balance round moved is anchored on its target until the target holds it:
        the index keeps it there (sticky), so the target's assignment names it and its owner
        gets a graceful revocation. Once loads are reported a split weighs its load.
        """
        balance = self._balance
        if balance is None:
            return Placement(weight, owner, locality, split_load(weight))
        target = balance.target_of(split)
        return Placement(weight, target or owner, locality, balance.load_units(split, weight))
