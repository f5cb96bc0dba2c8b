"""The leader's phase: one value, and the table of the transitions between phases.

In the manner of h11's ``_state.py``: every way the phase can change is a row of
:data:`TRANSITIONS`, and :meth:`LeaderPhases.apply` refuses any other, so a state the protocol
never meant to reach is an error where it happens rather than a combination of flags noticed
much later.

=========== ================================================================================
phase        what this worker is doing
=========== ================================================================================
FOLLOWER     someone else leads (or nobody does and it may elect itself)
ELECTING     its create of the leader key is in flight (or a lost one is being given back)
FENCING      it holds the leader key; the generation bump of the plan record is in flight,
             so it writes nothing a leader writes (an unfenced leader write could land)
DEPOSED      deposed while its generation bump was still in flight: a follower whose
             election has not returned yet (it elects nothing and gives back no key of its
             own until it has, so two attempts of one process never overlap)
GATHERING    fenced, and a new job's first assignment waits for the fleet to gather (the
             join window, see :mod:`spate._core.leader.rebalance_policy`)
LEADING      fenced, and placing
=========== ================================================================================

The events, and where they come from (:mod:`spate._core.leader.election` unless said otherwise):

- ``ELECT``: no leader key is seen; this worker tries to create it.
- ``WON``: the create landed (and the worker is not leaving the job).
- ``FENCED``: the generation bump landed.
- ``GATHERED``: the join window ended, or the job had assignments already (the rebalance
  policy).
- ``DEMOTED``: the leadership ended (deposed, a renewal lost, the fence given up, leaving).
  Outside a leadership it changes nothing.
- ``ELECTION_ENDED``: the election flow returned, whatever its outcome.
"""

from __future__ import annotations

import enum

__all__ = ["LEADING_PHASES", "TRANSITIONS", "LeaderEvent", "LeaderPhase", "LeaderPhases"]


class LeaderPhase(enum.Enum):
    """Where this worker stands in leading the job (see the module text)."""

    FOLLOWER = "follower"
    ELECTING = "electing"
    FENCING = "fencing"
    DEPOSED = "deposed"
    GATHERING = "gathering"
    LEADING = "leading"


class LeaderEvent(enum.Enum):
    """What moves the phase (see the module text)."""

    ELECT = "elect"
    WON = "won"
    FENCED = "fenced"
    GATHERED = "gathered"
    DEMOTED = "demoted"
    ELECTION_ENDED = "election-ended"


P, E = LeaderPhase, LeaderEvent

TRANSITIONS: dict[tuple[LeaderPhase, LeaderEvent], LeaderPhase] = {
    (P.FOLLOWER, E.ELECT): P.ELECTING,
    (P.FOLLOWER, E.DEMOTED): P.FOLLOWER,
    (P.ELECTING, E.WON): P.FENCING,
    (P.ELECTING, E.DEMOTED): P.ELECTING,
    (P.ELECTING, E.ELECTION_ENDED): P.FOLLOWER,
    (P.FENCING, E.FENCED): P.GATHERING,
    (P.FENCING, E.DEMOTED): P.DEPOSED,
    # Only when the flow was abandoned with its bump unlanded (the runtime closed it on the
    # way out, or a fatal error left it): the key stays held, unfenced, until it is lost.
    (P.FENCING, E.ELECTION_ENDED): P.FENCING,
    # A bump sent before the deposition may still land: it fences nothing for this worker.
    (P.DEPOSED, E.FENCED): P.DEPOSED,
    (P.DEPOSED, E.DEMOTED): P.DEPOSED,
    (P.DEPOSED, E.ELECTION_ENDED): P.FOLLOWER,
    # The election flow returns right after its bump landed.
    (P.GATHERING, E.ELECTION_ENDED): P.GATHERING,
    (P.GATHERING, E.GATHERED): P.LEADING,
    (P.GATHERING, E.DEMOTED): P.FOLLOWER,
    (P.LEADING, E.DEMOTED): P.FOLLOWER,
}
"""Every legal transition: (phase, event) -> the next phase."""

LEADING_PHASES = frozenset({P.FENCING, P.GATHERING, P.LEADING})
"""The phases in which this worker holds the leader key."""

del P, E


class LeaderPhases:
    """The leader's phase, moved only by the rows of :data:`TRANSITIONS`."""

    def __init__(self) -> None:
        self.phase = LeaderPhase.FOLLOWER

    @property
    def leading(self) -> bool:
        """Whether this worker holds the leader key (fenced or not yet)."""
        return self.phase in LEADING_PHASES

    @property
    def electing(self) -> bool:
        """Whether an election flow of this worker's is under way."""
        return self.phase in (LeaderPhase.ELECTING, LeaderPhase.FENCING, LeaderPhase.DEPOSED)

    def apply(self, event: LeaderEvent) -> LeaderPhase:
        """Move the phase by ``event`` and return the new phase.

        Raises :class:`RuntimeError` (a defect in spate, not in its use) when the table has no
        row for the current phase and ``event``.
        """
        try:
            self.phase = TRANSITIONS[self.phase, event]
        except KeyError:
            raise RuntimeError(
                f"the leader cannot take event {event.value!r} in phase {self.phase.value!r}; "
                "this is a bug in spate: please report it with the log above"
            ) from None
        return self.phase
