"""What moved among the leader's placement inputs since the leader last looked.

The leader re-places only what changed (work per change proportional to the change): the view
reports here every placement input it folds (a split's owner, status or spec; an assignment
record, and the splits it names), the leader reports the anchors its own assignment writes
move, and the leader takes what accumulated when it publishes. While the leader keeps no
placement index (it does not lead) only the fact that something moved is kept, not which.
"""

from __future__ import annotations

from collections.abc import Set

__all__ = ["PlacementChanges"]

_NOTHING: frozenset[str] = frozenset()


class PlacementChanges:
    """The leader's change tracking: what to re-place, whose assignment to compare."""

    def __init__(self) -> None:
        self._owed = True
        self._splits: set[str] | None = None
        self._instances: set[str] | None = None

    @property
    def owed(self) -> bool:
        """Whether a placement input moved since the leader last published (or it must look)."""
        return self._owed

    def owe(self) -> None:
        """Have the leader decide the assignment again (an input moved, time passed)."""
        self._owed = True

    def settle(self, *, still_owed: bool) -> None:
        """The leader decided; ``still_owed`` while a full rebalance is still to come."""
        self._owed = still_owed

    def split_moved(self, split: str | None = None) -> None:
        """A placement input moved: ``split``'s, or (None) one that names no split."""
        self._owed = True
        if split is not None and self._splits is not None:
            self._splits.add(split)

    def splits_first_seen(self, splits: list[str]) -> None:
        """:meth:`split_moved` of each of ``splits`` (a run of a listing's new splits)."""
        if splits:
            self._owed = True
            if self._splits is not None:
                self._splits.update(splits)

    def splits_moved(self, splits: Set[str]) -> None:
        """The assignee anchoring each of ``splits`` changed (a record, or a write in flight)."""
        if splits and self._splits is not None:
            self._splits.update(splits)
            self._owed = True

    def assignment_moved(self, instance: str) -> None:
        """``instance``'s assignment record moved."""
        if self._instances is not None:
            self._instances.add(instance)

    def track(self) -> None:
        """The leader built its index from the whole view: note which splits move from now on."""
        self._splits = set()
        self._instances = set()

    def stop_tracking(self) -> None:
        """The leader dropped its index: which splits move no longer matters."""
        self._splits = None
        self._instances = None

    def take_placement_changes(self) -> set[str] | None:
        """The splits whose placement input moved since last asked (None: not tracking)."""
        taken = self._splits
        if taken is not None:
            self._splits = set()
        return taken

    def take_assignment_changes(self) -> Set[str]:
        """The instances whose assignment record moved since last asked."""
        taken = self._instances
        if not taken:
            return _NOTHING
        self._instances = set()
        return taken
