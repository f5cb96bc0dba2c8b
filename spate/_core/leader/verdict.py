"""The verdict of a bounded job: AllComplete or Stalled, decided once, by the leader.

The leader decides it and publishes it in the plan record; every worker (the leader too)
reports the verdict it reads there, and only that one. So at the end of a job only the leader
lists the job's records, not every worker: a fleet of ``W`` workers on ``N`` splits reads ``N``
records for its verdict, not ``W * N``. The rules, each with the race it prevents:

- **Quarantine blocks completion explicitly**: a job with any quarantined split ends
  ``Stalled(completed, quarantined)``; it is never left to counting arithmetic.
- **An authoritative listing decides**, not the leader's watch-fed view and not the plan
  record's ``planned`` count (a lower bound: records are seeded before the count is
  published, so a final plan may name fewer splits than exist). Judging a subset that happens
  to be complete is exactly how a quarantined split would go unseen. The listing costs one
  round trip and runs only once the leader's view looks finished.
- **The verdict is generation-fenced**: it is a CAS on the plan record at the revision the
  leader read before its listing, written only while the record's generation is the leader's.
  A deposed leader's write therefore loses against its successor's generation bump, and a
  bump that loses against the verdict keeps it (the bump rewrites the record it read).
- **The verdict latches**: no worker gives a plan record that carries a verdict another one,
  and each worker reports it once. Only the operator's requeue clears it (it reopens the job,
  see :func:`spate.ops.requeue`), and its write makes a verdict being judged meanwhile lose.
- **Every residual is work** (docs/splitting.md): a listing in which a record names a residual that
  has no record of its own yet decides nothing; the residual is seeded and run first.
- **A new leader finishes the job**: one that takes over a final plan with no verdict (its
  predecessor died between the listing and the write) judges it as its predecessor would have.
"""

from __future__ import annotations

import logging
import math

import attrs

from spate._core.flows import Flow, Hold, Op
from spate._core.host import Host, Lead
from spate._core.leader.residuals import unseeded
from spate._core.records import Finality, VerdictRecord, encode
from spate._errors import StoreUnavailable
from spate._events import AllComplete, Stalled
from spate._store import Entry, Keyspace, Won

__all__ = ["VerdictJudge"]

logger = logging.getLogger("spate.verdict")

RETRY_AFTER = 1.0
"""Seconds before re-judging after a listing that could not decide, or a write that failed."""


class VerdictJudge:
    """Judges the end of a bounded job (when leading) and reports the published verdict once."""

    def __init__(self, host: Host, lead: Lead) -> None:
        self.host = host
        self.lead = lead
        self.reported = False
        self._judging = False
        self._not_before = 0.0

    def observe(self) -> None:
        """Report the verdict the plan record carries, once (on every worker)."""
        if self.reported:
            return
        plan = self.host.view.plan
        if plan is not None and plan.verdict is not None:
            self.reported = True
            verdict = plan.verdict
            if verdict.all_complete:
                self.host.emit(AllComplete())
            else:
                self.host.emit(
                    Stalled(completed=verdict.completed, quarantined=verdict.quarantined)
                )

    def step(self, now: float) -> None:
        """As the leader, start an authoritative listing when the local view looks finished.

        The machine has had the judge :meth:`observe` the plan record first, this step.
        """
        if self.reported or self._judging or now < self._not_before:
            return
        generation = self.lead.verdict_generation
        if generation is None:
            return  # a follower reads the verdict; it never lists the job for it
        view = self.host.view
        plan = view.plan
        if plan is None or plan.finality is not Finality.FINAL:
            return
        tallies = view.tallies
        local = len(view.splits)
        if local < plan.planned or tallies.completed + tallies.quarantined != local:
            return
        self._judging = True
        self.host.start(self._judge(generation))

    def next_deadline(self) -> float:
        """When a deferred judgement may be retried."""
        return self._not_before if self._not_before > self.host.now() else math.inf

    def _judge(self, generation: int) -> Flow[None]:
        host, view = self.host, self.host.view
        key = host.keys.plan
        try:
            # The plan record is held from before the listing to the verdict's write, and that
            # write expects the revision read here: any write to the record meanwhile (a
            # successor's generation bump, the operator's requeue reopening the job) makes it
            # lose, so no verdict is ever published from a listing older than the record.
            yield Hold(Keyspace.DURABLE, key)
            plan, rev = view.plan, view.plan_rev
            if plan is None or plan.verdict is not None or self.lead.verdict_generation is None:
                return
            try:
                entries: list[Entry] = yield Op("list", Keyspace.DURABLE, host.keys.split_prefix)
            except StoreUnavailable as exc:
                # Refusing to judge is the safe direction: the job keeps running.
                logger.warning("the verdict's listing failed (%s); deferring the verdict", exc)
                self._defer()
                return
            verdict = self._decide(entries)
            if verdict is None:
                self._defer()
                return
            if self.lead.verdict_generation != generation or view.plan_rev != rev:
                return  # deposed, or the record moved under the listing: judge again, or not
            record = attrs.evolve(plan, verdict=verdict, updated_at_ms=host.wall_ms())
            try:
                result = yield Op(
                    "update", Keyspace.DURABLE, key, encode(record), expected=rev,
                    operation="verdict-publish",
                )  # fmt: skip
            except StoreUnavailable as exc:
                logger.warning("publishing the verdict failed (%s); judging again", exc)
                self._defer()
                return
            if isinstance(result, Won):
                host.fold(view.put_plan(record, result.revision))
                self.observe()
                return
            # Another write moved the plan record (a successor's bump, the operator, or a
            # revision our view missed): read what is there. A verdict found there is reported;
            # otherwise, still leading, it judges again from a fresh listing, after a pause
            # (a view whose revision the read cannot correct would otherwise spin on listings).
            yield from host.reread(Keyspace.DURABLE, key)
            self.observe()
            self._defer()
        finally:
            self._judging = False

    def _decide(self, entries: list[Entry]) -> VerdictRecord | None:
        """The verdict of an authoritative listing, or None when it cannot decide one yet."""
        host = self.host
        for entry in entries:
            host.fold(host.view.apply_put(Keyspace.DURABLE, entry))
        view = host.view
        total = len(view.splits)
        tallies = view.tallies
        if total != len(entries):
            # The listing and the view disagree on how many splits exist (a record
            # deleted behind spate's back, or seeding in progress): judge nothing yet.
            return None
        if tallies.completed + tallies.quarantined != total:
            return None
        if unseeded(host):
            # A finished split names a residual whose records are not written yet (its owner
            # split it, then finished its primary): the residual is work still to do. The
            # leader seeds it (it found it when it read the record, or in its sweep of the
            # view once it held the whole job); judged again after.
            return None
        return VerdictRecord(
            all_complete=tallies.quarantined == 0,
            completed=tallies.completed,
            quarantined=tallies.quarantined,
        )

    def _defer(self) -> None:
        self._not_before = self.host.now() + RETRY_AFTER
