"""The verdict of a bounded job: AllComplete or Stalled, decided once.

Two properties matter more than promptness, because the verdict latches and a wrong
``AllComplete`` reports an unfinished backfill as a success:

- **Quarantine blocks completion explicitly**: a job with any quarantined split ends
  ``Stalled(completed, quarantined)``; it is never left to counting arithmetic.
- **An authoritative listing decides**, not this worker's watch-fed view and not the plan
  record's ``planned`` count (a lower bound: records are seeded before the count is
  published, so a final plan may name fewer splits than exist). Judging a subset that happens
  to be complete is exactly how a quarantined split would go unseen.

The listing costs one round trip and runs only once the local view looks finished.
"""

from __future__ import annotations

import logging
import math

from spate._core.flows import Flow, Op
from spate._core.host import Host
from spate._core.records import Finality
from spate._errors import StoreUnavailable
from spate._events import AllComplete, Stalled
from spate._store import Entry, Keyspace

__all__ = ["VerdictJudge"]

logger = logging.getLogger("spate.verdict")

RETRY_AFTER = 1.0
"""Seconds before re-judging after a listing that could not decide."""


class VerdictJudge:
    """Watches for the end of a bounded job and renders its verdict once."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.reported = False
        self._judging = False
        self._not_before = 0.0

    def step(self, now: float) -> None:
        """Start an authoritative listing when the local view looks finished."""
        if self.reported or self._judging or now < self._not_before:
            return
        view = self.host.view
        plan = view.plan
        if plan is None or plan.finality is not Finality.FINAL:
            return
        tallies = view.tallies
        local = len(view.splits)
        if local < plan.planned or tallies.completed + tallies.quarantined != local:
            return
        self._judging = True
        self.host.start(self._judge())

    def next_deadline(self) -> float:
        """When a deferred judgement may be retried."""
        return self._not_before if self._not_before > self.host.now() else math.inf

    def _judge(self) -> Flow[None]:
        host = self.host
        try:
            try:
                entries: list[Entry] = yield Op("list", Keyspace.DURABLE, host.keys.split_prefix)
            except StoreUnavailable as exc:
                # Refusing to judge is the safe direction: the job keeps running.
                logger.warning("the verdict's listing failed (%s); deferring the verdict", exc)
                self._not_before = host.now() + RETRY_AFTER
                return
            for entry in entries:
                host.fold(host.view.apply_put(Keyspace.DURABLE, entry))
            view = host.view
            total = len(view.splits)
            tallies = view.tallies
            if total != len(entries):
                # The listing and the view disagree on how many splits exist (a record
                # deleted behind spate's back, or seeding in progress): judge nothing yet.
                self._not_before = host.now() + RETRY_AFTER
                return
            if tallies.completed == total and tallies.quarantined == 0:
                self.reported = True
                host.emit(AllComplete())
            elif tallies.completed + tallies.quarantined == total:
                self.reported = True
                host.emit(Stalled(completed=tallies.completed, quarantined=tallies.quarantined))
        finally:
            self._judging = False
