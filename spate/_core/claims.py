"""A worker's own splits: claiming, renewing, committing, failing, releasing, quarantining.

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
  quarantined, by any worker, assigned or not and at any budget —
  or a fleet of full workers could never reach the Stalled verdict.
- **Renewals at a third of the lease**, each a CAS on the lease; a lost CAS reads back: our own
  maybe-landed write is adopted, our instance id under a foreign nonce is fatal (two live
  workers share an id), anyone else is a thief (Lost "fenced"). No successful lease write for a
  whole lease means self-fence (Lost "starved") before peers must fight our zombie.
- **Commit is one CAS** on the progress record. A watermark never regresses (fatal: a source
  bug). A lost CAS reads back before reporting Fenced: our own maybe-landed commit is adopted.
  A completed commit hands the lease back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import attrs
import outcome

from spate._core.deadlines import Deadlines
from spate._core.flows import Flow, Fork, Hold, Op
from spate._core.host import Drains, Host, ReleaseOutcome
from spate._core.protocol import (
    FAIL,
    Candidate,
    ClaimKind,
    SplitFacts,
    attempts_after,
    claim_candidates,
    exhausts_attempts,
)
from spate._core.records import LeaseRecord, ProgressRecord, Status, decode, encode
from spate._core.view import (
    AssignmentChanged,
    AssignmentGone,
    LeaseChanged,
    LeaseGone,
    ProgressChanged,
    SplitView,
)
from spate._errors import FatalCoordinationError, Fenced, StoreUnavailable
from spate._events import Gained, Lost, Progress, Quarantined
from spate._metrics import AcquireReason, LossReason, RevocationOutcome
from spate._store import Entry, Keyspace, Won

__all__ = ["Claims", "Owned", "ReleaseOutcome"]

logger = logging.getLogger("spate.claims")

RENEW_GATE = 0.7
"""A held lease is renewed on a heartbeat once this fraction of the renew interval has passed."""

D, E = Keyspace.DURABLE, Keyspace.EPHEMERAL
RETRY_AFTER_ERROR = 1.0
"""Seconds before a split whose claim or quarantine hit a store error is tried again."""

ACQUIRE_REASONS: dict[ClaimKind, AcquireReason] = {
    ClaimKind.CREATE: "create",
    ClaimKind.RELEASED: "reassigned",
    ClaimKind.RECLAIM: "reclaimed",
    ClaimKind.EXPIRED: "expired",
}
"""The metrics reason of a won claim, by the kind of claim it was."""


@attrs.define(eq=False)
class Owned:
    """A split this worker holds: the epoch of its tenancy and its lease's state."""

    epoch: int
    lease_rev: int
    last_ok: float
    """When a lease write last succeeded (renewal cadence and the starvation self-fence)."""
    session: int = 0
    """The store session the lease was written under (session stores: it dies with it)."""


