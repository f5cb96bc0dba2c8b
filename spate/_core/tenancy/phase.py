"""A split's phase on this worker (and its drain): one value each, and the table of its moves.

As the leader's (:mod:`spate._core.leader.phase`, in the manner of h11's ``_state.py``): every
way the phase can change is a row of :data:`TRANSITIONS`, and :meth:`SplitPhases.move`
refuses any other, so a state the tenancy flows never meant to reach is an error where it
happens rather than a set out of step with another, noticed much later. The sets the flows
read (the splits held, those with a flow in flight, the claims counted against the lanes)
are indexes :class:`SplitPhases` keeps in step with the phases; nothing else writes them.

The phase answers two questions and a third that overlaps them: is the split *held* (a
tenancy of this worker's: its epoch, lease and fence, a
:class:`~spate._core.tenancy.tenancies.Tenancy`), is a *flow* of the tenancies on it (so no
second one starts: a claim, a quarantine, a follower's read, a lease read-back, a hand-back,
the lease drop that ends a tenancy), and is that flow a *claim* (counted against the lanes
until it returns)?

============ ====== ===== ====== =========================================================
phase         held  flow  claim  what this worker is doing with the split
============ ====== ===== ====== =========================================================
FREE                              nothing (the phase of every split not in the table)
CLAIMING             yes   yes    its claim is in flight (lease, then the record's CAS)
CLAIMED       yes    yes   yes    the claim won; its flow has not returned yet
BUSY                 yes          another flow is on it: a quarantine, a follower's read, a
                                  lease read-back, or the lease drop that ends a tenancy
HELD          yes                 held; its handler runs (commits and splits mark nothing)
HANDING_BACK  yes    yes          held, a hand-back in flight (or, for the moment between
                                  its two marks going, the claim that won it returning)
============ ====== ===== ====== =========================================================

The events, and where they come from:

- ``CLAIM``: a claim starts (:class:`~spate._core.tenancy.claims.Claims`' step).
- ``FLOW``: another flow marks the split: a quarantine, a read (the claims), a hand-back's
  write, or a lease drop after a tenancy ended (:mod:`spate._core.tenancy.tenancies`). A
  hand-back's lease drop marks a split its write marked already: the mark stays.
- ``WON``: the claim's record CAS landed: the tenancy begins.
- ``CLAIM_RETURNED``: the claim flow returned (whatever its outcome); its lane is free.
- ``FLOW_ENDED``: the flow that marked the split ended. A departure's hand-back of every held
  split clears the marks of all of them at its end, the ones its hand-backs cleared already
  included (and, when the departure was abandoned half-way, those not handed back yet).
- ``ENDED``: the tenancy ended: a completing commit, a hand-back, a fail, a loss, an
  abandonment.

A split being given back to the leader has a second value, its *drain* (:class:`DrainPhase`,
moved by :data:`DRAIN_TRANSITIONS` in :class:`DrainPhases`, which the revocations' table
holds): it runs beside the phase above rather than inside it, since a forced release goes
from HELD through HANDING_BACK and BUSY to FREE, and a revocation the tenancy ended under is
settled only at the revocations' next step.

=========== ================================================================================
drain        what the revocations are doing with the split
=========== ================================================================================
NONE         nothing (the drain of every split not in the table)
REVOKING     its handler was asked to drain it and hand it back (``RevokeRequested``), by
             the live deadline of the request
CANCELLED    the leader named it here again while it drained: a watchdog bounded by silence
             (no commit for a whole ``drain_deadline``), counted already
FORCING      taken back without waiting: its release is in flight (its tail replays)
=========== ================================================================================

The drain's events (:mod:`spate._core.tenancy.revocation`): ``REQUEST`` (a held split missing
from the assignment; a cancelled one asked back keeps its clock), ``CANCEL`` (assigned here
again), ``SETTLE`` (the tenancy ended, or the revocation outlived it: counted once),
``KEEP`` (a cancelled drain whose source declines to stop: the good ending, the split never
stopped being read), ``FORCE`` (the deadline passed, or the source declined) and ``FORCED``
(the forced release returned).

Not phases, and kept where they are: what runs beside the lifecycle rather than in it. A
split held back after a failed write (``ClaimRetries.retry_at``) is set from inside its claim
flow, so it overlaps CLAIMING; a lease write of unknown outcome (``_unsure_leases``) and a
stray lease key (``Tenancies._stray``) are facts of a key, which outlive the tenancy they came
from; ``Claims.awaiting`` (when an assignment named the split: a latency metric),
``Claims._to_read`` (a follower's reads to do) and ``Tenancies.split_since`` (a split whose
notice the presence renewal has not carried yet) are queues.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Set
from typing import Generic, TypeVar

__all__ = [
    "BUSY_PHASES",
    "CLAIM_PHASES",
    "DRAINING",
    "DRAIN_TRANSITIONS",
    "HELD_PHASES",
    "TRANSITIONS",
    "DrainEvent",
    "DrainPhase",
    "DrainPhases",
    "SplitEvent",
    "SplitPhase",
    "SplitPhases",
]

T = TypeVar("T")


class SplitPhase(enum.Enum):
    """Where a split stands on this worker (see the module text)."""

    FREE = "free"
    CLAIMING = "claiming"
    CLAIMED = "claimed"
    BUSY = "busy"
    HELD = "held"
    HANDING_BACK = "handing-back"


class SplitEvent(enum.Enum):
    """What moves a split's phase (see the module text)."""

    CLAIM = "claim"
    FLOW = "flow"
    WON = "won"
    CLAIM_RETURNED = "claim-returned"
    FLOW_ENDED = "flow-ended"
    ENDED = "ended"


