"""What a change to the view means: the notices the view returns for the coordinator to act on.

The view (:mod:`spate._core.view.view`) and its tables (:mod:`spate._core.view.worker_table`,
:mod:`spate._core.view.split_table`) return these; the notice router
(:mod:`spate._core.notice_router`) sends each where it is acted on.
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from spate._core.records import (
    AssignmentRecord,
    LeaderRecord,
    LeaseRecord,
    PlanRecord,
    ProgressRecord,
)

__all__ = [
    "AssignmentChanged",
    "AssignmentGone",
    "LeaderChanged",
    "LeaderGone",
    "LeaseChanged",
    "LeaseGone",
    "Notice",
    "PlanChanged",
    "PresenceChanged",
    "PresenceGone",
    "ProgressChanged",
]


@attrs.frozen
class LeaseChanged:
    """A split's lease was written (by anyone, this worker included)."""

    split: str
    lease: LeaseRecord
    revision: int
    new_tenancy: bool = True
    """Whether it names another tenancy than the lease before it (a claim, not a renewal)."""


@attrs.frozen
class LeaseGone:
    """A split's lease disappeared; ``revision`` is None when a listing proved it absent."""

    split: str
    revision: int | None


@attrs.frozen
class ProgressChanged:
    """A split's progress record moved to ``record`` (``previous`` is None for a new split)."""

    split: str
    previous: ProgressRecord | None
    record: ProgressRecord
    revision: int


@attrs.frozen
class PresenceChanged:
    """A worker's presence key was written."""

    instance: str
    nonce: str | None
    revision: int
    new: bool
    """True for a join (the view knew no presence of this worker), False for a rewrite."""


@attrs.frozen
class PresenceGone:
    """A worker's presence key disappeared (left, or its process stopped renewing)."""

    instance: str
    revision: int | None


@attrs.frozen
class LeaderChanged:
    """The leader key was written."""

    leader: LeaderRecord
    revision: int


@attrs.frozen
class LeaderGone:
    """The leader key disappeared (resigned or expired)."""

    revision: int | None


@attrs.frozen
class PlanChanged:
    """The plan record moved (new generation, finality, count)."""

    previous: PlanRecord | None
    plan: PlanRecord
    revision: int


@attrs.frozen
class AssignmentChanged:
    """An instance's assignment record was written."""

    instance: str
    record: AssignmentRecord
    revision: int


@attrs.frozen
class AssignmentGone:
    """An instance's assignment record was deleted: "nothing decided" for that instance."""

    instance: str


Notice: TypeAlias = (
    LeaseChanged
    | LeaseGone
    | ProgressChanged
    | PresenceChanged
    | PresenceGone
    | LeaderChanged
    | LeaderGone
    | PlanChanged
    | AssignmentChanged
    | AssignmentGone
)
"""What a change to the view means, for the coordinator to act on."""
