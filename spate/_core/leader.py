"""Leadership: election, the generation fence, planning, and publishing the assignment.

The rules, each with the race it prevents:

- **Election** is a create of the ephemeral ``leader`` key, tried only when none is seen. The
  winner bumps the plan record's generation by CAS (up to three tries, else it steps down
  rather than lead unfenced). Every later leader write is fenced by that generation: a plan
  publish CASes the plan record at the revision its run started from, and assignment records
  carry the generation (workers ignore older ones). A deposed leader's writes therefore lose,
  or are ignored; brief double leadership costs balance, never ownership.
- **Deposition**: a leader key written by another process, a leader key deleted after ours
  (expiry), a plan record with a newer generation, or a lost leader renewal ends leadership
  and cancels a planner run in progress.
- **Planning** runs the user's planner off the machine (the runtime uses a thread for a sync
  planner, a task under its own cancel scope for an async one) and takes its outcome as one
  more input: a slow plan never stalls renewals. Its result is validated before anything is
  written (an invalid plan is a ``PlanError``); then spec records, then progress records (so
  a progress record implies its spec), then the plan record (planned count: the progress
  records in the leader's view, which it listed when it took over; finality). A planner that
  raises is logged and retried with backoff.
- **Assignment** is what the leader's placement answers (spread across the workers' failure
  domains, then balanced), kept by a :class:`~spate._core.placement_index.PlacementIndex` fed
  only the splits the view names as changed, so one ownership change costs the splits in flight,
  not the job. It is published only to the members whose assignment changed (a steady fleet
  writes nothing, and a claim by the assignee or a reconcile that finds nothing new places
  nothing). The splits of a departed worker are withheld for
  ``rebalance_delay`` so a restarting worker reclaims its own; records of instances gone past
  that window are deleted.
- **Gathering**: the first assignment of a *new job* (the leader sees no assignment record at
  all: no worker can have claimed a split, since claims follow assignments) waits until
  membership has been quiet for ``membership_debounce`` (the join window), each arrival or
  departure extending it, but never past ``JOIN_WINDOWS`` windows after leadership began (a
  steady trickle of joins must not postpone the first assignment for ever). A fleet started
  together then places each split once: published at once, the first worker to see the plan
  would be given everything and the others would take it back from it, a drain each.
- **Moves with a cause**: the placement's spread and balance steps, which move running splits,
  run only when a *rebalance is owed*: a join or departure since the last one (or leadership
  began: a new leader cannot know what changed while nobody led). Completions, claims and
  hand-backs alone never move a running split; the debounce still hands unowned splits out
  at once. At the end of a bounded job no member comes or goes, so running splits stay put:
  an idle lane there is for splitting, and a move would only add a drain.
- **One drain per split per window**: a running split a rebalance moved is *held* for
  ``drain_deadline``: no rebalance in that window moves it again (its first drain may still be
  under way). The window holds that split, not the fleet: a second join right after the first
  is still served at once from the splits nobody moved, so a live worker with free lanes never
  waits out a drain window idle while another holds more than its share (two workers joining
  10 ms apart, the second was once left idle for the whole job). When the window of a held
  split ends, the rebalance runs once more, for what holding it kept from moving.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs
import outcome

from spate._core.backoff import Backoff
from spate._core.flows import Batch, Flow, Hold, Op, OpsOf
from spate._core.host import Host, PlannerRun
from spate._core.placement import Member, Placement
from spate._core.placement_index import PlacementIndex
from spate._core.placement_report import report_from_totals
from spate._core.records import (
    AssignmentRecord,
    Finality,
    LeaderRecord,
    PlanRecord,
    ProgressRecord,
    SpecRecord,
    SplitRequest,
    Status,
    encode,
)
from spate._core.view import LeaderChanged, LeaderGone, Notice, PlanChanged
from spate._errors import FatalCoordinationError, PlanError, StoreUnavailable
from spate._plan import Plan, PlanContext, Planner, validate_plan
from spate._store import Keyspace, Won

__all__ = ["Leadership"]

logger = logging.getLogger("spate.leader")


DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL
BUMP_TRIES = 3
PLANNER_BACKOFF = (1.0, 60.0)
"""First and largest delay before a failed planner run is retried."""
PUBLISH_RETRY = 1.0
"""Seconds before an assignment publish that hit a store error is retried."""
ELECTION_RETRY_DIVISOR = 10
"""A failed or lost election is retried after this fraction of the lease (not at once)."""
JOIN_WINDOWS = 3
"""A new job's first assignment waits at most this many join windows after leadership began."""


@attrs.define(eq=False)
class _PlanRun:
    plan: PlanRecord
    plan_rev: int
    started: float
    call: PlannerRun | None = None
    records: int = 0
    """Splits of the plan being written (0 until the planner's answer is in)."""


