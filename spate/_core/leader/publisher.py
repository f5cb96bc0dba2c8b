"""Publishing the assignment: the records the leader writes to its workers, and nothing more.

- **Assignment** is what the leader's placement answers (spread across the workers' failure
  domains, then balanced), published only to the workers whose assignment changed (a steady
  fleet writes nothing, and a claim by the assignee or a reconcile that finds nothing new
  places nothing). Whether running splits may move is the rebalance policy's
  (:mod:`spate._core.leader.rebalance_policy`); while its debounce runs, every live worker keeps its
  assignment and only gains the unowned splits the full placement gives it. Records of
  instances gone past their grace window are deleted.
- **Nudges**: a follower reads no lease but its own, so one given a split still leased to its
  previous owner waits for a rewrite of its assignment record (the one key it watches) naming
  the split as ready.
- **Split requests**: a worker's record carries the split requests outstanding to it; a new
  one rewrites the record.

At most one write per worker is in flight; what could not be written waits for the next publish.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

import attrs

from spate._core.flows import Flow, Hold, Op
from spate._core.host import Host
from spate._core.leader.assignment_writes import AssignmentWrites
from spate._core.leader.election import Election
from spate._core.leader.placement_inputs import PlacementInputs
from spate._core.leader.rebalance_policy import RebalancePolicy
from spate._core.placement.report import report_from_totals
from spate._core.placement.vocabulary import Placement, Worker
from spate._core.records import AssignmentRecord, SplitRequest, Status, encode
from spate._errors import StoreUnavailable
from spate._store import Keyspace, Won

__all__ = ["PUBLISH_RETRY", "AssignmentPublisher"]

logger = logging.getLogger("spate.leader")

DURABLE = Keyspace.DURABLE
PUBLISH_RETRY = 1.0
"""Seconds before an assignment publish that hit a store error is retried."""


class AssignmentPublisher:
    """The leader's writes of assignment records: publishes, nudges, split requests."""

    def __init__(
        self,
        host: Host,
        election: Election,
        inputs: PlacementInputs,
        writes: AssignmentWrites,
        policy: RebalancePolicy,
        requests: Callable[[str], tuple[SplitRequest, ...]],
    ) -> None:
        self.host = host
        self._election = election
        self._inputs = inputs
        self._writes = writes
        self._policy = policy
        self._requests = requests
        """The split requests outstanding to a worker."""
        self.not_before = 0.0
        """When a publish that hit a store error (or lost a CAS) may be tried again."""
        self._publishing: set[str] = set()
        """Workers with a write of their record in flight (at most one each)."""
        self._recheck: set[str] = set()
        """Workers whose published assignment must be compared with the placement."""
        self._interim = False
        """Whether the last publish was the debounce's interim placement."""
        self._nudges: dict[str, set[str]] = {}
        """Worker -> the splits its record names that came free, to tell it of (nudge_for)."""
        self._asks: set[str] = set()
        """Workers whose record must be rewritten to carry a new split request (see ask)."""

    def step(self, now: float) -> None:
        """Publish what changed, then the nudges and the split requests waiting."""
        self._publish(now)
        if self._nudges:
            self._send_nudges()
        if self._asks:
            self._send_asks()

    def next_deadline(self, now: float) -> float | None:
        """When a publish held back by a store error may be tried again (None: none waits)."""
        return self.not_before if self.not_before > now else None

    def stop(self) -> None:
        """Leadership ended: nothing is owed to anyone any more."""
        self._nudges.clear()
        self._asks.clear()

    def drop(self) -> None:
        """The index was dropped: nothing is left to compare with."""
        self._recheck.clear()
        self._interim = False

    # -- the assignment ------------------------------------------------------------------------

    def _publish(self, now: float) -> None:
        host, view, policy = self.host, self.host.view, self._policy
        changes = host.placement_changes
        if not changes.owed or now < self.not_before or policy.gathering(now):
            return
        workers = self._inputs.workers()
        if not workers:
            return
        index = self._inputs.placement_index()
        debouncing = policy.debouncing(now)
        if debouncing and not index.has_unowned() and not self._inputs.departed:
            return  # nothing unowned to hand out; the rebalance waits for the quiet period
        rebalance = policy.decide(index, now, debouncing=debouncing)
        changes.settle(still_owed=debouncing)  # while debouncing, the full rebalance is owed
        changed = index.take_changed()
        moving: set[str] = set()
        if rebalance:
            moving = policy.rebalanced(index)
        moved = changes.take_assignment_changes()
        if moved:
            self._recheck |= moved
        if changed is None or debouncing or self._interim:
            # A membership change, or the debounce's interim placement (while it runs, and
            # once more when it ends): compare every worker.
            self._recheck |= set(workers) | set(view.assignments)
        else:
            self._recheck |= changed
        self._interim = debouncing
        if changed is not None and not changed and not self._recheck:
            return  # nothing moved: a claim by the assignee, a reconcile that found nothing
        host.metrics.placement(
            report_from_totals(
                index.totals(),
                {i: m.locality for i, m in workers.items()},
                host.config.isolation_tier,
            )
        )
        interim = (
            self._hand_outs_only(index.assignment(), index.pool(), workers) if debouncing else None
        )
        generation = self._election.generation
        for instance in sorted(self._recheck):
            if instance not in workers:
                self._recheck.discard(instance)
                continue
            splits = interim[instance] if interim is not None else index.assignment_of(instance)
            current = view.assignments.get(instance)
            if (
                current is not None
                and current[0].splits == splits
                and (current[0].generation == generation)
            ):
                self._recheck.discard(instance)
                continue  # unchanged: the common case, and free
            if instance in self._publishing:
                changes.owe()
                # Its moves are still to be written: the next publish carries this rebalance
                # on (without a rebalance it would drop them, and leave the imbalance).
                if rebalance:
                    policy.unfinished()
                continue
            self._recheck.discard(instance)
            self._publishing.add(instance)
            self._writes.started(instance, splits)
            host.start(self._write_assignment(instance, splits))
            if moving:
                policy.hold(moving, splits, now, instance)
        policy.wake_for_holds(now)
        for instance in self._inputs.claims.set_aside:
            current = view.assignments.get(instance)
            if current is not None and current[0].splits and instance not in self._publishing:
                # Set aside (it never claimed what it was given): its record names nothing,
                # so a worker that wakes late does not race the splits' new assignees.
                self._publishing.add(instance)
                self._writes.started(instance, ())
                host.start(self._write_assignment(instance, ()))
        for instance in list(view.assignments):
            if (
                instance not in view.presence
                and instance not in self._inputs.departed
                and instance not in self._publishing
            ):
                self._publishing.add(instance)
                host.start(self._delete_assignment(instance))

    def _hand_outs_only(
        self,
        desired: dict[str, tuple[str, ...]],
        pool: dict[str, Placement],
        workers: dict[str, Worker],
    ) -> dict[str, tuple[str, ...]]:
        """The assignment to publish while the membership debounce runs.

        Every live worker keeps its assignment and only gains the unowned splits the full
        placement gives it: a hand-over never waits for the quiet period, and no split is
        taken from anyone until it ends.
        """
        view = self.host.view
        default_cap = self.host.config.max_in_flight
        generation = self._election.generation
        interim: dict[str, tuple[str, ...]] = {}
        for instance, wanted in desired.items():
            current = view.assignments.get(instance)
            kept = [
                split
                for split in (current[0].splits if current is not None else ())
                if split in pool and current is not None and current[0].generation == generation
            ]
            cap = max(1, workers[instance].cap if workers[instance].cap > 0 else default_cap)
            for split in wanted:
                if split not in kept and pool[split].owner not in workers and len(kept) < cap:
                    kept.append(split)
            interim[instance] = tuple(sorted(kept))
        return interim

    def _write_assignment(self, instance: str, splits: tuple[str, ...]) -> Flow[None]:
        host, view = self.host, self.host.view
        key = host.keys.assign(instance)
        try:
            yield Hold(DURABLE, key)
            if not self._election.leading:
                return
            record = AssignmentRecord(
                generation=self._election.generation,
                splits=splits,
                split_requested=tuple(r for r in self._requests(instance) if r.split in splits),
            )
            current = view.assignments.get(instance)
            try:
                if current is None:
                    result = yield Op("create", DURABLE, key, encode(record), operation="assign")
                else:
                    result = yield Op(
                        "update",
                        DURABLE,
                        key,
                        encode(record),
                        expected=current[1],
                        operation="assign",
                    )
            except StoreUnavailable as exc:
                logger.debug("publishing the assignment of %s failed (%s)", instance, exc)
                host.placement_changes.owe()
                self.not_before = host.now() + PUBLISH_RETRY
                return
            if isinstance(result, Won):
                # Adopt our own write: the leader is a worker too, and the echo of its own
                # write is (rightly) dropped as stale, so waiting for it would leave the
                # leader the one worker that never learns its assignment.
                host.fold(view.put_assignment(instance, record, result.revision))
            else:
                # Someone else wrote it, or our cached revision is a ghost: forget it and read
                # what is there, so the next attempt builds on the real revision. Waiting for
                # the watch is not enough (the record's echo may have come and gone while our
                # cache was wrong), and retrying blind at once would spin against the store.
                view.forget_assignment(instance)
                self.not_before = host.now() + PUBLISH_RETRY
                try:
                    entry = yield Op("get", DURABLE, key)
                except StoreUnavailable:
                    entry = None
                if entry is not None:
                    host.fold(view.apply_put(DURABLE, entry))
        finally:
            self._publishing.discard(instance)
            self._writes.ended(instance)
            # Compared again at the next publish: a write that failed, lost, or was
            # overtaken by a newer placement leaves the record behind the placement.
            self._recheck.add(instance)

    def _delete_assignment(self, instance: str) -> Flow[None]:
        host, view = self.host, self.host.view
        key = host.keys.assign(instance)
        try:
            yield Hold(DURABLE, key)
            current = view.assignments.get(instance)
            if current is None or instance in view.presence or not self._election.leading:
                return
            try:
                result = yield Op(
                    "delete", DURABLE, key, expected=current[1], operation="assign-cleanup"
                )
            except StoreUnavailable:
                self.not_before = host.now() + PUBLISH_RETRY
                return
            if isinstance(result, Won):
                host.fold(view.forget_own(DURABLE, key, current[1]))
                return
            # The record moved on (rewritten or deleted) behind our cached revision: read it
            # back, and pause, rather than retry blind at once and spin against the store.
            view.forget_assignment(instance)
            self.not_before = host.now() + PUBLISH_RETRY
            try:
                entry = yield Op("get", DURABLE, key)
            except StoreUnavailable:
                return
            if entry is not None:
                host.fold(view.apply_put(DURABLE, entry))
        finally:
            self._publishing.discard(instance)

    # -- nudges and split requests -------------------------------------------------------------

    def nudge_for(self, split: str) -> None:
        """``split``'s lease is gone: tell the workers it is assigned to that it is free.

        A follower reads no lease but its own, so one that was given a split still leased to
        its previous owner (a revocation draining, a dead owner's lease not yet expired) waits
        for this: a rewrite of its assignment record, the one key it watches, after which it
        reads the split again. Nobody is nudged for a finished split, nor the owner named by
        its record (whose own lease it is), nor this leader (it sees every lease itself).
        """
        if not self._election.leading:
            return
        view = self.host.view
        state = view.splits.get(split)
        if (
            state is None
            or state.progress.status is not Status.RUNNABLE
            or state.progress.completed
        ):
            return
        for instance in view.assigned.get(split, ()):
            if instance != state.progress.owner and instance != self.host.instance:
                self._nudges.setdefault(instance, set()).add(split)

    def ask(self, instances: set[str]) -> None:
        """Rewrite these workers' assignment records to carry their split requests."""
        if self._election.leading:
            self._asks |= instances

    def _send_nudges(self) -> None:
        generation = self._election.generation
        for instance in sorted(self._nudges):
            if instance in self._publishing:
                continue  # a write in flight: the nudge goes out once it has landed
            ready = self._nudges.pop(instance)
            current = self.host.view.assignments.get(instance)
            if current is None or current[0].generation != generation:
                continue
            freed = tuple(sorted(s for s in ready if s in current[0].splits))
            if freed:
                self._publishing.add(instance)
                # Rewritten since: tell it in the next write (a changed record makes the
                # follower read every split it waits for anyway).
                moved = partial(self._renudge, instance, freed)
                self.host.start(
                    self._rewrite(
                        instance, current[1], attrs.evolve(current[0], ready=freed), "assign",
                        moved,
                    )
                )  # fmt: skip

    def _renudge(self, instance: str, freed: tuple[str, ...]) -> None:
        self._nudges.setdefault(instance, set()).update(freed)

    def _send_asks(self) -> None:
        generation = self._election.generation
        for instance in sorted(self._asks):
            if instance in self._publishing:
                continue  # a write in flight: the request goes out once it has landed
            self._asks.discard(instance)
            current = self.host.view.assignments.get(instance)
            if current is None or current[0].generation != generation:
                continue  # no record of this leader's yet: its first write carries the request
            wanted = self._requests(instance)
            if wanted != current[0].split_requested:
                self._publishing.add(instance)
                # (``ready`` is not repeated: the worker acted on it when it first read it.)
                asked = attrs.evolve(current[0], ready=(), split_requested=wanted)
                self.host.start(
                    self._rewrite(
                        instance, current[1], asked, "split-request",
                        partial(self._asks.add, instance),
                    )
                )  # fmt: skip

    def _rewrite(
        self,
        instance: str,
        revision: int,
        rewritten: AssignmentRecord,
        operation: str,
        moved: Callable[[], None],
    ) -> Flow[None]:
        """Rewrite ``instance``'s record, same splits, by CAS on ``revision`` (a nudge, a request).

        ``moved`` runs when the record was rewritten since (or this worker no longer leads):
        what this write carried then goes out with the next one.
        """
        host, view = self.host, self.host.view
        key = host.keys.assign(instance)
        try:
            yield Hold(DURABLE, key)
            current = view.assignments.get(instance)
            if not self._election.leading or current is None or current[1] != revision:
                moved()
                return
            try:
                result = yield Op(
                    "update", DURABLE, key, encode(rewritten), expected=revision,
                    operation=operation,
                )  # fmt: skip
            except StoreUnavailable as exc:
                # A lost nudge leaves the follower's backstop to read again; a lost request
                # times out unanswered and is made again later.
                logger.debug("%s to %s failed (%s)", operation, instance, exc)
                return
            if isinstance(result, Won):
                host.fold(view.put_assignment(instance, rewritten, result.revision))
        finally:
            self._publishing.discard(instance)
