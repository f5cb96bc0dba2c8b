"""The leader's requests that running splits split (docs/splitting.md).

At the end of a bounded job lanes go idle while a few long splits run on; only the owner of a
split can split it (its handler alone knows its position), so the leader asks. The rules, each
with the waste it prevents:

- **Only when there is nothing else to run**: lanes sit idle (a live worker's lanes exceed
  the runnable splits its assignment names) and every runnable split is assigned. Idleness
  must last ``Config.split_request_delay`` first (a lane freed while the next split is being
  handed out is not idle).
- **One request per idle lane, longest-running tenancy first**: a tenancy running longest has
  the most left, the best guess without knowing positions; each request can free one lane.
- **Never twice while outstanding**: a request is outstanding until the split is split (the
  leader reads the split's record every :data:`POLL` s meanwhile, and no more than
  :data:`POLL_BATCH` reads a poll however many stand: beyond that it learns of a split from its
  owner's next presence renewal, which names the splits it split, or at the tenancy's end), its
  tenancy ends, or ``drain_deadline`` passes (a handler commits at least that often, and a
  split happens at a commit point); then it is *ignored*, and that split is not asked again
  for a backoff that doubles each time, up to :data:`BACKOFF_MAX`.
- **A job whose handlers never split is asked next to nothing**: once :data:`JOB_IGNORED`
  requests were ignored and this leader has seen no split at all (asked or not: a split count
  that grew in a record it read), it asks one split at a time, one every :data:`PROBE`
  seconds, until it sees one. A per-split backoff alone still asked every running split of a
  large fleet (64 of them, say) every five minutes, each request an assignment rewrite and a
  read of the split every :data:`POLL` s while it stood: an idle fleet of handlers that
  ignored requests made several times the store calls of one with requests off.
- **A worker can say its handlers never split**: ``Config.split_requests=False`` on a worker
  is carried on its presence record, and no leader asks a split it holds.
- **Requests ride on the owner's assignment record** (``split_requested``), the one key a
  follower watches: each carries a sequence number, so a rewrite that repeats it tells the
  handler nothing twice. ``Config.split_requests=False`` turns it all off.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import attrs

from spate._core.host import Host
from spate._core.leader.ownership import OwnershipReads
from spate._core.records import PresenceRecord, ProgressRecord, SplitRequest, Status

__all__ = ["SplitRequests"]

POLL = 0.5
"""Seconds between the leader's reads of a split it asked to split, while the request stands."""
POLL_BATCH = 64
"""The most requests read a poll: with more standing (a large fleet's idle lanes at a job's
end), each is read less often, so the leader's polls stay O(1) reads a second."""
BACKOFF_MAX = 300.0
"""The longest a split whose handler ignored requests waits before it is asked again."""
JOB_IGNORED = 8
"""Requests ignored, with no split seen, after which the leader takes the job for one whose
handlers never split and only probes it (see :data:`PROBE`)."""
PROBE = 300.0
"""Seconds between the leader's requests to a job whose handlers never split (one at a time)."""


@attrs.define
class _Ask:
    owner: str
    seq: int
    at: float
    splits: int
    """The split count its record had when asked: a larger one means it split."""
    polled: float


