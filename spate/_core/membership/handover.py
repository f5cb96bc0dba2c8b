"""A leaving follower's polling for where its handed-back splits went (``wait_handed_over``).

``wait_handed_over`` is answered from the view, but a follower's view hears nothing of another
worker's claim: so while it waits it reads those splits' progress records, and the workers'
presence and assignment records (``O(workers)``: to know whether anyone can take the rest),
every :data:`HANDOVER_POLL` seconds. The leader's view sees it all and polls nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from spate._core.flows import Flow, Op
from spate._core.host import Host
from spate._core.records import Status
from spate._core.view.view import View
from spate._errors import StoreUnavailable
from spate._store import Keyspace

__all__ = ["HANDOVER_POLL", "HandoverPoll", "handed_over", "prefix_of"]

HANDOVER_POLL = 0.5
"""Seconds between a leaving follower's reads of where its handed-back splits went."""


def prefix_of(prefix: str) -> Callable[[str], bool]:
    """Whether a key starts with ``prefix`` (what a listing of ``prefix`` speaks for)."""
    return lambda key: key.startswith(prefix)


class HandoverPoll:
    """After a departure: the splits handed back, and the reads that learn their new owners."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.handing_over: list[str] = []
        """After a departure, the splits it handed back (a follower polls for their new owners)."""
        self._poll_at = 0.0
        self._polling = False
        self._seen = False

    def handed_over(self, splits: Iterable[str]) -> bool:
        """Whether ``splits`` have moved on since the departure, as far as the view can tell."""
        wanted = list(splits)
        host = self.host
        if wanted and not host.sees_job and not self._seen:
            return False
        return handed_over(host.view, host.instance, wanted)

    def poll(self, now: float) -> float:
        """Read where the handed-back splits went, when it is time; the next poll's time."""
        host = self.host
        if not host.parting or not self.handing_over or host.sees_job:
            return math.inf
        if self._seen and handed_over(host.view, host.instance, self.handing_over):
            return math.inf
        if not self._polling and now >= self._poll_at:
            self._polling = True
            self._poll_at = now + HANDOVER_POLL
            host.start(self._reads())
        return self._poll_at

    def _reads(self) -> Flow[None]:
        host, view, keys = self.host, self.host.view, self.host.keys
        try:
            for split in self.handing_over:
                yield from host.reread(Keyspace.DURABLE, keys.split(split))
            for keyspace, prefix in (
                (Keyspace.EPHEMERAL, keys.worker("")),
                (Keyspace.DURABLE, keys.assign("")),
            ):
                since = view.seq
                try:
                    entries = yield Op("list", keyspace, prefix)
                except StoreUnavailable:
                    return
                host.fold(
                    view.apply_listing(keyspace, entries, since=since, covers=prefix_of(prefix))
                )
            self._seen = True
        finally:
            self._polling = False


def handed_over(view: View, instance: str, splits: Iterable[str]) -> bool:
    """Whether a departed ``instance`` has nothing left to wait for.

    True once every split in ``splits`` is finished (completed or quarantined) or its
    progress record names another owner. Also true when nobody is going to take the
    rest: no other worker is present, or every other worker's assignment already fills
    its lanes and names none of them (a job with more splits than the fleet has lanes,
    where a released split waits in the pool for a free lane). A split the view does not
    know is not waited for.
    """
    others = [name for name in view.presence if name != instance]
    if not others:
        return True
    waiting = []
    for split in splits:
        state = view.splits.get(split)
        if state is None:
            continue
        record = state.progress
        finished = record.status is not Status.RUNNABLE or record.completed
        if not finished and record.owner in (None, instance):
            waiting.append(split)
    if not waiting:
        return True
    for name in others:
        presence, assigned = view.presence[name], view.assignments.get(name)
        if presence is None or presence.max_in_flight <= 0 or assigned is None:
            # Its budget (<= 0 is the leader's default) or its share is not known here:
            # it may take them.
            return False
        share = assigned[0].splits
        if len(share) < presence.max_in_flight or any(s in share for s in waiting):
            return False
    return True