P, E = SplitPhase, SplitEvent

TRANSITIONS: dict[tuple[SplitPhase, SplitEvent], SplitPhase] = {
    (P.FREE, E.CLAIM): P.CLAIMING,
    (P.FREE, E.FLOW): P.BUSY,
    (P.HELD, E.FLOW): P.HANDING_BACK,
    # A hand-back's lease drop, under the mark its write set.
    (P.BUSY, E.FLOW): P.BUSY,
    (P.CLAIMING, E.WON): P.CLAIMED,
    (P.CLAIMING, E.CLAIM_RETURNED): P.BUSY,
    (P.CLAIMED, E.CLAIM_RETURNED): P.HANDING_BACK,
    (P.BUSY, E.FLOW_ENDED): P.FREE,
    (P.HANDING_BACK, E.FLOW_ENDED): P.HELD,
    # A departure's sweep over every split it handed back (see the module text).
    (P.FREE, E.FLOW_ENDED): P.FREE,
    (P.HELD, E.FLOW_ENDED): P.HELD,
    (P.HELD, E.ENDED): P.FREE,
    (P.HANDING_BACK, E.ENDED): P.BUSY,
    # Lost (fenced, starved) before its claim flow returned.
    (P.CLAIMED, E.ENDED): P.CLAIMING,
}
"""Every legal transition: (phase, event) -> the next phase."""

HELD_PHASES = frozenset({P.CLAIMED, P.HELD, P.HANDING_BACK})
"""The phases of a split this worker holds (a tenancy of its own)."""
BUSY_PHASES = frozenset({P.CLAIMING, P.CLAIMED, P.BUSY, P.HANDING_BACK})
"""The phases of a split a flow of the tenancies is on (no second one starts)."""
CLAIM_PHASES = frozenset({P.CLAIMING, P.CLAIMED})
"""The phases of a split whose claim is in flight (counted against the lanes)."""

del P, E


class SplitPhases(Generic[T]):
    """Each split's phase on this worker, moved only by the rows of :data:`TRANSITIONS`.

    ``T`` is the record of a held tenancy
    (:class:`~spate._core.tenancy.tenancies.Tenancy`). The indexes :attr:`owned`,
    :attr:`busy` and :attr:`claiming` are read through this; only :meth:`move` writes them.
    """

    def __init__(self) -> None:
        self._phases: dict[str, SplitPhase] = {}
        """Every split not FREE, and its phase."""
        self._owned: dict[str, T] = {}
        """The held splits, in the order their tenancies began, and their tenancies."""
        self._busy: set[str] = set()
        self._claiming: set[str] = set()

    @property
    def owned(self) -> Mapping[str, T]:
        """The splits this worker holds and their tenancies (in the order they began)."""
        return self._owned

    @property
    def busy(self) -> Set[str]:
        """The splits a flow of the tenancies is on (a claim, quarantine, read, release...)."""
        return self._busy

    @property
    def claiming(self) -> int:
        """How many claims are in flight (each counted against the lanes until it returns)."""
        return len(self._claiming)

    def phase_of(self, split: str) -> SplitPhase:
        """``split``'s phase on this worker."""
        return self._phases.get(split, SplitPhase.FREE)

    def move(self, split: str, event: SplitEvent, tenancy: T | None = None) -> SplitPhase:
        """Move ``split``'s phase by ``event``, keep the indexes in step, return the new phase.

        ``tenancy``: the tenancy ``WON`` begins (only with it). Raises :class:`RuntimeError`
        (a defect in spate, not in its use) when the table has no row for ``split``'s phase
        and ``event``.
        """
        before = self._phases.get(split, SplitPhase.FREE)
        try:
            after = TRANSITIONS[before, event]
        except KeyError:
            raise RuntimeError(
                f"split {split!r} cannot take event {event.value!r} in phase "
                f"{before.value!r}; this is a bug in spate: please report it with the log above"
            ) from None
        if after is SplitPhase.FREE:
            self._phases.pop(split, None)
        else:
            self._phases[split] = after
        if after in HELD_PHASES:
            if before not in HELD_PHASES:
                assert tenancy is not None, "a tenancy begins with its record"
                self._owned[split] = tenancy
        elif before in HELD_PHASES:
            del self._owned[split]
        _mark(self._busy, split, after in BUSY_PHASES)
        _mark(self._claiming, split, after in CLAIM_PHASES)
        return after

    def end(self, split: str) -> T | None:
        """End ``split``'s tenancy if it is held here: the tenancy that ended, or None."""
        held = self._owned.get(split)
        if held is not None:
            self.move(split, SplitEvent.ENDED)
        return held

    def check(self) -> None:
        """Raise AssertionError unless every index says what the phases say (for the tests)."""
        phases = self._phases
        assert SplitPhase.FREE not in phases.values()
        assert set(self._owned) == {s for s, p in phases.items() if p in HELD_PHASES}
        assert self._busy == {s for s, p in phases.items() if p in BUSY_PHASES}
        assert self._claiming == {s for s, p in phases.items() if p in CLAIM_PHASES}