class Claims:
    """The splits this worker holds, and every flow that changes that."""

    def __init__(self, core: Host) -> None:
        self.core = core
        self.drains: Drains
        """The revocations (the machine wires them in): told of commits and of ends."""
        self.owned: dict[str, Owned] = {}
        self.busy: set[str] = set()
        """Splits with a claim, quarantine, release or fail in flight (no second one starts)."""
        self._stray: dict[str, float] = {}
        """Splits whose lease key is this process's while it does not hold them, since when."""
        self.claiming = 0
        self.assigned: frozenset[str] = frozenset()
        self.assignment_seen = False
        self.assign_generation = 0
        self.awaiting: dict[str, float] = {}
        self.retry_at = Deadlines()
        """Splits held back after a store error, until their retry is due."""
        # What a step must look at again. A step re-evaluates only the splits whose facts
        # changed since the last one (a notice named them, a spec arrived, a flow on them
        # ended, a retry came due), and sweeps every candidate only when lanes freed up, the
        # assignment changed, or on a heartbeat (the backstop: no change can be missed for
        # longer than a beat).
        self._dirty: set[str] = set()
        self._sweep = True
        self._slots_left = 0

    # -- deciding ----------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """Claim what is assigned and claimable; quarantine what is out of attempts."""
        core = self.core
        view = core.view
        slots = core.config.max_in_flight - len(self.owned) - self.claiming
        self._dirty.update(self.retry_at.pop_due(now))
        self._dirty |= view.take_spec_arrivals()
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
            if state is None or split in self.busy or split in self.retry_at:
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
            facts, held=self.owned, instance=core.instance, max_attempts=core.config.max_attempts
        ):
            if candidate.quarantine:
                self._begin(candidate.split, self._quarantine(candidate))
            elif candidate.split in self.assigned and slots > 0:
                slots -= 1
                self.claiming += 1
                self._begin(candidate.split, self._claim(candidate.split, candidate.kind))
        self._slots_left = slots

    def next_deadline(self) -> float:
        """When a split held back after an error may be tried again."""
        return self.retry_at.next()

    def _begin(self, split: str, flow: Flow[None]) -> None:
        self.busy.add(split)

        def done(result: outcome.Outcome[None]) -> None:
            self.busy.discard(split)
            self._dirty.add(split)
            result.unwrap()

        self.core.start(flow, done)

    # -- what the view tells us --------------------------------------------------------------

    def on_notice(self, notice: LeaseChanged | LeaseGone | ProgressChanged) -> None:
        """Fence held splits that someone else moved."""
        core = self.core
        self._dirty.add(notice.split)
        if isinstance(notice, LeaseChanged):
            if notice.lease.nonce == core.nonce and notice.split not in self.owned:
                self._stray.setdefault(notice.split, core.now())
            else:
                self._stray.pop(notice.split, None)
        elif isinstance(notice, LeaseGone):
            self._stray.pop(notice.split, None)
        if isinstance(notice, ProgressChanged):
            record = notice.record
            previous = notice.previous
            if record.status is Status.QUARANTINED and (
                previous is None or previous.status is not Status.QUARANTINED
            ):
                core.metrics.quarantined()
                core.emit(Quarantined(notice.split, record.attempts))
            held = self.owned.get(notice.split)
            if held is not None and record.epoch > held.epoch:
                # A claimant CASed the record past our tenancy.
                self.drop(notice.split, "fenced")
            return
        held = self.owned.get(notice.split)
        if held is None:
            return
        if isinstance(notice, LeaseChanged):
            lease = notice.lease
            if lease.nonce != core.nonce:
                if lease.owner == core.instance:
                    raise core.duplicate_instance(f"the lease of split {notice.split!r}")
                logger.warning("split %s: lease taken by %s; split lost", notice.split, lease.owner)
                self.drop(notice.split, "fenced")
            return
        if notice.revision is None or notice.revision > held.lease_rev:
            # Our lease expired while we believed we held the split: renewals have been
            # failing for a whole lease, and a peer may already be claiming it.
            self.drop(notice.split, "starved")

    def on_assignment(self, notice: AssignmentChanged | AssignmentGone) -> None:
        """Adopt this worker's assignment (or its withdrawal: "nothing decided")."""
        now = self.core.now()
        if isinstance(notice, AssignmentGone):
            self.assignment_seen = False
            self.assigned = frozenset()
            self.awaiting.clear()
            self._sweep = True
            return
        record = notice.record
        if record.generation < self.assign_generation:
            # A deposed leader's late write must not walk this worker backwards.
            logger.debug("ignoring an assignment of superseded generation %d", record.generation)
            return
        self.assign_generation = record.generation
        named = frozenset(record.splits)
        for split in named - self.assigned:
            if split not in self.owned:
                self.awaiting[split] = now
        for split in [s for s in self.awaiting if s not in named]:
            del self.awaiting[split]
        self.assigned = named
        self.assignment_seen = True
        self._sweep = True

    def abandon(self, split: str) -> None:
        """Stop holding ``split`` without writing (its hand-back could not be written)."""
        if self.owned.pop(split, None) is not None:
            self._ended(split, "forced")

    def _retry_later(self, split: str) -> None:
        """Hold ``split`` back a moment: a store error or a refusal the watch has yet to explain."""
        self.retry_at.set(split, self.core.now() + RETRY_AFTER_ERROR)

    def _ended(self, split: str, outcome: RevocationOutcome) -> None:
        """A tenancy ended (``split`` just left ``owned``): settle its drain, free its lane.

        The freed lane is news to the rules, even when the end came from an API call
        running outside the loop's inputs; so is the settled drain.
        """
        self.drains.settle(split, outcome)
        self.core.request_step()
        if self._stray_key(split):
            # Its lease key may outlive the tenancy (a hand-back whose delete failed, a loss
            # noticed before the key went): give it back if it is still there a beat later.
            self._stray.setdefault(split, self.core.now())

    def drop(self, split: str, reason: LossReason) -> None:
        """Stop holding ``split`` involuntarily and tell the user (Lost)."""
        if self.owned.pop(split, None) is None:
            return
        # A split lost mid-drain ends its revocation the expensive way.
        self._ended(split, "forced")
        self.core.metrics.lost(reason)
        self.core.emit(Lost(split, reason))

    # -- claim -------------------------------------------------------------------------------

    def _claim(self, split: str, kind: ClaimKind) -> Flow[None]:
        try:
            yield from self._claim_steps(split, kind)
        finally:
            self.claiming -= 1

    def _claim_steps(self, split: str, kind: ClaimKind) -> Flow[None]:
        """The two-key claim: lease first, then the progress-record CAS (one retry at most)."""
        if kind is ClaimKind.EXPIRED:
            kind = yield from self._settle_release_race(split)
        state = self.core.view.splits.get(split)
        if state is None or state.progress.status is not Status.RUNNABLE or split in self.owned:
            return
        epoch = state.progress.epoch + 1
        lease_rev = yield from self._acquire_lease(split, kind, state, epoch)
        if lease_rev is None:
            return
        for _ in range(2):
            outcome = yield from self._claim_record(split, kind, epoch, lease_rev)
            if outcome == "won":
                return
            if outcome == "given up" or not (yield from self._adopt_late_commit(split, epoch)):
                break
        yield from self._drop_lease(split, lease_rev, epoch)

    def _settle_release_race(self, split: str) -> Flow[ClaimKind]:
        """One durable read: an owner already cleared makes an "expired" claim "released"."""
        core = self.core
        key = core.keys.split(split)
        entry = yield from self._read_or_none(D, key)
        if entry is None:
            return ClaimKind.EXPIRED
        state = core.view.splits.get(split)
        # Only a read at least as fresh as the view may downgrade: a lagging replica's old
        # owner-less record must not make a real expiry takeover attempt-free.
        fresh = state is None or entry.revision >= state.progress_rev
        record = decode(ProgressRecord, key, entry.value, split=split)
        core.fold(core.view.apply_put(D, entry))
        return ClaimKind.RELEASED if record.owner is None and fresh else ClaimKind.EXPIRED

    def _acquire_lease(
        self, split: str, kind: ClaimKind, state: SplitView, epoch: int
    ) -> Flow[int | None]:
        """Write the claim's lease (the first key): its revision, or None to try again later."""
        core = self.core
        key = core.keys.split(split)
        lease = LeaseRecord(owner=core.instance, nonce=core.nonce, epoch=epoch)
        yield Hold(E, key)
        if kind is ClaimKind.RECLAIM and state.lease is not None:
            op = Op(
                "update", E, key, encode(lease), expected=state.lease_rev,
                operation="claim-lease", split=split, epoch=epoch,
            )  # fmt: skip
        else:
            op = Op(
                "create", E, key, encode(lease), operation="claim-lease", split=split,
                epoch=epoch,
            )  # fmt: skip
        # Refused: a peer won the lease (the watch brings its write), or our view of our own
        # lease is stale (a lost reply, another process under our id).
        won = yield from self._write_or_retry_later(op, "lease write")
        if won is None:
            return None
        core.fold(core.view.put_lease(split, lease, won.revision))
        return won.revision

    def _claim_record(
        self, split: str, kind: ClaimKind, epoch: int, lease_rev: int
    ) -> Flow[Literal["won", "lost", "given up"]]:
        """The progress-record CAS that wins the claim: the epoch bumped, this owner named.

        "lost" when the CAS lost (a zombie's late commit, or a rival claim: the caller reads
        back); "given up" when the split moved on or the outcome cannot be known.
        """
        core = self.core
        key = core.keys.split(split)
        # Hold the key before reading the record the CAS is built from: a write of ours still
        # in flight (a commit of the tenancy just lost) changes both the record and its
        # revision, and a record read before the wait paired with the revision read after it
        # would write old progress back under a fresh revision.
        yield Hold(D, key)
        state = core.view.splits.get(split)
        if state is None or state.spec is None or core.parting:
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
            owner=core.instance,
            owner_nonce=core.nonce,
            attempts=attempts_after(kind, progress.attempts, progress.advanced),
            written_at_ms=self.core.wall_ms(),
            advanced=False,
        )
        try:
            result = yield Op(
                "update", D, key, encode(record), expected=state.progress_rev,
                operation="claim", split=split, epoch=epoch,
            )  # fmt: skip
        except StoreUnavailable as exc:
            logger.warning("split %s: claim write failed (%s); checking", split, exc)
            result = yield from self._landed(split, record)
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
        core = self.core
        entry = yield from self._read_or_none(D, core.keys.split(split))
        if entry is None:
            return False
        core.fold(core.view.apply_put(D, entry))
        fresh = core.view.splits[split].progress
        return fresh.status is Status.RUNNABLE and fresh.epoch < epoch

    def _landed(self, split: str, record: ProgressRecord) -> Flow[Won | None]:
        """After an unknown outcome, find out whether our write landed (Won) or not (None)."""
        core = self.core
        entry = yield from self._read_or_none(D, core.keys.split(split))
        if entry is None:
            return None
        stored = decode(ProgressRecord, entry.key, entry.value, split=split)
        if attrs.evolve(stored, written_at_ms=0) == attrs.evolve(record, written_at_ms=0):
            return Won(entry.revision)
        core.fold(core.view.apply_put(D, entry))
        return None

    def _read_or_none(self, keyspace: Keyspace, key: str) -> Flow[Entry | None]:
        """Read ``key``: None when it is absent or the store cannot be reached.

        For the read-backs that can act only on what they find: either way there is nothing
        to adopt, downgrade or retry on.
        """
        try:
            entry: Entry | None = yield Op("get", keyspace, key)
        except StoreUnavailable:
            return None
        return entry

    def _write_or_retry_later(self, op: Op, what: str) -> Flow[Won | None]:
        """Perform ``op``, a write on a split's key: Won, or None with the split held back.

        A store error, or a refusal the watch has yet to explain, holds the split back for
        :data:`RETRY_AFTER_ERROR`: retrying at once would meet the same refusal and spin
        against the store until the watch catches up.
        """
        assert op.split is not None
        try:
            result = yield op
        except StoreUnavailable as exc:
            logger.warning("split %s: %s failed (%s); retrying later", op.split, what, exc)
            self._retry_later(op.split)
            return None
        if not isinstance(result, Won):
            self._retry_later(op.split)
            return None
        return result

    def _gained(
        self, split: str, kind: ClaimKind, record: ProgressRecord, revision: int, lease_rev: int
    ) -> None:
        core = self.core
        self.owned[split] = Owned(record.epoch, lease_rev, core.now(), core.session.generation)
        core.fold(core.view.put_progress(split, record, revision))
        core.metrics.acquired(ACQUIRE_REASONS[kind])
        since = self.awaiting.pop(split, None)
        if since is not None:
            core.metrics.assignment_latency(core.now() - since)
        spec = core.view.splits[split].spec
        assert spec is not None
        core.emit(Gained(split, record.epoch, record.progress, spec.descriptor, spec.weight))
        if core.parting:
            # Departure began while this claim was in flight: hand it straight back.
            core.start(self.release_flow(split))

    def _drop_lease(self, split: str, lease_rev: int, epoch: int) -> Flow[None]:
        """Best-effort removal of a lease this worker wrote (guarded by its revision)."""
        core = self.core
        key = core.keys.split(split)
        yield Hold(E, key)
        try:
            result = yield Op(
                "delete", E, key, expected=lease_rev, operation="lease-release", split=split,
                epoch=epoch,
            )  # fmt: skip
        except StoreUnavailable as exc:
            logger.debug("split %s: lease clean-up failed (%s); it will expire", split, exc)
            return
        if isinstance(result, Won):
            core.fold(core.view.forget_own(E, key, lease_rev))
        else:
            yield from core.reread(E, key)  # so a later give-back is guarded rightly

    def _give_back_strays(self, now: float) -> None:
        """Delete lease keys of this process for splits it does not hold.

        A claim whose lease write landed unseen (its reply lost), or a hand-back whose lease
        delete failed, leaves such a key. Nobody else can claim the split while it stands. On
        a per-key store it expires within a lease; on a session store this process's
        keepalive would keep it for ever, and the split with it. A key stray for a whole beat
        (not a claim's own write, seen before the split is held) is given back, guarded by
        its revision.
        """
        core = self.core
        for split, since in list(self._stray.items()):
            if not self._stray_key(split):
                del self._stray[split]
                continue
            if (
                now - since < core.lease / 3
                or split in self.busy
                or core.busy(E, core.keys.split(split))
            ):
                continue
            del self._stray[split]
            logger.info("split %s: giving back a lease key of this process it does not hold", split)
            state = core.view.splits[split]
            assert state.lease is not None  # (checked by _stray_key)
            core.start(self._give_back(split, state.lease_rev, state.lease.epoch))

    def _give_back(self, split: str, lease_rev: int, epoch: int) -> Flow[None]:
        yield from self._drop_lease(split, lease_rev, epoch)
        # Still there (the store could not be reached, or the key moved on under us): a
        # later beat tries again; on a session store nothing else would ever remove it.
        if self._stray_key(split):
            self._stray.setdefault(split, self.core.now())

    def _stray_key(self, split: str) -> bool:
        """Whether the view has a lease key of this process's for ``split``, not held here."""
        state = self.core.view.splits.get(split)
        return (
            state is not None
            and state.lease is not None
            and state.lease.nonce == self.core.nonce
            and split not in self.owned
        )

    # -- quarantine --------------------------------------------------------------------------

    def _quarantine(self, candidate: Candidate) -> Flow[None]:
        core = self.core
        split = candidate.split
        key = core.keys.split(split)
        yield Hold(D, key)
        state = core.view.splits.get(split)
        if state is None or state.progress.status is not Status.RUNNABLE:
            return
        attempts = attempts_after(candidate.kind, state.progress.attempts, state.progress.advanced)
        if attempts == state.progress.attempts:
            return  # a late commit of the dead tenancy moved the split forward: no blame
        stale_lease = state.lease_rev if candidate.kind is ClaimKind.RECLAIM else 0
        stale_epoch = state.lease.epoch if state.lease is not None else state.progress.epoch
        record = attrs.evolve(
            state.progress,
            epoch=state.progress.epoch + 1,  # the fence: the dead owner's zombie cannot write
            status=Status.QUARANTINED,
            owner=None,
            owner_nonce="",
            attempts=attempts,
            written_at_ms=self.core.wall_ms(),
        )
        op = Op(
            "update", D, key, encode(record), expected=state.progress_rev,
            operation="quarantine", split=split, epoch=record.epoch,
        )  # fmt: skip
        # Refused: someone else moved it; the watch brings the news (or the reconcile listing,
        # if the watch missed it).
        result = yield from self._write_or_retry_later(op, "quarantine write")
        if result is None:
            return
        logger.warning("split %s quarantined after %d attempts", split, record.attempts)
        core.fold(core.view.put_progress(split, record, result.revision))
        if stale_lease:
            yield from self._drop_lease(split, stale_lease, stale_epoch)

    # -- renewals ----------------------------------------------------------------------------

    def heartbeat(self, now: float) -> None:
        """Renew every held lease that is due; fence the splits whose lease starved."""
        core = self.core
        self._sweep = True  # the backstop of the incremental step
        if self._stray:
            self._give_back_strays(now)
        # Heartbeat ticks are jittered to 0.8-1.2 of a third of the lease. Gating renewals at a
        # full third skipped every early tick, leaving gaps of up to two thirds of a lease (and
        # almost a whole one under load); gating below the shortest tick renews on every beat.
        renew_every = core.lease / 3 * RENEW_GATE
        if core.session.keeps_keys:
            # A session store keeps every lease key alive through the session's keepalive:
            # nothing to renew per split. A key lives until at least the session's last
            # confirmed keepalive plus the lease, and dies with a lost or replaced session.
            for split, held in list(self.owned.items()):
                if core.session.starved(held.session, now, core.lease):
                    logger.warning("split %s: the store session kept no lease alive", split)
                    self.drop(split, "starved")
            return
        for split, held in list(self.owned.items()):
            if now - held.last_ok >= core.lease:
                logger.warning("split %s: no lease write succeeded for a whole lease", split)
                self.drop(split, "starved")
            elif now - held.last_ok >= renew_every and not core.busy(E, core.keys.split(split)):
                core.start(self._renew(split, held))

    def _renew(self, split: str, held: Owned) -> Flow[None]:
        core = self.core
        key = core.keys.split(split)
        yield Hold(E, key)
        if self.owned.get(split) is not held:
            return
        lease = LeaseRecord(owner=core.instance, nonce=core.nonce, epoch=held.epoch)
        try:
            result = yield Op(
                "update", E, key, encode(lease), expected=held.lease_rev,
                operation="renew", split=split, epoch=held.epoch,
            )  # fmt: skip
        except StoreUnavailable as exc:
            logger.warning("split %s: renewal failed (%s); the next heartbeat retries", split, exc)
            return
        if isinstance(result, Won):
            self._renewed(split, held, lease, result.revision)
            return
        try:
            entry: Entry | None = yield Op("get", E, key)
        except StoreUnavailable:
            return  # cannot tell; the next beat (or the self-fence) decides
        if self.owned.get(split) is not held:
            return
        if entry is None:
            self.drop(split, "starved")
            return
        current = decode(LeaseRecord, key, entry.value)
        if current.owner == core.instance and current.nonce == core.nonce:
            # A renewal that reported an error but landed: the lease is still ours.
            self._renewed(split, held, current, entry.revision)
        elif current.owner == core.instance:
            raise core.duplicate_instance(f"the lease of split {split!r}")
        else:
            self.drop(split, "fenced")

    def _renewed(self, split: str, held: Owned, lease: LeaseRecord, revision: int) -> None:
        held.lease_rev = max(held.lease_rev, revision)
        held.last_ok = self.core.now()
        self.core.fold(self.core.view.put_lease(split, lease, revision))

    # -- commit, fail, release -----------------------------------------------------------------

    def commit_flow(self, split: str, progress: Progress) -> Flow[BaseException | None]:
        """One fenced CAS on the progress record; returns the error for the caller, if any."""
        core = self.core
        key = core.keys.split(split)
        if split not in self.owned:
            return Fenced(split, "this worker does not hold it; nothing was written")
        yield Hold(D, key)
        held = self.owned.get(split)
        if held is None:
            return Fenced(split, "it was lost before the commit could be written")
        state = core.view.splits[split]
        previous = state.progress.watermark
        if previous is not None and (progress.watermark is None or progress.watermark < previous):
            raise FatalCoordinationError(
                f"split {split!r}: a commit would move the watermark back from {previous} to "
                f"{progress.watermark}. Watermarks never move backwards; this is a bug in the "
                "work source (commit positions must only grow). The worker stopped so that no "
                "progress is lost."
            )
        record = committed(state.progress, progress, self.core.wall_ms())
        try:
            result = yield Op(
                "update", D, key, encode(record), expected=state.progress_rev,
                operation="commit", split=split, epoch=held.epoch,
            )  # fmt: skip
        except StoreUnavailable as exc:
            return StoreUnavailable(
                f"committing split {split!r} failed ({exc}); it may or may not have landed. "
                "Retry the same commit: a landed one is recognised and adopted."
            )
        if not isinstance(result, Won):
            # A lost CAS may be our own earlier attempt that landed with its reply lost.
            result = yield from self._landed(split, record)
            if result is None:
                self.drop(split, "fenced")
                return Fenced(split, "another worker took it over; nothing was written")
        self.drains.note_progress(split)
        core.fold(core.view.put_progress(split, record, result.revision))
        if progress.completed and self.owned.get(split) is held:
            self.owned.pop(split)
            # Finishing mid-revocation is the cooperative outcome: nothing replays.
            self._ended(split, "drained")
            yield from self._drop_lease_of(split, held)
        return None

    def _drop_lease_of(self, split: str, held: Owned) -> Flow[None]:
        # Busy until the lease is gone: our own lingering lease must not read as a
        # restarted predecessor's (a reclaim, which would consume an attempt).
        self.busy.add(split)
        try:
            # Hold first: a renewal in flight moves the revision this delete is guarded by.
            yield Hold(E, self.core.keys.split(split))
            yield from self._drop_lease(split, held.lease_rev, held.epoch)
        finally:
            self.busy.discard(split)

    def fail_flow(self, split: str, reason: str) -> Flow[BaseException | None]:
        """Report a failure: consumes an attempt, clears the owner, quarantines at the cap."""
        core = self.core
        key = core.keys.split(split)
        if split not in self.owned:
            return Fenced(split, "this worker does not hold it; nothing was written")
        core.metrics.failed()
        yield Hold(D, key)
        held = self.owned.get(split)
        if held is None:
            return Fenced(split, "it was lost before the failure could be written")
        state = core.view.splits[split]
        progress = state.progress
        attempts = attempts_after(FAIL, progress.attempts, progress.advanced)
        quarantine = exhausts_attempts(
            FAIL, progress.attempts, progress.advanced, core.config.max_attempts
        )
        record = attrs.evolve(
            state.progress,
            attempts=attempts,
            owner=None,
            owner_nonce="",
            status=Status.QUARANTINED if quarantine else state.progress.status,
            epoch=state.progress.epoch + int(quarantine),
            written_at_ms=self.core.wall_ms(),
        )
        logger.warning(
            "split %s failed (%s); attempt %d of %d%s", split, reason, attempts,
            core.config.max_attempts, ", quarantining" if quarantine else "",
        )  # fmt: skip
        try:
            result = yield Op(
                "update", D, key, encode(record), expected=state.progress_rev,
                operation="fail", split=split, epoch=held.epoch,
            )  # fmt: skip
        except StoreUnavailable as exc:
            return StoreUnavailable(f"reporting the failure of split {split!r} failed ({exc})")
        if not isinstance(result, Won):
            self.drop(split, "fenced")
            return Fenced(split, "another worker took it over; nothing was written")
        # Ended by request: no Lost event. Leave `owned` first so the epoch bump of a
        # quarantine cannot read as a peer's fence.
        self.owned.pop(split, None)
        self._ended(split, "forced")
        core.fold(core.view.put_progress(split, record, result.revision))
        yield from self._drop_lease_of(split, held)
        return None

    def release_flow(self, split: str) -> Flow[ReleaseOutcome]:
        """Hand ``split`` back cleanly: clear the owner (no attempt consumed), drop the lease."""
        outcome, lease = yield from self._hand_back(split)
        if lease is not None:
            yield from self._drop_lease_of(split, lease)
        return outcome

    def hand_back_all_flow(
        self,
        splits: list[str],
        beside: Callable[[list[ReleaseOutcome]], Flow[None] | None],
    ) -> Flow[list[ReleaseOutcome]]:
        """Hand every one of ``splits`` back at once, then drop all their leases at once.

        ``beside`` is shown the hand-backs' outcomes and may name one more flow to run with
        the lease drops: a departure's presence delete. So the others learn of the departure
        in the same step as the freed leases, not one write later, and still only once the
        working set is empty (every owner cleared). Each split stays busy from its hand-back
        to the end of its lease drop, as in :meth:`release_flow`.
        """
        try:
            handed = yield Fork(tuple(self._hand_back(split) for split in splits))
            # An exception out of a hand-back is fatal (it ends the coordinator).
            results: list[tuple[ReleaseOutcome, Owned | None]] = [o.unwrap() for o in handed]
            outcomes = [outcome for outcome, _ in results]
            drops = tuple(
                self._drop_lease_of(split, lease)
                for split, (_, lease) in zip(splits, results, strict=True)
                if lease is not None
            )
            extra = beside(outcomes)
            ends = yield Fork(drops if extra is None else (*drops, extra))
        finally:
            # A hand-back whose lease drop never ran (the departure was abandoned half-way)
            # must not leave its split busy: the stray lease of a busy split is never given
            # back, and on a session store this process would keep it alive for ever.
            self.busy.difference_update(splits)
        for end in ends:
            end.unwrap()
        return outcomes

    def _hand_back(self, split: str) -> Flow[tuple[ReleaseOutcome, Owned | None]]:
        """Clear ``split``'s owner (no attempt consumed): the first half of a release.

        Returns the outcome and, when its lease is to be dropped, the tenancy whose lease it
        is; the split then stays busy, and the caller must drop that lease next.
        """
        core = self.core
        key = core.keys.split(split)
        yield Hold(D, key)
        held = self.owned.get(split)
        state = core.view.splits.get(split)
        if held is None or state is None:
            return "missing", None
        self.busy.add(split)
        lease: Owned | None = None
        try:
            record = attrs.evolve(
                state.progress, owner=None, owner_nonce="", written_at_ms=self.core.wall_ms()
            )
            try:
                result = yield Op(
                    "update", D, key, encode(record), expected=state.progress_rev,
                    operation="release", split=split, epoch=held.epoch,
                )  # fmt: skip
            except StoreUnavailable as exc:
                logger.warning("split %s: release failed (%s); the lease will expire", split, exc)
                self.abandon(split)
                if not core.parting:
                    # (A departing worker's session ends next and takes the lease with it: a
                    # second write to an unreachable store would only delay the leave.)
                    lease = held
                return "failed", lease
            if not isinstance(result, Won):
                self.drop(split, "fenced")
                return "fenced", None
            self.owned.pop(split, None)
            core.fold(core.view.put_progress(split, record, result.revision))
            # The tail is committed and the owner cleared: the next owner replays nothing.
            self._ended(split, "drained")
            lease = held
            return "released", lease
        finally:
            if lease is None:
                self.busy.discard(split)


def committed(record: ProgressRecord, progress: Progress, written_at_ms: int) -> ProgressRecord:
    """``record`` after its owner commits ``progress`` at ``written_at_ms``.

    Built field by field, not with ``attrs.evolve`` (half the cost, on every commit); a test
    holds it equal to the evolve it replaces.
    """
    return ProgressRecord(
        schema=record.schema,
        id=record.id,
        epoch=record.epoch,
        status=Status.COMPLETED if progress.completed else record.status,
        owner=record.owner,
        attempts=record.attempts,
        watermark=progress.watermark,
        state=progress.state,
        completed=progress.completed,
        written_at_ms=written_at_ms,
        # The fair-blame flag: set by the tenancy's first commit that moves the watermark.
        advanced=record.advanced or progress.watermark != record.watermark,
        owner_nonce=record.owner_nonce,
    )
