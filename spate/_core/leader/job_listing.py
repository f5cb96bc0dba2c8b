"""A new leader's one listing of the durable keyspace: the whole job, once.

A follower's view holds its share only. When a worker wins the leader key it lists the
durable keyspace once (its watches' snapshots bring the ephemeral keyspace); until that
listing and the snapshots are folded it publishes no assignment and judges no verdict. While
the listing is in flight it reports the records it expects as bulk work, so the runtime defers
full collections until its hundreds of thousands of records are folded (spate._runtime.bulk).
When the view holds the whole job, the leader's parts are told once (``whole_job``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from spate._core.flows import Flow, Op
from spate._core.host import Host
from spate._core.view.scopes import Scopes
from spate._errors import StoreUnavailable
from spate._store import Entry, Keyspace

__all__ = ["LIST_RETRY", "JobListing"]

logger = logging.getLogger("spate.coordinator")

LIST_RETRY = 1.0
"""Seconds before a new leader's failed listing of the job is tried again."""


class JobListing:
    """The listing a new leader makes of the job, and the moment its view holds all of it."""

    def __init__(self, host: Host, scopes: Scopes, whole_job: Callable[[float], None]) -> None:
        self.host = host
        self._scopes = scopes
        self._whole_job = whole_job
        self._listing = False
        self.bulk = 0
        """Records a listing of the whole job in flight is expected to bring."""
        self._retry_at = 0.0
        self._saw_job = False

    def step(self, now: float) -> None:
        """Start the listing when the scopes want one and none is in flight."""
        if self._scopes.wants_listing and not self._listing and now >= self._retry_at:
            self._listing = True
            self.host.start(self._list_job())

    def next_deadline(self) -> float:
        """When a failed listing is tried again (while one is wanted)."""
        return self._retry_at if self._scopes.wants_listing else math.inf

    def scope_changed(self) -> None:
        """This worker began or stopped reading the whole job: it has not seen it yet."""
        self._saw_job = False

    def note_sees_job(self) -> None:
        """Tell the leader's parts, once, when the view has come to hold the whole job."""
        if self._scopes.sees_job and not self._saw_job:
            self._saw_job = True
            self._whole_job(self.host.now())

    def _list_job(self) -> Flow[None]:
        host, view = self.host, self.host.view
        since = view.seq
        plan = view.plan
        # A spec and a progress record a split: reported as bulk work while the listing is in
        # flight, so the runtime defers full collections before its hundreds of thousands of
        # records arrive to be folded (see spate._runtime.bulk).
        self.bulk = 2 * (plan.planned if plan is not None else 0)
        try:
            entries: list[Entry] = yield Op("list", Keyspace.DURABLE, host.keys.prefix)
        except StoreUnavailable as exc:
            logger.warning("listing the job failed (%s); retrying", exc)
            self._retry_at = host.now() + LIST_RETRY
            return
        finally:
            self._listing = False
            self.bulk = 0
        if not self._scopes.whole_job:
            return  # it stopped leading meanwhile
        host.fold(view.apply_listing(Keyspace.DURABLE, entries, since=since))
        self._scopes.listed = True
        self.note_sees_job()
