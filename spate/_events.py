"""What a coordinator tells its user: the resume point of a split and the events of its tenancy.

Every event is a frozen attrs value. A worker receives them from
:meth:`spate.Coordinator.events` in the order the coordinator decided them:

- :class:`Gained` — this worker now owns a split; resume from ``progress``.
- :class:`Lost` — this worker no longer owns a split; stop at once, its writes cannot land.
- :class:`RevokeRequested` — the leader wants a held split elsewhere; drain, commit, release.
- :class:`Quarantined` — a split ran out of delivery attempts and is parked (seen by every worker).
- :class:`AllComplete` / :class:`Stalled` — the verdict of a bounded job (latched: sent once).
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

__all__ = [
    "AllComplete",
    "Event",
    "Gained",
    "Lost",
    "Progress",
    "Quarantined",
    "RevokeRequested",
    "SplitRequested",
    "Stalled",
]


def _check_watermark(_: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"Progress.watermark must be an int or None, not {value!r}")


def _check_state(_: object, attribute: attrs.Attribute[bytes], value: object) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"Progress.state must be bytes, not {type(value).__name__}")


@attrs.frozen
class Progress:
    """How far a split has got: the resume point a successor starts from.

    ``watermark`` is the source's position (for example one past the last key processed);
    ``None`` means nothing has been committed yet. Watermarks never move backwards: a commit
    that would lower one is a bug in the work source and stops the worker. ``state`` is opaque
    resume state of the source's choosing (keep it small); ``completed`` marks the split done.
    """

    watermark: int | None = attrs.field(default=None, validator=_check_watermark)
    state: bytes = attrs.field(default=b"", validator=_check_state)
    completed: bool = False


@attrs.frozen
class Gained:
    """This worker now owns ``split`` at ``epoch``; resume from ``progress``.

    ``descriptor`` and ``weight`` are what the planner wrote for the split (``descriptor``: the
    primary of its last split, once it was split). ``fence`` is this tenancy's fencing token
    (:attr:`SplitHandle.fence <spate.SplitHandle.fence>`): store it with your output, and pass
    it to :meth:`Coordinator.commit <spate.Coordinator.commit>`, ``split`` and
    ``decline_revoke`` so that a call made after this tenancy ended writes nothing. It defaults
    to ``epoch`` (the fence of a job whose plan record has no incarnation).
    """

    split: str
    epoch: int
    progress: Progress
    descriptor: bytes
    weight: int
    fence: int = attrs.field(default=attrs.Factory(lambda self: self.epoch, takes_self=True))


@attrs.frozen
class Lost:
    """This worker no longer owns ``split``: stop working on it now.

    ``reason`` says why: ``"fenced"`` (another worker took it over), ``"starved"`` (no lease
    renewal succeeded for a whole lease, so this worker fenced itself), or ``"revoked"`` (a
    revocation was forced at its drain deadline or declined). Nothing this worker writes for
    the split lands any more; the new owner resumes from the last committed progress.
    """

    split: str
    reason: str = ""


@attrs.frozen
class RevokeRequested:
    """The leader wants ``split`` elsewhere: reach a safe boundary, commit, then release it.

    Past the configured ``drain_deadline`` the split is taken away regardless (``Lost`` with
    reason ``"revoked"``), and its uncommitted tail replays under the next owner.
    """

    split: str


@attrs.frozen
class SplitRequested:
    """The leader asks that ``split`` be split: lanes sit idle that could take part of it.

    Only the owner's handler knows where its work stands, so the leader asks and the handler
    decides (:meth:`SplitHandle.split <spate.SplitHandle.split>`; ignoring it is allowed, and
    the leader then asks less often). Told once per request.
    """

    split: str


@attrs.frozen
class Quarantined:
    """``split`` used up its delivery attempts and is parked; a bounded job ends Stalled.

    Every worker that observes the transition receives this event. ``spate requeue`` returns
    a quarantined split to the queue once its cause is fixed.
    """

    split: str
    attempts: int


@attrs.frozen
class AllComplete:
    """Verdict of a bounded job: every planned split completed."""


@attrs.frozen
class Stalled:
    """Verdict of a bounded job: every split ended, and some are quarantined (not completed)."""

    completed: int
    quarantined: int


Event: TypeAlias = (
    Gained | Lost | RevokeRequested | SplitRequested | Quarantined | AllComplete | Stalled
)
"""Anything :meth:`Coordinator.events` yields."""