class Leadership:
    """This worker's part in leading the job (most of the time: watching someone else lead)."""

    def __init__(self, host: Host, planner: Planner) -> None:
        self.host = host
        self.planner = planner
        self.rev: int | None = None
        """Revision of the leader key while this worker leads."""
        self.generation = 0
        self.plan_now = False
        self.departed: dict[str, float] = {}
        self._electing = False
        self._elect_after = 0.0
        self._run: _PlanRun | None = None
        self._retry_at = 0.0
        self._backoff = Backoff.of(PLANNER_BACKOFF)
        self._debounce_until = 0.0
        self._publish_not_before = 0.0
        self._publishing: set[str] = set()
        self._index: PlacementIndex | None = None
        """The placement kept split by split while leading (see spate._core.placement_index)."""
        self._index_key: tuple[int, frozenset[str]] | None = None
        self._index_members: frozenset[str] = frozenset()
        """The live members the index's inputs were read against."""
        self._members_at: tuple[int, dict[str, Member], frozenset[str]] | None = None
        """The view's members_seq, and the members placement saw then (see _members)."""
        self._index_members_seq: int | None = None
        """The view's members_seq when the index was last given the members."""
        self._recheck: set[str] = set()
        """Members whose published assignment must be compared with the placement."""
        self._interim = False
        """Whether the last publish was the debounce's interim placement."""
        self._writing: dict[str, frozenset[str]] = {}
        """Member -> the splits its assignment write in flight names (until it lands or fails)."""
        self._writing_split: dict[str, set[str]] = {}
        """Split -> the members whose assignment write in flight names it."""
        self._nudges: dict[str, set[str]] = {}
        """Member -> the splits its record names that came free, to tell it of (nudge_for)."""
        self._lead_since = 0.0
        self._join_until = 0.0
        """While the job is new: when its first assignment may be published."""
        self._gathered = True
        """Whether the join window is over (or never applied) in this leadership."""
        self._rebalance_owed = True
        """A membership change (or leadership) since the last rebalance."""
        self._rebalance_unfinished = False
        """The last rebalance could not start every write: the next publish carries it on."""
        self._held_back = False
        """The last rebalance left a move undone for a held split: owed when a hold ends."""
        self._held: dict[str, tuple[float, str]] = {}
        """Split -> when a rebalance moved it while it ran, and to whom (see :meth:`_holding`)."""
        self._wake_at = math.inf
        """When the first hold may end: the leader looks again then."""
        self.requests: Callable[[str], tuple[SplitRequest, ...]] = lambda instance: ()
        """The split requests outstanding to a member (the machine wires its SplitRequests)."""
        self._asks: set[str] = set()
        """Members whose record must be rewritten to carry a new split request (see ask)."""

    @property
    def leading(self) -> bool:
        """Whether this worker holds the leader key."""
        return self.rev is not None

    @property
    def verdict_generation(self) -> int | None:
        """The generation under which this worker may write the verdict now, or None.

        Only while it leads and its generation bump has landed (the verdict is fenced like every
        leader write), and never while its own plan publish is in flight: that write and the
        verdict's both CAS the plan record, and the publish that lost would step it down.
        """
        plan = self.host.view.plan
        if not self.leading or plan is None or plan.generation != self.generation:
            return None
        if not self.host.sees_job:
            return None  # its view is still a follower's share: it would judge a subset
        return None if self._run is not None else self.generation

    @property
    def seeding(self) -> int:
        """Splits of the plan this leader is writing now (0 when it writes none)."""
        return self._run.records if self._run is not None else 0

    # -- step --------------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """Elect, plan and publish as the state says."""
        view = self.host.view
        if not self.leading:
            if (
                view.leader is None
                and not self._electing
                and view.plan is not None
                and now >= self._elect_after
            ):
                self._electing = True
                self.host.start(self._elect(view.plan.generation + 1))
            return
        if view.plan is None or view.plan.generation != self.generation:
            return  # the generation bump has not landed: no unfenced leader write
        if not self.host.sees_job:
            return  # the whole job's snapshots are not in yet: placing now would place a share
        if (
            self.plan_now
            and self._run is None
            and now >= self._retry_at
            and not self.host.busy(DURABLE, self.host.keys.plan)
        ):
            # (A plan record write in flight is the verdict's: a run started now would publish
            # on the revision that write replaces, lose, and step this leader down.)
            self._start_plan(now)
        if now >= self._wake_at:
            self._wake_at = math.inf
            self.host.placement_changes.owe()
        self._publish(now)
        if self._nudges:
            self._send_nudges()
        if self._asks:
            self._send_asks()

    def next_deadline(self, now: float) -> float:
        """The next time-based leader decision (grace windows, retries, debounce)."""
        times = [math.inf]
        delay = self.host.config.rebalance_delay
        if self.departed and delay > 0:
            times.append(min(self.departed.values()) + delay)
        for t in (self._debounce_until, self._publish_not_before, self._wake_at):
            if t > now:
                times.append(t)
        if self.leading and not self._gathered and self._join_until > now:
            times.append(self._join_until)
        if self.plan_now and self._retry_at > now:
            times.append(self._retry_at)
        if not self.leading and self._elect_after > now:
            times.append(self._elect_after)
        return min(times)

    # -- membership ----------------------------------------------------------------------------

    def on_departure(self, instance: str, now: float) -> None:
        """A peer's presence vanished: open its grace window.

        Every worker tracks it, not only the leader: leadership can move between the
        departure and the next publish, and a successor must still honour the window.
        """
        self.departed.setdefault(instance, now)
        self._membership_changed(now)

    def on_arrival(self, instance: str, new: bool, now: float) -> None:
        """A peer's presence was written: a returning instance closes its own grace window."""
        self.departed.pop(instance, None)
        if new:
            self._membership_changed(now)

    def sees_job_now(self, now: float) -> None:
        """This leader's view holds the whole job now: honour the departures it did not see.

        Followers do not watch presence, so a worker that becomes leader has seen no peer
        leave. An instance with an assignment record but no presence left while someone else
        led (or just now): its grace window opens here, so a successor still withholds a
        restarting pod's splits for ``rebalance_delay`` (counted from now, the conservative
        side of when it really left).
        """
        view = self.host.view
        for instance in view.assignments:
            if instance not in view.presence and instance != self.host.instance:
                self.departed.setdefault(instance, now)

    def nudge_for(self, split: str) -> None:
        """``split``'s lease is gone: tell the members it is assigned to that it is free.

        A follower reads no lease but its own, so one that was given a split still leased to
        its previous owner (a revocation draining, a dead owner's lease not yet expired) waits
        for this: a rewrite of its assignment record, the one key it watches, after which it
        reads the split again. Nobody is nudged for a finished split, nor the owner named by
        its record (whose own lease it is), nor this leader (it sees every lease itself).
        """
        if not self.leading:
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

    def _send_nudges(self) -> None:
        for instance in sorted(self._nudges):
            if instance in self._publishing:
                continue  # a write in flight: the nudge goes out once it has landed
            ready = self._nudges.pop(instance)
            current = self.host.view.assignments.get(instance)
            if current is None or current[0].generation != self.generation:
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
            if not self.leading or current is None or current[1] != revision:
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

    def ask(self, instances: set[str]) -> None:
        """Rewrite these members' assignment records to carry their split requests."""
        if self.leading:
            self._asks |= instances

    def _send_asks(self) -> None:
        for instance in sorted(self._asks):
            if instance in self._publishing:
                continue  # a write in flight: the request goes out once it has landed
            self._asks.discard(instance)
            current = self.host.view.assignments.get(instance)
            if current is None or current[0].generation != self.generation:
                continue  # no record of this leader's yet: its first write carries the request
            wanted = self.requests(instance)
            if wanted != current[0].split_requested:
                self._publishing.add(instance)
                # (``ready`` is not repeated: the member acted on it when it first read it.)
                asked = attrs.evolve(current[0], ready=(), split_requested=wanted)
                self.host.start(
                    self._rewrite(
                        instance, current[1], asked, "split-request",
                        partial(self._asks.add, instance),
                    )
                )  # fmt: skip

    def _membership_changed(self, now: float) -> None:
        self._rebalance_owed = True
        debounce = self.host.config.membership_debounce
        if debounce > 0:
            self._debounce_until = now + debounce
            if not self._gathered:
                self._join_until = min(
                    max(self._join_until, now + debounce),
                    self._lead_since + JOIN_WINDOWS * debounce,
                )

    def _gathering(self, now: float) -> bool:
        """Whether a new job's first assignment still waits for the fleet to gather."""
        if self._gathered:
            return False
        if self.host.view.assignments or now >= self._join_until:
            # Gathered: the join window was the debounce of this first placement.
            self._gathered = True
            self._debounce_until = min(self._debounce_until, now)
            return False
        return True

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

    # -- what the view tells us ----------------------------------------------------------------

    def on_notice(self, notice: LeaderChanged | LeaderGone | PlanChanged) -> None:
        """Check the fingerprint; step down when deposed."""
        host = self.host
        if isinstance(notice, PlanChanged):
            if notice.plan.fingerprint != host.fingerprint:
                raise fingerprint_mismatch(host.job, notice.plan.fingerprint, host.fingerprint)
            if self.leading and notice.plan.generation > self.generation:
                logger.warning("deposed: plan generation %d is newer", notice.plan.generation)
                self.demote(resign=False)
            return
        if not self.leading or self.rev is None:
            return
        if isinstance(notice, LeaderChanged):
            if notice.leader.nonce != host.nonce:
                logger.warning("deposed: %s holds the leader key", notice.leader.owner)
                self.demote(resign=False)
        elif notice.revision is None or notice.revision > self.rev:
            logger.warning("leadership lease expired")
            self.demote(resign=False)

    def on_assignment(self, record: AssignmentRecord) -> None:
        """An assignment record was written: one of a newer generation deposes this leader.

        A newer leader's record proves it exists as surely as its plan record does, and a
        leader reads that record on a watch of its own: when its plan watch is down (broken,
        re-opening), two leaders would otherwise overwrite each other's records back and
        forth.
        """
        if self.leading and record.generation > self.generation:
            logger.warning("deposed: an assignment record of generation %d", record.generation)
            self.demote(resign=False)

    def demote(self, *, resign: bool) -> None:
        """Stop leading; ``resign`` also deletes the leader key so a successor is elected now."""
        rev, self.rev = self.rev, None
        self.plan_now = False
        self._nudges.clear()
        self._asks.clear()
        self._drop_index()
        self.host.metrics.placement(None)
        if self._run is not None:
            if self._run.call is not None:
                self._run.call.cancel()
            self._run = None
        if resign and rev is not None:
            self.host.start(self._resign(rev))

    def _resign(self, rev: int) -> Flow[None]:
        key = self.host.keys.leader
        yield Hold(EPHEMERAL, key)
        try:
            result = yield Op("delete", EPHEMERAL, key, expected=rev, operation="resign")
        except StoreUnavailable:
            return  # the key expires on its own
        if isinstance(result, Won):
            self.host.fold(self.host.view.forget_own(EPHEMERAL, key, rev))
        else:
            yield from self.host.reread(EPHEMERAL, key)  # so a later resignation is guarded rightly

    # -- election ------------------------------------------------------------------------------

    def _elect(self, target: int) -> Flow[None]:
        host = self.host
        try:
            record = LeaderRecord(owner=host.instance, nonce=host.nonce, generation=target)
            try:
                result = yield Op(
                    "create", EPHEMERAL, host.keys.leader, encode(record), operation="elect"
                )
            except StoreUnavailable as exc:
                logger.warning("election attempt failed (%s); retrying later", exc)
                self._elect_after = host.now() + host.lease / ELECTION_RETRY_DIVISOR
                return
            if not isinstance(result, Won) or host.parting:
                if isinstance(result, Won):
                    yield from self._resign(result.revision)
                # Another worker won and its key arrives on the watch, or our own earlier
                # attempt landed unseen. Until the view learns which, another attempt would
                # lose the same way: without a pause the loop would spin against the store.
                self._elect_after = host.now() + host.lease / ELECTION_RETRY_DIVISOR
                return
            self.rev, self.generation = result.revision, target
            host.fold(host.view.put_leader(record, result.revision))
            logger.info("elected leader at generation %d", target)
            yield from self._bump(target)
        finally:
            self._electing = False

    def _bump(self, target: int) -> Flow[None]:
        host = self.host
        for _ in range(BUMP_TRIES):
            plan, rev = host.view.plan, host.view.plan_rev
            if plan is None or not self.leading:
                return
            if plan.generation >= target:
                break  # a racing successor fenced past us
            bumped = attrs.evolve(plan, generation=target, updated_at_ms=self.host.wall_ms())
            yield Hold(DURABLE, host.keys.plan)
            try:
                result = yield Op(
                    "update", DURABLE, host.keys.plan, encode(bumped), expected=rev,
                    operation="generation-bump",
                )  # fmt: skip
            except StoreUnavailable as exc:
                logger.warning("generation bump failed (%s); retrying", exc)
                continue
            if isinstance(result, Won):
                host.fold(host.view.put_plan(bumped, result.revision))
                self._began_leading(host.now())
                # Every new leader plans at least once, even a final plan: a predecessor may
                # have died between seeding and publishing.
                self.plan_now = True
                host.placement_changes.owe()
                return
            try:
                entry = yield Op("get", DURABLE, host.keys.plan)
            except StoreUnavailable as exc:
                # A transient read error is no reason to stop the worker: try again (on the
                # revision we knew), and after BUMP_TRIES give the leadership back.
                logger.warning("reading the plan after a lost generation bump failed (%s)", exc)
                continue
            if entry is None:
                raise FatalCoordinationError(
                    f"the plan record {host.keys.plan!r} vanished during an election; something "
                    "other than spate deleted it. Restore it or start the job under a new name."
                )
            host.fold(host.view.apply_put(DURABLE, entry))
        # Never lead without the fence.
        self.demote(resign=True)

    def _began_leading(self, now: float) -> None:
        """The fence landed: a new job waits for the fleet, and a rebalance is owed."""
        self._lead_since = now
        self._join_until = now + self.host.config.membership_debounce
        self._gathered = False
        self._rebalance_owed = True
        self._rebalance_unfinished = False
        self._held.clear()
        self._held_back = False
        self._wake_at = math.inf

    def heartbeat(self) -> None:
        """Renew the leader key (while leading); give back a key of ours we do not lead by."""
        host, view = self.host, self.host.view
        if host.busy(EPHEMERAL, host.keys.leader):
            return
        if self.leading:
            host.start(self._renew())
        elif view.leader is not None and view.leader.nonce == host.nonce and not self._electing:
            # The leader key is this process's, yet it does not lead: an election whose reply
            # was lost landed unseen, or a leadership given up without its key. Nobody else
            # elects while the key stands, and on a session store this process's keepalive
            # would keep it standing for ever: give it back (at most once a beat).
            logger.info("the leader key is this process's but it does not lead; resigning")
            host.start(self._resign(view.leader_rev))

    def _renew(self) -> Flow[None]:
        host = self.host
        yield Hold(EPHEMERAL, host.keys.leader)
        rev = self.rev
        if rev is None:
            return
        record = LeaderRecord(owner=host.instance, nonce=host.nonce, generation=self.generation)
        try:
            result = yield Op(
                "update", EPHEMERAL, host.keys.leader, encode(record), expected=rev,
                operation="leader-renew",
            )  # fmt: skip
        except StoreUnavailable as exc:
            logger.warning("leader renewal failed (%s); the next heartbeat retries", exc)
            return
        if self.rev != rev:
            return
        if isinstance(result, Won):
            self.rev = result.revision
            host.fold(host.view.put_leader(record, result.revision))
        else:
            logger.warning("leader renewal lost its compare-and-swap; stepping down")
            self.demote(resign=False)

    # -- planning ------------------------------------------------------------------------------

    def replan_tick(self) -> None:
        """The replan timer: an open plan is planned again."""
        plan = self.host.view.plan
        if self.leading and plan is not None and plan.finality is Finality.OPEN:
            self.plan_now = True

    def _start_plan(self, now: float) -> None:
        host = self.host
        plan, rev = host.view.plan, host.view.plan_rev
        assert plan is not None
        self.plan_now = False
        ctx = PlanContext(
            job=host.job,
            known=frozenset(host.view.splits),
            generation=self.generation,
            cursor=plan.cursor,
            final=plan.finality is Finality.FINAL,
        )
        run = self._run = _PlanRun(plan, rev, now)
        run.call = host.run_planner(self.planner, ctx, lambda result: self._planned(run, result))

    def _planned(self, run: _PlanRun, result: outcome.Outcome[Any]) -> None:
        if run is not self._run:
            return  # leadership changed while it ran: its result is not ours to write
        host = self.host
        if isinstance(result, outcome.Error):
            error = result.error
            if isinstance(error, PlanError):
                raise error
            logger.error("the planner raised; retrying with backoff", exc_info=error)
            self._failed(run)
            return
        plan = validate_plan(result.unwrap())
        limit = host.max_value_size
        specs: list[tuple[SpecRecord, bytes]] = []
        for split in plan.splits:
            spec = SpecRecord(
                id=split.id,
                generation=self.generation,
                weight=split.weight,
                descriptor=split.descriptor,
                locality=split.locality,
            )
            data = encode(spec)
            if len(data) > limit:
                raise PlanError(
                    f"split {spec.id!r}: its spec record is {len(data)} bytes (descriptor "
                    f"{len(spec.descriptor)} bytes, base64-encoded), over this store's limit of "
                    f"{limit} bytes; keep descriptors small (a pointer to the data, not the "
                    "data). Nothing of this plan was written."
                )
            specs.append((spec, data))
        run.records = len(specs)
        host.start(self._write_plan(run, plan, specs), self._written(run))

    def _written(self, run: _PlanRun) -> Callable[[outcome.Outcome[None]], None]:
        def done(result: outcome.Outcome[None]) -> None:
            if self._run is run:
                self._run = None
            result.unwrap()

        return done

    def _failed(self, run: _PlanRun) -> None:
        host = self.host
        host.metrics.replan("error", host.now() - run.started)
        self._retry_at = host.now() + self._backoff.delay()
        self.plan_now = True
        if self._run is run:
            self._run = None

    def _write_plan(
        self, run: _PlanRun, plan: Plan, specs: list[tuple[SpecRecord, bytes]]
    ) -> Flow[None]:
        host, view, keys = self.host, self.host.view, self.host.keys
        fresh = [(spec, data) for spec, data in specs if spec.id not in view.splits]
        created = 0
        if fresh:

            def spec_landed(i: int, result: object) -> None:
                # Folded as each write lands, so its watch echo is known by revision and
                # dropped undecoded (see Batch).
                if isinstance(result, Won):
                    spec = fresh[i][0]
                    view.put_spec(spec.id, spec, result.revision)

            def spec_op(i: int) -> Op:
                spec, data = fresh[i]
                return Op(
                    "create",
                    DURABLE,
                    keys.spec(spec.id),
                    data,
                    operation="seed-spec",
                    split=spec.id,
                )

            spec_results = yield Batch(OpsOf(len(fresh), spec_op), spec_landed)
            if any(isinstance(r, Exception) for r in spec_results):
                logger.warning("seeding spec records failed; the plan is retried")
                self._failed(run)
                return
            written_at = self.host.wall_ms()
            records = [ProgressRecord(id=s.id, written_at_ms=written_at) for s, _ in fresh]
            notices: list[Notice] = []

            def progress_landed(i: int, result: object) -> None:
                if isinstance(result, Won):
                    record = records[i]
                    notices.extend(view.put_progress(record.id, record, result.revision))

            def progress_op(i: int) -> Op:
                record = records[i]
                return Op(
                    "create",
                    DURABLE,
                    keys.split(record.id),
                    encode(record),
                    operation="seed-split",
                    split=record.id,
                    epoch=record.epoch,
                )

            results = yield Batch(OpsOf(len(records), progress_op), progress_landed)
            created = sum(isinstance(r, Won) for r in results)
            host.fold(notices)
            if any(isinstance(r, Exception) for r in results):
                logger.warning("seeding progress records failed; the plan is retried")
                self._failed(run)
                return
        host.metrics.planned(created)
        if self._run is not run:
            return
        # The planned count is every progress record there is. This leader's view holds them
        # all: it listed the job when it took over, and only a leader seeds (a predecessor's
        # records seeded before it died are in that listing). So the count is the view's,
        # with no second listing of the job.
        planned = len(view.splits)
        finality = Finality.FINAL if plan.final else Finality.OPEN
        published = attrs.evolve(
            run.plan,
            planned=planned,
            finality=finality,
            cursor=plan.cursor if plan.cursor is not None else run.plan.cursor,
            updated_at_ms=self.host.wall_ms(),
        )
        yield Hold(DURABLE, keys.plan)
        try:
            result = yield Op(
                "update", DURABLE, keys.plan, encode(published), expected=run.plan_rev,
                operation="plan-publish",
            )  # fmt: skip
        except StoreUnavailable as exc:
            logger.warning("publishing the plan failed (%s); retrying", exc)
            self._failed(run)
            return
        if not isinstance(result, Won):
            # A successor bumped the generation meanwhile; what we seeded is what it seeds.
            host.metrics.replan("error", host.now() - run.started)
            self.demote(resign=True)
            return
        host.fold(view.put_plan(published, result.revision))
        changed = (
            created or finality is not run.plan.finality or published.planned != run.plan.planned
        )
        host.metrics.replan("ok" if changed else "noop", host.now() - run.started)
        self._backoff.reset()

    # -- assignment ----------------------------------------------------------------------------

    def _publish(self, now: float) -> None:
        host, view = self.host, self.host.view
        changes = host.placement_changes
        if not changes.owed or now < self._publish_not_before or self._gathering(now):
            return
        members = self._members()
        if not members:
            return
        index = self._placement_index()
        if self._index_members_seq != view.members_seq:
            # (Comparing a thousand members with the index's own, each publish, was O(W).)
            index.set_members(members)
            self._index_members_seq = view.members_seq
        debouncing = now < self._debounce_until
        if debouncing and not index.has_unowned() and not self.departed:
            return  # nothing unowned to hand out; the rebalance waits for the quiet period
        held = self._holding(now)
        rebalance = not debouncing and (self._rebalance_owed or self._rebalance_unfinished)
        index.set_rebalance(rebalance)
        if rebalance:
            index.set_held(held)
        changes.settle(still_owed=debouncing)  # while debouncing, the full rebalance is owed
        changed = index.take_changed()
        moving: set[str] = set()
        if rebalance:
            self._rebalance_owed = self._rebalance_unfinished = False
            moving = index.moves_running()
            self._held_back = index.held_back()
        moved = changes.take_assignment_changes()
        if moved:
            self._recheck |= moved
        if changed is None or debouncing or self._interim:
            # A membership change, or the debounce's interim placement (while it runs, and
            # once more when it ends): compare every member.
            self._recheck |= set(members) | set(view.assignments)
        else:
            self._recheck |= changed
        self._interim = debouncing
        if changed is not None and not changed and not self._recheck:
            return  # nothing moved: a claim by the assignee, a reconcile that found nothing
        host.metrics.placement(
            report_from_totals(
                index.totals(),
                {i: m.locality for i, m in members.items()},
                host.config.isolation_tier,
            )
        )
        interim = (
            self._hand_outs_only(index.assignment(), index.pool(), members) if debouncing else None
        )
        for instance in sorted(self._recheck):
            if instance not in members:
                self._recheck.discard(instance)
                continue
            splits = interim[instance] if interim is not None else index.assignment_of(instance)
            current = view.assignments.get(instance)
            if (
                current is not None
                and current[0].splits == splits
                and (current[0].generation == self.generation)
            ):
                self._recheck.discard(instance)
                continue  # unchanged: the common case, and free
            if instance in self._publishing:
                changes.owe()
                # Its moves are still to be written: the next publish carries this rebalance
                # on (without a rebalance it would drop them, and leave the imbalance).
                self._rebalance_unfinished |= rebalance
                continue
            self._recheck.discard(instance)
            self._publishing.add(instance)
            self._writing_started(instance, splits)
            host.start(self._write_assignment(instance, splits))
            if moving:
                # Held once its move is written: a move whose write waits is not made yet,
                # and the publish that carries the rebalance on must still be free to make it.
                for split in moving.intersection(splits):
                    self._held.setdefault(split, (now, instance))
        self._wake_for_holds(now)
        for instance in list(view.assignments):
            if (
                instance not in view.presence
                and instance not in self.departed
                and instance not in self._publishing
            ):
                self._publishing.add(instance)
                host.start(self._delete_assignment(instance))

    def _holding(self, now: float) -> frozenset[str]:
        """The splits a rebalance moved and holds still (see the module text).

        A hold lasts a drain window, and past it for as long as the move has not landed (the
        split's owner is not yet the member it was moved to), up to a second window: a drain
        forced at its deadline is still in transit, and moving it again then would ask for a
        second drain of a split whose first has only just been forced. A hold that ends owes
        a rebalance: the one it held back.
        """
        window = self.host.config.drain_deadline
        view = self.host.view
        ended = []
        for split, (since, target) in self._held.items():
            if now < since + window:
                continue
            state = view.splits.get(split)
            landed = (
                state is None
                or state.progress.status is not Status.RUNNABLE
                or state.progress.completed
                or state.current_owner == target
                or target not in view.presence
            )
            if landed or now >= since + 2 * window:
                ended.append(split)
        for split in ended:
            del self._held[split]
        if ended and self._held_back:
            self._held_back = False
            self._rebalance_owed = True
        return frozenset(self._held)

    def _wake_for_holds(self, now: float) -> None:
        """Have the leader look again when the next hold may end."""
        window = self.host.config.drain_deadline
        for since, _ in self._held.values():
            at = since + window if now < since + window else since + 2 * window
            if at > now:
                self._wake_at = min(self._wake_at, at)

    def _members(self) -> dict[str, Member]:
        """The live members as placement sees them: their lanes and localities.

        Built again only when one of them comes, goes or changes: a publish follows every
        ownership change, and a dict of a thousand members rebuilt and compared each time
        made its cost O(workers).
        """
        view = self.host.view
        if self._members_at is None or self._members_at[0] != view.members_seq:
            members = {
                i: Member(p.max_in_flight, p.locality) if p is not None else Member(0)
                for i, p in view.presence.items()
            }
            self._members_at = (view.members_seq, members, frozenset(members))
        return self._members_at[1]

    def _placement_index(self) -> PlacementIndex:
        """The index, fed every placement input that moved since the last publish.

        Built from the whole view when leadership starts and when the withheld set changes
        (a departure, a grace window closing) or the generation does: all O(n) and rare.
        Otherwise only the splits the view names as changed are read again, and on a join or
        a departure the splits that name the member as their assignee (an input anchors a
        split in transit only on a live assignee, see :meth:`_placement_input`).
        """
        host, view = self.host, self.host.view
        key = (self.generation, frozenset(self.departed))
        self._members()
        assert self._members_at is not None
        members = self._members_at[2]
        index = self._index
        changes = host.placement_changes.take_placement_changes()
        if index is None or key != self._index_key or changes is None:
            self._index_key = key
            self._index_members = members
            host.placement_changes.track()
            if index is None:
                self._index_members_seq = None  # a new index has no members yet
                index = self._index = PlacementIndex(
                    default_cap=host.config.max_in_flight,
                    seed=host.tie_seed,
                    isolation_tier=host.config.isolation_tier,
                )
                # A new leader's index takes the whole pool at once: what an update of each
                # split would leave, at the cost of one sort (a takeover feeds 100,000).
                inputs: dict[str, Placement] = {}
                for split in view.splits:
                    placement = self._placement_input(split)
                    if placement is not None:
                        inputs[split] = placement
                index.load(inputs)
                return index
            for split in view.splits:
                index.update(split, self._placement_input(split))
            return index
        if members != self._index_members:
            changes = set(changes)
            for member in members ^ self._index_members:
                record = view.assignments.get(member)
                if record is not None:
                    changes.update(record[0].splits)
                changes.update(self._writing.get(member, ()))
            self._index_members = members
        for split in changes:
            index.update(split, self._placement_input(split))
        return index

    def _placement_input(self, split: str) -> Placement | None:
        """What placement needs to know of ``split``, or None when it is not to be placed.

        A split in transit (this leader gave it to a live member that has not claimed it yet:
        its owner handed it back, died, or still holds it while a revocation is in flight) is
        anchored on that assignee, as named by the assignment write in flight or else by the
        member's record of this generation; that keeps the placement a fixpoint while moves
        land one by one. Anchoring on ownership alone re-placed such splits afresh on every
        solve, so assignments flip-flopped between members until the moves settled. The
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
        # Each member's assignment as this leader last decided it: the write in flight when
        # there is one (the records of one publish land one by one, and a member's stale record
        # would anchor the split where it no longer goes), else its record of this generation.
        # Only live members anchor: a dead member's record, not yet deleted, does not. When
        # two members name it (a move being published), the first by name: a rule every
        # leader applies alike, whatever order the records arrived in.
        assigned = view.assigned.get(split)
        writing = self._writing_split.get(split)
        if not assigned and not writing:
            # Named by no record and no write (most of a large job's splits, queued): no
            # holder to anchor on. Said before building the lists, once per split a takeover.
            return Placement(state.spec.weight, owner, state.spec.locality)
        holders = [
            i
            for i in assigned or ()
            if i not in self._writing
            and i in view.presence
            and (record := view.assignments.get(i)) is not None
            and record[0].generation == self.generation
        ]
        holders.extend(i for i in writing or () if i in view.presence)
        if holders and owner not in holders:
            # In transit: its owner handed it back (no owner), is gone (a dead worker's
            # expired lease leaves the record naming it), or still holds it while this
            # leader has already given it to another member (a revocation in flight). All
            # three are anchored on the assignee. Anchored on the owner instead, every solve
            # placed such splits afresh: while the moves landed one by one they swapped
            # between members, a claim racing a swap took a split back to a member it had
            # left, and a domain overfilled that way was evened out by moving a split that
            # was never in transit.
            owner = min(holders)
        return Placement(state.spec.weight, owner, state.spec.locality)

    def _writing_started(self, instance: str, splits: tuple[str, ...]) -> None:
        """Note an assignment write about to start: it anchors the splits it names at once."""
        named = frozenset(splits)
        self._writing[instance] = named
        for split in named:
            self._writing_split.setdefault(split, set()).add(instance)
        self._anchors_moved(instance, named)

    def _writing_ended(self, instance: str) -> None:
        """The write landed (its record now anchors), failed or lost: the record anchors again."""
        named = self._writing.pop(instance, None)
        if named is None:
            return
        for split in named:
            members = self._writing_split.get(split)
            if members is not None:
                members.discard(instance)
                if not members:
                    del self._writing_split[split]
        self._anchors_moved(instance, named)

    def _anchors_moved(self, instance: str, named: frozenset[str]) -> None:
        """Re-read the splits on which ``instance``'s record and write in flight disagree."""
        view = self.host.view
        current = view.assignments.get(instance)
        recorded = (
            frozenset(current[0].splits)
            if current is not None and current[0].generation == self.generation
            else frozenset()
        )
        self.host.placement_changes.splits_moved(named ^ recorded)

    def _drop_index(self) -> None:
        self._index = None
        self._index_key = None
        self._recheck.clear()
        self._interim = False
        self.host.placement_changes.stop_tracking()

    def _hand_outs_only(
        self,
        desired: dict[str, tuple[str, ...]],
        pool: dict[str, Placement],
        members: dict[str, Member],
    ) -> dict[str, tuple[str, ...]]:
        """The assignment to publish while the membership debounce runs.

        Every live worker keeps its assignment and only gains the unowned splits the full
        placement gives it: a hand-over never waits for the quiet period, and no split is
        taken from anyone until it ends.
        """
        view = self.host.view
        default_cap = self.host.config.max_in_flight
        interim: dict[str, tuple[str, ...]] = {}
        for instance, wanted in desired.items():
            current = view.assignments.get(instance)
            kept = [
                split
                for split in (current[0].splits if current is not None else ())
                if split in pool
                and current is not None
                and current[0].generation == self.generation
            ]
            cap = max(1, members[instance].cap if members[instance].cap > 0 else default_cap)
            for split in wanted:
                if split not in kept and pool[split].owner not in members and len(kept) < cap:
                    kept.append(split)
            interim[instance] = tuple(sorted(kept))
        return interim

    def _write_assignment(self, instance: str, splits: tuple[str, ...]) -> Flow[None]:
        host, view = self.host, self.host.view
        key = host.keys.assign(instance)
        try:
            yield Hold(DURABLE, key)
            if not self.leading:
                return
            record = AssignmentRecord(
                generation=self.generation,
                splits=splits,
                split_requested=tuple(r for r in self.requests(instance) if r.split in splits),
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
                self._publish_not_before = host.now() + PUBLISH_RETRY
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
                self._publish_not_before = host.now() + PUBLISH_RETRY
                try:
                    entry = yield Op("get", DURABLE, key)
                except StoreUnavailable:
                    entry = None
                if entry is not None:
                    host.fold(view.apply_put(DURABLE, entry))
        finally:
            self._publishing.discard(instance)
            self._writing_ended(instance)
            # Compared again at the next publish: a write that failed, lost, or was
            # overtaken by a newer placement leaves the record behind the placement.
            self._recheck.add(instance)

    def _delete_assignment(self, instance: str) -> Flow[None]:
        host, view = self.host, self.host.view
        key = host.keys.assign(instance)
        try:
            yield Hold(DURABLE, key)
            current = view.assignments.get(instance)
            if current is None or instance in view.presence or not self.leading:
                return
            try:
                result = yield Op(
                    "delete", DURABLE, key, expected=current[1], operation="assign-cleanup"
                )
            except StoreUnavailable:
                self._publish_not_before = host.now() + PUBLISH_RETRY
                return
            if isinstance(result, Won):
                host.fold(view.forget_own(DURABLE, key, current[1]))
                return
            # The record moved on (rewritten or deleted) behind our cached revision: read it
            # back, and pause, rather than retry blind at once and spin against the store.
            view.forget_assignment(instance)
            self._publish_not_before = host.now() + PUBLISH_RETRY
            try:
                entry = yield Op("get", DURABLE, key)
            except StoreUnavailable:
                return
            if entry is not None:
                host.fold(view.apply_put(DURABLE, entry))
        finally:
            self._publishing.discard(instance)


def fingerprint_mismatch(job: str, stored: str, ours: str) -> FatalCoordinationError:
    """The error for a worker whose fingerprint differs from the job's."""
    return FatalCoordinationError(
        f"job {job!r} was started with fingerprint {stored!r}, but this worker uses {ours!r}; "
        "workers with different fingerprints cannot share a job. Deploy the same fingerprint "
        "everywhere, or run the new configuration under a new job name."
    )
