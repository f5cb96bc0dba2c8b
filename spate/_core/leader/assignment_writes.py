"""The leader's assignment writes in flight, and the splits each one anchors.

A split in transit is anchored on the worker this leader last gave it to: the write in flight
when there is one (the records of one publish land one by one, and a worker's stale record
would anchor the split where it no longer goes), else the worker's record of this generation.
The placement inputs read this table; the publisher fills it as writes start and end.
"""

from __future__ import annotations

from spate._core.host import Host
from spate._core.leader.election import Election

__all__ = ["AssignmentWrites"]


class AssignmentWrites:
    """Worker -> the splits its assignment write in flight names, and the reverse map."""

    def __init__(self, host: Host, election: Election) -> None:
        self.host = host
        self._election = election
        self.by_worker: dict[str, frozenset[str]] = {}
        """Worker -> the splits its assignment write in flight names (until it lands or fails)."""
        self.by_split: dict[str, set[str]] = {}
        """Split -> the workers whose assignment write in flight names it."""

    def started(self, instance: str, splits: tuple[str, ...]) -> None:
        """Note an assignment write about to start: it anchors the splits it names at once."""
        named = frozenset(splits)
        self.by_worker[instance] = named
        for split in named:
            self.by_split.setdefault(split, set()).add(instance)
        self._anchors_moved(instance, named)

    def ended(self, instance: str) -> None:
        """The write landed (its record now anchors), failed or lost: the record anchors again."""
        named = self.by_worker.pop(instance, None)
        if named is None:
            return
        for split in named:
            workers = self.by_split.get(split)
            if workers is not None:
                workers.discard(instance)
                if not workers:
                    del self.by_split[split]
        self._anchors_moved(instance, named)

    def _anchors_moved(self, instance: str, named: frozenset[str]) -> None:
        """Re-read the splits on which ``instance``'s record and write in flight disagree."""
        view = self.host.view
        current = view.assignments.get(instance)
        recorded = (
            frozenset(current[0].splits)
            if current is not None and current[0].generation == self._election.generation
            else frozenset()
        )
        self.host.placement_changes.splits_moved(named ^ recorded)
