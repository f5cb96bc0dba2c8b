"""How a worker comes to hold splits: claiming (and finding what the leader must quarantine).

What it does with them once held (renewing, committing, failing, handing back) is
:mod:`spate._core.tenancy.tenancies`, whose :class:`~spate._core.tenancy.tenancies.Tenancies`
:class:`Claims` holds. What a failed write of a claim leaves to do (the split held back a moment, a
lease write of unknown outcome read back) is :mod:`spate._core.tenancy.claim_retries`, whose
:class:`~spate._core.tenancy.claim_retries.ClaimRetries` :class:`Claims` builds.

The rules, each with the race it prevents:

- **Only assigned splits, only under the lane budget.** The leader's assignment is the only
  thing that picks work; a claimable split nobody assigned here is another worker's or the
  queue's. An absent assignment means "nothing decided": claim nothing new, keep what is held.
- **Two-key claim: lease first, then the progress-record CAS** that bumps the epoch and sets
  the owner. The lease alone is liveness; the record's revision is the fence, so a claim is
  won only when that CAS lands.
- **A zombie's late commit is adopted**: if the CAS loses because the previous owner committed
  just before (legal: it still owned the split), re-read and retry once with its progress.
- **One durable read settles the release/expiry race**: a cooperative hand-back clears the
  owner and then drops the lease, on two watch streams; a claimant that sees the lease vanish
  first would misread a clean hand-back as an expiry and burn an attempt. A fresh read that
  shows the owner already cleared downgrades the claim to "released".
- **Attempts count non-graceful ends only, and blame fairly**: an explicit failure always
  counts; a takeover from a dead owner (expiry, reclaim) counts only when that owner's tenancy
  moved the watermark not at all (the record's ``advanced`` flag, cleared by every claim and
  set by the tenancy's first advancing commit), so the deaths of workers never quarantine a
  split that keeps moving forward, while a split that kills each owner before its first commit
  still runs out of attempts; a hand-back never counts. At ``max_attempts`` the split is
  quarantined by the leader (:mod:`spate._core.tenancy.quarantine`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set
from typing import Literal

import attrs
import outcome

from spate._core.flows import Flow, Hold, Op
from spate._core.host import Host, ReleaseOutcome
from spate._core.protocol import (
    ClaimKind,
    SplitFacts,
    attempts_after,
    claim_candidates,
)
from spate._core.records import (
    AssignmentRecord,
    LeaseRecord,
    ProgressRecord,
    Status,
    UnreadableRecord,
    decode,
    encode,
    fence_of,
)
from spate._core.tenancy.claim_retries import REFUSED, ClaimRetries, Refused
from spate._core.tenancy.phase import SplitEvent
from spate._core.tenancy.point_reads import read_session, read_split
from spate._core.tenancy.quarantine import quarantine_flow
from spate._core.tenancy.tenancies import Tenancies, Tenancy
from spate._core.view.view import (
    AssignmentChanged,
    AssignmentGone,
    LeaseChanged,
    LeaseGone,
    ProgressChanged,
    SplitState,
)
from spate._errors import StoreUnavailable
from spate._events import Gained, Quarantined, SplitRequested
from spate._metrics import AcquireReason
from spate._store import Keyspace, Won

__all__ = ["Claims"]

logger = logging.getLogger("spate.claims")

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL

ACQUIRE_REASONS: dict[ClaimKind, AcquireReason] = {
    ClaimKind.CREATE: "create",
    ClaimKind.RELEASED: "reassigned",
    ClaimKind.RECLAIM: "reclaimed",
    ClaimKind.EXPIRED: "expired",
}
"""The metrics reason of a won claim, by the kind of claim it was."""


class Claims:
    """What this worker claims, and the claim flows (quarantine: :mod:`.quarantine`).

    The splits it holds, and the flows that keep or end a tenancy, are the
    :class:`~spate._core.tenancy.tenancies.Tenancies` it holds (a won claim adds one). As the
    revocations see it (:class:`~spate._core.host.Holdings`) it answers for both.
    """

    def __init__(self, host: Host, tenancies: Tenancies) -> None:
        self.host = host
        self.tenancies = tenancies
        """The splits held here and the flows that keep or end them (a claim adds to them)."""
        self.assigned: frozenset[str] = frozenset()
        self.assignment_seen = False
        self.assign_generation = 0
        self.awaiting: dict[str, float] = {}
        self.retries = ClaimRetries(host, tenancies)
        """Splits held back after a failed write, and lease writes of unknown outcome."""
        # What a step must look at again. A step re-evaluates only the splits whose facts
        # changed since the last one (a notice named them, a spec arrived, a flow on them
        # ended, a retry came due), and sweeps every candidate only when lanes freed up, the
        # assignment changed, or on a heartbeat (the backstop: no change can be missed for
        # longer than a beat).
        self._dirty: set[str] = set()
        self._sweep = True
        self._slots_left = 0
        self._to_read: set[str] = set()
        """A follower's assigned splits whose records it must read before it can claim them."""
        self._told: dict[str, set[tuple[int, int]]] = {}
        """Held split -> the split requests (generation, seq) its handler was told of."""

    # -- the holdings, as the revocations see them ---------------------------------------------

    @property
    def owned(self) -> Mapping[str, Tenancy]:
        """The splits this worker holds."""
        return self.tenancies.owned

    @property
    def busy(self) -> Set[str]:
        """Splits with a claim, quarantine, release or lease drop in flight."""
        return self.tenancies.busy

    @property
    def claiming(self) -> int:
        """How many claims are in flight (each takes a lane until it returns)."""
        return self.tenancies.phases.claiming

    def release_flow(self, split: str) -> Flow[ReleaseOutcome]:
        """Hand ``split`` back cleanly (see :meth:`Tenancies.release_flow`)."""
        return self.tenancies.release_flow(split)

    # -- deciding ----------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """Claim what is assigned and claimable; quarantine what is out of attempts."""
        host = self.host
        view = host.view
        slots = host.config.max_in_flight - len(self.owned) - self.claiming
        due = list(self.retries.retry_at.pop_due(now))
        self._dirty.update(due)
        self._dirty |= view.take_spec_arrivals()
        if not host.sees_job:
            # A follower learns a split's records only by reading them: a claim or quarantine
            # held back after a refusal is retried on what the store holds now.
            self._to_read.update(s for s in due if s in self.assigned)
            self._read_share()
        if self._sweep or slots > self._slots_left:
            self._sweep = False
            ids = set(view.near_quarantine)
            if slots > 0:
                ids |= self.assigned
        else:
            near, assigned = view.near_quarantine, self.assigned
            ids = {s for s in self._dirty if s in near or (slots > 0 and s in assigned)}
        self._dirty.clear()
        facts: list[tuple[str, SplitFacts]] = []
        for split in sorted(ids):
            state = view.splits.get(split)
            if state is None or split in self.busy or split in self.retries.retry_at:
                continue
            facts.append(
                (
                    split,
                    SplitFacts(
                        state.progress.status,
                        state.progress.owner,
                        state.progress.epoch,
                        state.progress.attempts,
                        None if state.lease is None else state.lease.owner,
                        state.spec is not None,
                        state.progress.advanced,
                    ),
                )
            )
        for candidate in claim_candidates(
            facts,
            held=self.owned,
            instance=host.instance,
            max_attempts=host.config.max_attempts,
        ):
            if candidate.quarantine:
                if host.sees_job:
                    # The leader's alone: it is the one that hears every tenancy end.
                    quarantine = quarantine_flow(
                        host,
                        candidate,
                        self.retries.write_or_retry_later,
                        self.tenancies._drop_lease,
                    )
                    self._begin(candidate.split, quarantine)
            elif candidate.split in self.assigned and slots > 0:
                slots -= 1
                self._begin(
                    candidate.split,
                    self._claim(candidate.split, candidate.kind),
                    SplitEvent.CLAIM,
                )
        self._slots_left = slots

    def next_deadline(self) -> float:
        """When a split held back after an error may be tried again."""
        return self.retries.retry_at.next()

    # -- a follower's share ------------------------------------------------------------------

    def reread_share(self) -> None:
        """Read every assigned split not held again (the backstop; a view left stale)."""
        self._to_read.update(s for s in self.assigned if s not in self.owned)

    def _read_share(self) -> None:
        for split in sorted(self._to_read - self.busy):
            if split in self.retries.retry_at:
                continue  # read when its retry comes due
            self._to_read.discard(split)
            if split not in self.owned:
                self._begin(
                    split, read_split(self.host, split, self.owned, self.retries.retry_later)
                )

    def _begin(self, split: str, flow: Flow[None], event: SplitEvent = SplitEvent.FLOW) -> None:
        phases = self.tenancies.phases
        phases.move(split, event)

        def done(result: outcome.Outcome[None]) -> None:
            phases.move(split, SplitEvent.FLOW_ENDED)
            self._dirty.add(split)
            result.unwrap()

        self.host.start(flow, done)

    def heartbeat(self, now: float) -> None:
        """Keep the held leases (see :meth:`keep_leases`) and sweep every candidate next step."""
        self._sweep = True  # the backstop of the incremental step
        self.tenancies.keep_leases(now)
        for split in self.retries.leases_to_read(now):
            if split not in self.busy:
                self._begin(split, self.retries.read_lease(split))

    # -- what the view tells us --------------------------------------------------------------

    def on_notice(self, notice: LeaseChanged | LeaseGone | ProgressChanged) -> None:
        """Fence held splits that someone else moved."""
        host = self.host
        self._dirty.add(notice.split)
        if isinstance(notice, LeaseChanged):
            if notice.lease.nonce == host.nonce and notice.split not in self.owned:
                self.tenancies._stray.setdefault(notice.split, host.now())
            else:
                self.tenancies._stray.pop(notice.split, None)
        elif isinstance(notice, LeaseGone):
            self.tenancies._stray.pop(notice.split, None)
        if isinstance(notice, ProgressChanged):
            record = notice.record
            previous = notice.previous
            if record.status is Status.QUARANTINED and (
                previous is None or previous.status is not Status.QUARANTINED
            ):
                host.metrics.quarantined()
                host.emit(Quarantined(notice.split, record.attempts))
            held = self.owned.get(notice.split)
            if held is not None and record.epoch > held.epoch:
                # A claimant CASed the record past our tenancy.
                self.tenancies.drop(notice.split, "fenced")
            return
        held = self.owned.get(notice.split)
        if held is None:
            return
        if isinstance(notice, LeaseChanged):
            lease = notice.lease
            if lease.nonce != host.nonce:
                if lease.owner == host.instance:
                    raise host.duplicate_instance(f"the lease of split {notice.split!r}")
                logger.warning("split %s: lease taken by %s; split lost", notice.split, lease.owner)
                self.tenancies.drop(notice.split, "fenced")
            return
        if notice.revision is None or notice.revision > held.lease_rev:
            # Our lease expired while we believed we held the split: renewals have been
            # failing for a whole lease, and another worker may already be claiming it.
            self.tenancies.drop(notice.split, "starved")

    def on_assignment(self, notice: AssignmentChanged | AssignmentGone) -> None:
        """Adopt this worker's assignment (or its withdrawal: "nothing decided")."""
        now = self.host.now()
        if isinstance(notice, AssignmentGone):
            self.assignment_seen = False
            self.assigned = frozenset()
            self.awaiting.clear()
            self._to_read.clear()
            self._sweep = True
            return
        record = notice.record
        if record.generation < self.assign_generation:
            # A deposed leader's late write must not walk this worker backwards.
            logger.debug("ignoring an assignment of superseded generation %d", record.generation)
            return
        renewed = record.generation != self.assign_generation
        self.assign_generation = record.generation
        named = frozenset(record.splits)
        if not self.host.sees_job:
            view = self.host.view
            if named != self.assigned or renewed:
                # A changed share, or a new leader's: read every split of it not held (new
                # ones to learn, and any it waits for, whose lease may have gone meanwhile,
                # perhaps while no leader could say so).
                wanted = named
            else:
                # A nudge: the splits the leader saw come free, and any not yet learned.
                wanted = frozenset(record.ready) | {s for s in named if s not in view.splits}
            self._to_read.update(s for s in wanted & named if s not in self.owned)
        for split in named - self.assigned:
            if split not in self.owned:
                self.awaiting[split] = now
        for split in [s for s in self.awaiting if s not in named]:
            del self.awaiting[split]
        self.assigned = named
        self.assignment_seen = True
        self._sweep = True
        if record.split_requested or self._told:
            self._tell_requests(record)

    def _tell_requests(self, record: AssignmentRecord) -> None:
        """Tell the handlers of held splits of the leader's split requests, each once."""
        told = {s: seen for s, seen in self._told.items() if s in self.owned}
        for request in record.split_requested:
            if request.split not in self.owned:
                continue  # (a request for a tenancy that ended, or is not ours yet)
            seen = told.setdefault(request.split, set())
            ident = (record.generation, request.seq)
            if ident not in seen:
                seen.add(ident)
                self.host.emit(SplitRequested(request.split))
        self._told = told

    # -- claim -------------------------------------------------------------------------------

    def _claim(self, split: str, kind: ClaimKind) -> Flow[None]:
        try:
            yield from self._claim_steps(split, kind)
        finally:
            self.tenancies.phases.move(split, SplitEvent.CLAIM_RETURNED)

    def _claim_steps(self, split: str, kind: ClaimKind) -> Flow[None]:
        """The two-key claim: lease first, then the progress-record CAS (one retry at most)."""
        if kind is ClaimKind.EXPIRED:
            kind = yield from self._settle_release_race(split)
        view = self.host.view
        for last_try in (False, True):
            state = view.splits.get(split)
            if state is None or state.progress.status is not Status.RUNNABLE or split in self.owned:
                return
            epoch = state.progress.epoch + 1
            lease_rev = yield from self._acquire_lease(split, kind, state, epoch, last_try=last_try)
            if lease_rev is not REFUSED:
                break
            # Refused: the key moved unseen (most often freed by a leaver just before): read
            # it now and decide once more, not idle for the pause after an error.
            yield from self.host.reread(view.lease_keyspace, view.lease_key(split))
        if lease_rev is None or lease_rev is REFUSED:
            return
        for _ in range(2):
            outcome = yield from self._claim_record(split, kind, epoch, lease_rev)
            if outcome == "won":
                return
            if outcome == "given up" or not (yield from self._adopt_late_commit(split, epoch)):
                break
        yield from self.tenancies._drop_lease(split, lease_rev, epoch)

    def _settle_release_race(self, split: str) -> Flow[ClaimKind]:
        """One durable read: an owner already cleared makes an "expired" claim "released"."""
        host = self.host
        key = host.keys.split(split)
        entry = yield from self.tenancies._read_or_none(DURABLE, key)
        if entry is None:
            return ClaimKind.EXPIRED
        state = host.view.splits.get(split)
        # Only a read at least as fresh as the view may downgrade: a lagging replica's old
        # owner-less record must not make a real expiry takeover attempt-free.
        fresh = state is None or entry.revision >= state.progress_rev
        host.fold(host.view.apply_put(DURABLE, entry))  # (an unreadable record: held aside)
        try:
            record = decode(ProgressRecord, key, entry.value, split=split)
        except UnreadableRecord:
            return ClaimKind.EXPIRED  # the split is held aside now: the claim stops there
        return ClaimKind.RELEASED if record.owner is None and fresh else ClaimKind.EXPIRED

    def _acquire_lease(
        self, split: str, kind: ClaimKind, state: SplitState, epoch: int, *, last_try: bool
    ) -> Flow[int | Refused | None]:
        """The claim's lease written: its revision, None (held back), or :data:`REFUSED`."""
        host, view = self.host, self.host.view
        keyspace, key = view.lease_keyspace, view.lease_key(split)
        lease = LeaseRecord(owner=host.instance, nonce=host.nonce, epoch=epoch)
        yield Hold(keyspace, key)
        existing = state.lease if state.lease is not None else state.stale_lease
        if view.session_leases and existing is not None:
            # A durable lease key stands: it may be taken over only once its session is
            # proven gone, by a read of the store made now (a stale view may not decide it).
            try:
                alive = yield from read_session(self.host, existing)
            except StoreUnavailable as exc:
                logger.warning("split %s: cannot tell whether its lease lives (%s)", split, exc)
                self.retries.retry_later(split)
                return None
            if alive and existing.owner != host.instance:
                self.retries.retry_later(split)
                return None
            op = Op(
                "update", keyspace, key, encode(lease), expected=state.lease_key_rev,
                operation="claim-lease", split=split, epoch=epoch,
            )  # fmt: skip
        elif kind is ClaimKind.RECLAIM and state.lease is not None:
            op = Op(
                "update", keyspace, key, encode(lease), expected=state.lease_rev,
                operation="claim-lease", split=split, epoch=epoch,
            )  # fmt: skip
        else:
            op = Op(
                "create", keyspace, key, encode(lease), operation="claim-lease", split=split,
                epoch=epoch,
            )  # fmt: skip
        # Refused: another worker won the lease (the watch brings its write), or our view of our own
        # lease is stale (a lost reply, another process under our id).
        write = self.retries.write_or_retry_later if last_try else self.retries.write_or_refused
        won = yield from write(op, "lease write", maybe_landed=lambda: self.retries.unsure(split))
        if won is None or won is REFUSED:
            return won
        host.fold(host.view.put_lease(split, lease, won.revision))
        return won.revision

    def _claim_record(
        self, split: str, kind: ClaimKind, epoch: int, lease_rev: int
    ) -> Flow[Literal["won", "lost", "given up"]]:
        """The progress-record CAS that wins the claim: the epoch bumped, this owner named.

        "lost" when the CAS lost (a zombie's late commit, or a rival claim: the caller reads
        back); "given up" when the split moved on or the outcome cannot be known.
        """
        host = self.host
        key = host.keys.split(split)
        # Hold the key before reading the record the CAS is built from: a write of ours still
        # in flight (a commit of the tenancy just lost) changes both the record and its
        # revision, and a record read before the wait paired with the revision read after it
        # would write old progress back under a fresh revision.
        yield Hold(DURABLE, key)
        state = host.view.splits.get(split)
        if state is None or state.spec is None or host.parting:
            return "given up"
        progress = state.progress
        if progress.status is not Status.RUNNABLE or progress.completed or progress.epoch >= epoch:
            # The split moved on while the lease write was in flight (a freeze can hold it for
            # longer than a lease): someone else claimed or finished it. Writing the epoch
            # decided before then would put history back under a fresh revision.
            return "given up"
        # Built from the freshest record each try: a lost CAS wrote nothing, so a retry that
        # adopts a zombie's commit counts this takeover's attempt at most once, and not at all
        # when that late commit moved the watermark (the tenancy advanced).
        record = attrs.evolve(
            progress,
            epoch=epoch,
            owner=host.instance,
            owner_nonce=host.nonce,
            attempts=attempts_after(kind, progress.attempts, progress.advanced),
            written_at_ms=self.host.wall_ms(),
            advanced=False,
        )
        try:
            result = yield Op(
                "update", DURABLE, key, encode(record), expected=state.progress_rev,
                operation="claim", split=split, epoch=epoch,
            )  # fmt: skip
        except StoreUnavailable as exc:
            logger.warning("split %s: claim write failed (%s); checking", split, exc)
            result = yield from self.tenancies._landed(split, record)
            if result is None:
                return "given up"
        if not isinstance(result, Won):
            return "lost"
        self._gained(split, kind, record, result.revision, lease_rev)
        return "won"

    def _adopt_late_commit(self, split: str, epoch: int) -> Flow[bool]:
        """After a lost claim CAS, read the record back: whether the single retry is due.

        It is when the CAS lost to the previous owner's zombie committing just before (legal:
        it still owned the split), not to a rival claim; the retry builds on that commit.
        """
        host = self.host
        entry = yield from self.tenancies._read_or_none(DURABLE, host.keys.split(split))
        if entry is None:
            return False
        host.fold(host.view.apply_put(DURABLE, entry))
        fresh = host.view.splits[split].progress
        return fresh.status is Status.RUNNABLE and fresh.epoch < epoch

    def _gained(
        self, split: str, kind: ClaimKind, record: ProgressRecord, revision: int, lease_rev: int
    ) -> None:
        host = self.host
        plan = host.view.plan
        fence = fence_of(0 if plan is None else plan.incarnation_ms, record.epoch)
        self.tenancies.phases.move(
            split,
            SplitEvent.WON,
            Tenancy(record.epoch, lease_rev, host.now(), host.session.session, fence=fence),
        )
        host.fold(host.view.put_progress(split, record, revision))
        host.metrics.acquired(ACQUIRE_REASONS[kind])
        since = self.awaiting.pop(split, None)
        if since is not None:
            host.metrics.assignment_latency(host.now() - since)
        spec = host.view.splits[split].spec
        assert spec is not None
        # A split that was split resumes its primary (the record's), not the planner's whole.
        descriptor = spec.descriptor if record.descriptor is None else record.descriptor
        host.emit(Gained(split, record.epoch, record.progress, descriptor, spec.weight, fence))
        if host.parting:
            # Departure began while this claim was in flight: hand it straight back.
            host.start(self.tenancies.release_flow(split))