class SplitRequests:
    """Which running splits the leader has asked to split, and when it asks more."""

    def __init__(self, host: Host, reads: OwnershipReads) -> None:
        self.host = host
        self._reads = reads
        self.outstanding: dict[str, _Ask] = {}
        self._by_owner: dict[str, dict[str, _Ask]] = {}
        """The outstanding requests by the owner asked (its record carries them)."""
        self._since: dict[str, float] = {}
        """Split -> when this leader saw its current tenancy begin (by its lease)."""
        self._backoff: dict[str, tuple[float, float]] = {}
        """Split -> (not asked before, the next backoff) after a request it ignored."""
        self._idle_since: float | None = None
        self._seq = 0
        self._unsent: set[str] = set()
        """Workers whose assignment record must be rewritten to carry a new request."""
        self._wake = math.inf
        self._due = math.inf
        """The earliest poll or time-out of an outstanding request (see _time_asks)."""
        self._looked_at: float | None = None
        """When the leader last looked for running tenancies to ask (at most once a POLL)."""
        self._lanes: int | None = None
        """Every live worker's lanes (None: membership changed since it was summed)."""
        self._idle_at: tuple[int, int, float] | None = None
        """(the view's sequence number, the idle lanes counted then, when they were counted)."""
        self._ignored = 0
        """Requests this leader made that were ignored (timed out unsplit)."""
        self._split_seen = False
        """Whether this leader saw any split of the job (a split count grew in a record)."""
        self._probe_at = 0.0
        """While the job looks like one that never splits: when the next probe may be asked."""

    # -- what the leader sees ------------------------------------------------------------

    def began(self, split: str, now: float) -> None:
        """A tenancy of ``split`` began (its lease appeared)."""
        self._since[split] = now
        self._drop(split)
        self._backoff.pop(split, None)

    def sees_job_now(self, now: float) -> None:
        """The leader's view holds the whole job: know every tenancy it holds a lease of.

        A tenancy is known from its lease's notice while leading, but leases this worker's view
        held before it led (its own, at least) bring none: the takeover's listing skips records
        already folded. Their tenancies are counted from now (the short side of their age).
        """
        for split, state in self.host.view.splits.items():
            if state.lease is not None:
                self._since.setdefault(split, now)

    def ended(self, split: str) -> None:
        """``split``'s tenancy ended: a request to it is void."""
        self._since.pop(split, None)
        self._drop(split)

    def membership_changed(self) -> None:
        """A presence record came, changed or went: the fleet's lanes are summed again."""
        self._lanes = None

    def progressed(
        self, split: str, record: ProgressRecord, previous: ProgressRecord | None = None
    ) -> None:
        """``split``'s record was read: it split if its count grew since it was asked.

        A count grown since the record ``previous`` (the one the view held) is a split too,
        asked or not: the job's handlers do split, so the leader asks as usual.
        """
        ask = self.outstanding.get(split)
        if ask is not None and record.splits > ask.splits:
            self._drop(split)
            self._backoff.pop(split, None)
            self._split_seen = True
        elif previous is not None and record.splits > previous.splits:
            self._split_seen = True

    @property
    def probing(self) -> bool:
        """Whether the job looks like one whose handlers never split (see the module text)."""
        return not self._split_seen and self._ignored >= JOB_IGNORED

    def clear(self) -> None:
        """Leadership ended (a successor asks afresh; followers told so far keep their events)."""
        self.outstanding.clear()
        self._by_owner.clear()
        self._since.clear()
        self._backoff.clear()
        self._unsent.clear()
        self._idle_since = None
        self._due = math.inf
        self._looked_at = None
        self._ignored = 0
        self._split_seen = False
        self._probe_at = 0.0

    def of(self, instance: str) -> tuple[SplitRequest, ...]:
        """The outstanding requests to ``instance``, for its assignment record."""
        asks = self._by_owner.get(instance)
        if not asks:
            return ()
        return tuple(SplitRequest(split=split, seq=ask.seq) for split, ask in sorted(asks.items()))

    def _add(self, split: str, ask: _Ask) -> None:
        self.outstanding[split] = ask
        self._by_owner.setdefault(ask.owner, {})[split] = ask

    def _drop(self, split: str) -> None:
        ask = self.outstanding.pop(split, None)
        if ask is not None:
            asks = self._by_owner[ask.owner]
            del asks[split]
            if not asks:
                del self._by_owner[ask.owner]

    def take_unsent(self) -> set[str]:
        """The workers to rewrite the assignment record of (new requests for them)."""
        unsent, self._unsent = self._unsent, set()
        return unsent

    def next_deadline(self) -> float:
        """When a poll, a timeout or the end of the idle debounce is due."""
        return self._wake

    # -- deciding ------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """Time requests out, poll the outstanding ones, and ask more while lanes are idle."""
        self._wake = math.inf
        config = self.host.config
        if not config.split_requests:
            return
        ignored_after = config.drain_deadline
        if now >= self._due or len(self.outstanding) <= POLL_BATCH:
            # (A few are gone over at every step, as ever: cheap, and exact to the moment.)
            self._time_asks(now, ignored_after)
        self._wake = min(self._wake, self._due)
        want = self._idle_lanes(now)
        if want <= 0:
            self._idle_since = None
            return
        if self._idle_since is None:
            self._idle_since = now
        ready_at = self._idle_since + config.split_request_delay
        if now < ready_at:
            self._wake = min(self._wake, ready_at)
            return
        want -= len(self.outstanding)
        if want <= 0:
            return
        if self.probing:
            # A job whose handlers never split: one request at a time, one every PROBE.
            if self.outstanding:
                return
            if now < self._probe_at:
                self._wake = min(self._wake, self._probe_at)
                return
            want = 1
        if (
            self._looked_at is not None
            and now < self._looked_at + POLL
            and len(self._since) > POLL_BATCH
        ):
            # Looking means going over every running tenancy: with many, at most once a poll.
            # At a large job's end a fleet's lanes sit idle and tenancies end on nearly every
            # event, and looking on each step (83,000 tenancies) was all the leader did. A few
            # are looked over at once, as before: a lane freed by a short split that was asked
            # first then goes straight to asking the next (the demo's straggler, asked half a
            # second late, had too little left to split).
            self._wake = min(self._wake, self._looked_at + POLL)
            return
        self._looked_at = now
        for split in self._candidates(now, want):
            if self.probing:
                self._probe_at = now + PROBE
            state = self.host.view.splits[split]
            assert state.lease is not None
            self._seq += 1
            self._add(split, _Ask(
                owner=state.lease.owner, seq=self._seq, at=now, splits=state.progress.splits,
                polled=now,
            ))  # fmt: skip
            self._unsent.add(state.lease.owner)
            self._due = min(self._due, now + POLL, now + ignored_after)
            self._wake = min(self._wake, now + POLL)

    def ask_hot(self, splits: Iterable[str], now: float) -> None:
        """A balance round found these running splits too hot for any worker: ask them to split.

        Idle lanes or not (:mod:`spate._core.leader.balance_rounds`: a split hotter than twice the
        mean
        worker load, or a piece of one too heavy for any worker's band, keeps its worker over
        the band whatever moves). Not a split asked already, nor one backing off after
        ignoring a request, nor one without a lease.
        """
        config = self.host.config
        if not config.split_requests:
            return
        view = self.host.view
        for split in splits:
            state = view.splits.get(split)
            if state is None or state.lease is None or split in self.outstanding:
                continue
            backoff = self._backoff.get(split)
            if backoff is not None and now < backoff[0]:
                continue
            if not _asks_taken(view.presence.get(state.lease.owner)):
                continue
            if self.probing:
                if self.outstanding or now < self._probe_at:
                    return  # (probed at most one at a time, one every PROBE)
                self._probe_at = now + PROBE
            self._seq += 1
            self._add(split, _Ask(
                owner=state.lease.owner, seq=self._seq, at=now, splits=state.progress.splits,
                polled=now,
            ))  # fmt: skip
            self._unsent.add(state.lease.owner)
            self._due = min(self._due, now + POLL, now + config.drain_deadline)
            self._wake = min(self._wake, now + POLL)

    def _time_asks(self, now: float, ignored_after: float) -> None:
        """Time out the requests ignored for ``ignored_after``; poll those due a read.

        Only when one of them is due (:attr:`_due`, the earliest poll or time-out of any):
        the leader steps on every event it hears, and going over thousands of requests
        standing at the end of a large job on each was most of its work.
        """
        self._due = math.inf
        many = len(self.outstanding) > POLL_BATCH
        every = POLL * len(self.outstanding) / POLL_BATCH if many else POLL
        for split, ask in list(self.outstanding.items()):
            if now - ask.at >= ignored_after:
                # Ignored (or its handler cannot split now): ask again later, later each time.
                self._drop(split)
                _, delay = self._backoff.get(split, (0.0, ignored_after))
                self._backoff[split] = (now + delay, min(2 * delay, BACKOFF_MAX))
                self._ignored += 1
                if self._ignored == JOB_IGNORED and not self._split_seen:
                    self._probe_at = now + PROBE  # (the requests standing time out first)
                continue
            if now >= ask.polled + every:
                ask.polled = now
                self._reads.note(split)
            self._due = min(self._due, ask.polled + every, ask.at + ignored_after)
        if many:
            # Thousands of requests standing, each due at its own moment: go over them once a
            # poll, not at each of those moments.
            self._due = max(self._due, now + POLL)

    def _idle_lanes(self, now: float) -> int:
        """Lanes of live workers their assignments leave empty; 0 if a runnable split waits.

        Counting them reads every worker's assignment: O(assigned splits). The answer is
        kept while the view has not moved, and in a fleet of more than :data:`POLL_BATCH`
        workers otherwise for up to :data:`POLL` seconds: a
        leader of 1,000 workers of 100 lanes steps on every event it hears, and counting
        100,000 assigned splits on each made it spend its time here once the job's
        runnable splits no longer outnumbered its lanes. Idle lanes are asked for only after
        ``split_request_delay`` anyway, so seeing them up to :data:`POLL` late costs little.
        """
        view = self.host.view
        runnable = view.tallies.runnable
        if self._lanes is None:
            self._lanes = sum(p.max_in_flight for p in view.presence.values() if p is not None)
        if not runnable or runnable > self._lanes:
            return 0  # (the common case, in O(1): more to run than lanes to run it)
        if self._idle_at is not None:
            seq, found, at = self._idle_at
            if seq == view.seq:
                return found
            if now < at + POLL and len(view.presence) > POLL_BATCH:
                # (A small fleet's lanes are counted again at once, as ever: cheap.)
                self._wake = min(self._wake, at + POLL)  # count again then
                return found
        idle = assigned = 0
        splits = view.splits
        for instance, presence in view.presence.items():
            if presence is None:
                continue
            current = view.assignments.get(instance)
            load = 0
            if current is not None:
                for split in current[0].splits:
                    state = splits.get(split)
                    if (
                        state is not None
                        and state.progress.status is Status.RUNNABLE
                        and not state.progress.completed
                    ):
                        load += 1
            assigned += load
            idle += max(0, presence.max_in_flight - load)
        found = idle if assigned >= runnable else 0
        self._idle_at = (view.seq, found, now)
        return found

    def _candidates(self, now: float, want: int) -> list[str]:
        """Up to ``want`` running tenancies that may be asked, the longest-running first."""
        view = self.host.view
        found: list[tuple[float, int, str]] = []
        for split, since in self._since.items():
            if split in self.outstanding:
                continue
            backoff = self._backoff.get(split)
            if backoff is not None and now < backoff[0]:
                self._wake = min(self._wake, backoff[0])
                continue
            state = view.splits.get(split)
            if (
                state is None
                or state.lease is None
                or state.progress.status is not Status.RUNNABLE
                or state.progress.completed
                or not _asks_taken(view.presence.get(state.lease.owner))
            ):
                continue
            weight = state.spec.weight if state.spec is not None else 1
            found.append((since, -weight, split))
        return [split for _, _, split in heapq.nsmallest(want, found)]


def _asks_taken(presence: PresenceRecord | None) -> bool:
    """Whether a split held by this worker may be asked.

    It may when the worker is live and did not say its handlers never split
    (``Config.split_requests=False``, carried on its presence record).
    """
    return presence is not None and presence.split_requests