class DrainPhase(enum.Enum):
    """Where the revocation of a split stands on this worker (see the module text)."""

    NONE = "none"
    REVOKING = "revoking"
    CANCELLED = "cancelled"
    FORCING = "forcing"


class DrainEvent(enum.Enum):
    """What moves a split's drain (see the module text)."""

    REQUEST = "request"
    CANCEL = "cancel"
    SETTLE = "settle"
    KEEP = "keep"
    FORCE = "force"
    FORCED = "forced"


D, DE = DrainPhase, DrainEvent

DRAIN_TRANSITIONS: dict[tuple[DrainPhase, DrainEvent], DrainPhase] = {
    (D.NONE, DE.REQUEST): D.REVOKING,
    # Asked back again: the drain never stopped, so its clock does not restart.
    (D.CANCELLED, DE.REQUEST): D.REVOKING,
    (D.REVOKING, DE.CANCEL): D.CANCELLED,
    (D.REVOKING, DE.SETTLE): D.NONE,
    (D.CANCELLED, DE.SETTLE): D.NONE,
    (D.CANCELLED, DE.KEEP): D.NONE,
    (D.REVOKING, DE.FORCE): D.FORCING,
    # A cancelled drain that committed nothing for a whole deadline.
    (D.CANCELLED, DE.FORCE): D.FORCING,
    (D.FORCING, DE.FORCED): D.NONE,
}
"""Every legal move of a drain: (drain, event) -> the next drain."""

DRAINING = frozenset({D.REVOKING, D.CANCELLED})
"""The drains of a split whose revocation is still open (a :attr:`DrainPhases.revoking` entry)."""

del D, DE


class DrainPhases(Generic[T]):
    """Each split's drain, moved only by the rows of :data:`DRAIN_TRANSITIONS`.

    ``T`` is the record of an open revocation (its clocks:
    :class:`~spate._core.tenancy.revocation.Revoking`). The indexes :attr:`revoking` and
    :attr:`forcing` are read through this; only :meth:`move` writes them.
    """

    def __init__(self) -> None:
        self._drains: dict[str, DrainPhase] = {}
        """Every split whose drain is not NONE, and its drain."""
        self._revoking: dict[str, T] = {}
        """The open revocations, in the order they were first requested, and their clocks."""
        self._forcing: set[str] = set()

    @property
    def revoking(self) -> Mapping[str, T]:
        """The open revocations (revoking or cancelled) and their clocks."""
        return self._revoking

    @property
    def forcing(self) -> Set[str]:
        """The splits whose forced release is in flight."""
        return self._forcing

    def drain_of(self, split: str) -> DrainPhase:
        """``split``'s drain on this worker."""
        return self._drains.get(split, DrainPhase.NONE)

    def move(self, split: str, event: DrainEvent, entry: T | None = None) -> DrainPhase:
        """Move ``split``'s drain by ``event``, keep the indexes in step, return the new drain.

        ``entry``: the clocks of the revocation a ``REQUEST`` opens (only then). Raises
        :class:`RuntimeError` (a defect in spate) when the table has no row for ``split``'s
        drain and ``event``.
        """
        before = self._drains.get(split, DrainPhase.NONE)
        try:
            after = DRAIN_TRANSITIONS[before, event]
        except KeyError:
            raise RuntimeError(
                f"the drain of split {split!r} cannot take event {event.value!r} in phase "
                f"{before.value!r}; this is a bug in spate: please report it with the log above"
            ) from None
        if after is DrainPhase.NONE:
            del self._drains[split]
        else:
            self._drains[split] = after
        if after in DRAINING:
            if before not in DRAINING:
                assert entry is not None, "a revocation opens with its clocks"
                self._revoking[split] = entry
        elif before in DRAINING:
            del self._revoking[split]
        _mark(self._forcing, split, after is DrainPhase.FORCING)
        return after

    def check(self) -> None:
        """Raise AssertionError unless every index says what the drains say (for the tests)."""
        drains = self._drains
        assert DrainPhase.NONE not in drains.values()
        assert set(self._revoking) == {s for s, d in drains.items() if d in DRAINING}
        assert self._forcing == {s for s, d in drains.items() if d is DrainPhase.FORCING}


def _mark(index: set[str], split: str, on: bool) -> None:
    if on:
        index.add(split)
    else:
        index.discard(split)
