"""Election: the leader key, the generation fence, renewal, resignation and deposition.

- **Election** is a create of the ephemeral ``leader`` key, tried only when none is seen. The
  winner bumps the plan record's generation by CAS (up to three tries, else it steps down
  rather than lead unfenced). Every later leader write is fenced by that generation: a plan
  publish CASes the plan record at the revision its run started from, and assignment records
  carry the generation (workers ignore older ones). A deposed leader's writes therefore lose,
  or are ignored; brief double leadership costs balance, never ownership.
- **Deposition**: a leader key written by another process, a leader key deleted after ours
  (expiry), a plan record with a newer generation, an assignment record of a newer
  generation, or a lost leader renewal ends leadership (the leader's other parts stop with it:
  :meth:`spate._core.leader.leadership.Leadership.demote`).
- **A key of ours we do not lead by** (an election whose reply was lost landed unseen) is
  given back at the next heartbeat: nobody else elects while it stands.

Each step moves the leader's phase by a row of :data:`spate._core.leader.phase.TRANSITIONS`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from spate._core.flows import Flow, Hold, Op
from spate._core.host import Host
from spate._core.leader.phase import LeaderEvent, LeaderPhase, LeaderPhases
from spate._core.records import AssignmentRecord, LeaderRecord, encode
from spate._core.view.vanished import record_vanished
from spate._core.view.view import LeaderChanged, LeaderGone, PlanChanged
from spate._errors import FatalCoordinationError, StoreUnavailable
from spate._store import Keyspace, Won

__all__ = ["BUMP_TRIES", "ELECTION_RETRY_DIVISOR", "Election", "fingerprint_mismatch"]

logger = logging.getLogger("spate.leader")

DURABLE, EPHEMERAL = Keyspace.DURABLE, Keyspace.EPHEMERAL
BUMP_TRIES = 3
"""Tries of the generation bump before a new leader gives its leadership back."""
ELECTION_RETRY_DIVISOR = 10
"""A failed or lost election is retried after this fraction of the lease (not at once)."""


class Election:
    """Who leads: this worker's elections, its fence, its renewals and its stepping down.

    ``fenced`` runs when the generation bump lands (the leadership's other parts begin), and
    ``demote`` ends the leadership (the leader's facade, which stops every part).
    """

    def __init__(
        self,
        host: Host,
        phases: LeaderPhases,
        *,
        fenced: Callable[[float], None],
        demote: Callable[[bool], None],
    ) -> None:
        self.host = host
        self.phases = phases
        self._fenced = fenced
        self._demote = demote
        self.rev: int | None = None
        """Revision of the leader key while this worker holds it."""
        self.generation = 0
        """The generation this worker leads (or last led) under."""
        self._elect_after = 0.0

    @property
    def leading(self) -> bool:
        """Whether this worker holds the leader key."""
        return self.phases.leading

    def step(self, now: float) -> None:
        """Try for the leader key when nobody holds it (a follower's only leader rule)."""
        view = self.host.view
        if (
            self.phases.phase is LeaderPhase.FOLLOWER
            and view.leader is None
            and view.plan is not None
            and now >= self._elect_after
        ):
            self.phases.apply(LeaderEvent.ELECT)
            self.host.start(self._elect(view.plan.generation + 1))

    def next_deadline(self, now: float) -> float | None:
        """When a failed or lost election may be tried again (None: nothing waits)."""
        if not self.leading and self._elect_after > now:
            return self._elect_after
        return None

    def step_down(self) -> int | None:
        """The leadership ended: the revision of the key it held (to resign), or None."""
        rev, self.rev = self.rev, None
        self.phases.apply(LeaderEvent.DEMOTED)
        return rev

    def resign(self, rev: int) -> None:
        """Delete the leader key written at ``rev`` so a successor is elected now."""
        self.host.start(self._resign(rev))

    # -- what the view tells us ----------------------------------------------------------------

    def on_notice(self, notice: LeaderChanged | LeaderGone | PlanChanged) -> None:
        """Check the fingerprint; step down when deposed."""
        host = self.host
        if isinstance(notice, PlanChanged):
            if notice.plan.fingerprint != host.fingerprint:
                raise fingerprint_mismatch(host.job, notice.plan.fingerprint, host.fingerprint)
            if self.leading and notice.plan.generation > self.generation:
                logger.warning("deposed: plan generation %d is newer", notice.plan.generation)
                self._demote(False)
            return
        if not self.leading or self.rev is None:
            return
        if isinstance(notice, LeaderChanged):
            if notice.leader.nonce != host.nonce:
                logger.warning("deposed: %s holds the leader key", notice.leader.owner)
                self._demote(False)
        elif notice.revision is None or notice.revision > self.rev:
            logger.warning("leadership lease expired")
            self._demote(False)

    def on_assignment(self, record: AssignmentRecord) -> None:
        """An assignment record was written: one of a newer generation deposes this leader.

        A newer leader's record proves it exists as surely as its plan record does, and a
        leader reads that record on a watch of its own: when its plan watch is down (broken,
        re-opening), two leaders would otherwise overwrite each other's records back and
        forth.
        """
        if self.leading and record.generation > self.generation:
            logger.warning("deposed: an assignment record of generation %d", record.generation)
            self._demote(False)

    # -- the flows -----------------------------------------------------------------------------

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
            self.phases.apply(LeaderEvent.WON)
            host.fold(host.view.put_leader(record, result.revision))
            logger.info("elected leader at generation %d", target)
            yield from self._bump(target)
        finally:
            self.phases.apply(LeaderEvent.ELECTION_ENDED)

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
                self.phases.apply(LeaderEvent.FENCED)
                self._fenced(host.now())
                return
            try:
                entry = yield Op("get", DURABLE, host.keys.plan)
            except StoreUnavailable as exc:
                # A transient read error is no reason to stop the worker: try again (on the
                # revision we knew), and after BUMP_TRIES give the leadership back.
                logger.warning("reading the plan after a lost generation bump failed (%s)", exc)
                continue
            if entry is None:
                raise FatalCoordinationError(record_vanished(host.keys.plan, "during an election"))
            host.fold(host.view.apply_put(DURABLE, entry))
        # Never lead without the fence.
        self._demote(True)

    def heartbeat(self) -> None:
        """Renew the leader key (while leading); give back a key of ours we do not lead by."""
        host, view = self.host, self.host.view
        if host.busy(EPHEMERAL, host.keys.leader):
            return
        if self.leading:
            host.start(self._renew())
        elif (
            view.leader is not None
            and view.leader.nonce == host.nonce
            and self.phases.phase is LeaderPhase.FOLLOWER
        ):
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
            self._demote(False)


def fingerprint_mismatch(job: str, stored: str, ours: str) -> FatalCoordinationError:
    """The error for a worker whose fingerprint differs from the job's."""
    return FatalCoordinationError(
        f"job {job!r} was started with fingerprint {stored!r}, but this worker uses {ours!r}; "
        "workers with different fingerprints cannot share a job. Deploy the same fingerprint "
        "everywhere, or run the new configuration under a new job name."
    )
