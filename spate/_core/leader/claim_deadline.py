"""The claim deadline: a worker that never claims what it is given is set aside for placement.

The leader places splits on the workers whose presence records it reads, and a presence record
proves only that something keeps writing it: a record rewritten for a worker that does not
exist (a ghost), or a process wedged before its first claim, keeps the splits assigned to it
unowned for as long as the writes go on. Claims are what the leader can see of a worker at
work (every claim writes a lease, and the leader reads every lease), so:

- **The clock**: a worker's clock starts when it is assigned a split nobody holds (its record
  landed naming one, or the lease of a split its record names went), and stops at its next
  claim (any lease of it appearing). This leader itself has no clock.
- **The deadline**: a worker whose clock ran ``Config.claim_deadline`` (by default twice the
  lease, or the lease plus ``drain_deadline`` when longer: a worker whose lanes are full of
  splits still draining claims only once they drain) and that is still assigned a split
  nobody holds is *set aside*: placement treats it like a departed worker (its splits go to
  the others at once, its record is rewritten to name nothing) while its presence stands.
- **Tried again, later each time**: a worker set aside is placed again after a while that
  starts at twice the deadline and doubles each time it is set aside again, up to
  :data:`SET_ASIDE_MAX` (a slow-starting worker is not starved for ever: given work again,
  it claims, and balancing gives it its share). A claim ends it all at once: the worker is
  like any other again, and its next clock starts from scratch (no flapping: only a worker
  that never claimed is ever set aside).
- **Leader-side, per leader**: a new leader starts with every worker's clock stopped (it
  finds a ghost again within one deadline).

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

import logging
import math

from spate._core.host import Host
from spate._core.records import AssignmentRecord, Status

__all__ = ["SET_ASIDE_MAX", "ClaimDeadlines"]

logger = logging.getLogger("spate.leader")

SET_ASIDE_MAX = 600.0
"""The longest a worker that never claimed is set aside before it is given work again."""


class ClaimDeadlines:
    """Which workers never claimed what they were given, and are set aside for placement."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._since: dict[str, float] = {}
        """Worker -> when it began waiting on a split assigned to it that nobody holds."""
        self.set_aside: dict[str, float] = {}
        """Worker -> when it may be given work again (it never claimed what it was given)."""
        self._next: dict[str, float] = {}
        """Worker -> how long it is set aside the next time (doubling; gone once it claims)."""
        self.version = 0
        """Moves whenever :attr:`set_aside` does (the worker table placement reads moved)."""
        self._due = math.inf
        """The earliest clock to run out or set-aside to end."""

    @property
    def deadline(self) -> float:
        """The claim deadline, in seconds."""
        config = self.host.config
        if config.claim_deadline is not None:
            return config.claim_deadline
        lease = config.lease_duration
        assert lease is not None  # (resolved when the coordinator opened)
        return max(2 * lease, lease + config.drain_deadline)

    # -- what the leader sees ------------------------------------------------------------------

    def assigned(self, instance: str, record: AssignmentRecord, now: float) -> None:
        """``instance``'s assignment record landed: its clock starts if it names a free split."""
        if instance == self.host.instance or instance in self._since:
            return
        if instance in self.set_aside:
            return
        if any(self._free(split) for split in record.splits):
            self._start(instance, now)

    def freed(self, split: str, now: float) -> None:
        """``split``'s lease went: the clocks of the workers assigned it start."""
        if not self._free(split):
            return
        for instance in self.host.view.assigned.get(split, ()):
            if (
                instance != self.host.instance
                and instance not in self._since
                and instance not in self.set_aside
            ):
                self._start(instance, now)

    def claimed(self, instance: str) -> bool:
        """A lease of ``instance`` appeared: its clock stops. True when it was set aside."""
        self._since.pop(instance, None)
        self._next.pop(instance, None)
        if self.set_aside.pop(instance, None) is None:
            return False
        self.version += 1
        return True

    def gone(self, instance: str) -> bool:
        """``instance``'s presence went: the worker is gone. True when it was set aside."""
        self._since.pop(instance, None)
        self._next.pop(instance, None)
        if self.set_aside.pop(instance, None) is None:
            return False
        self.version += 1
        return True

    def clear(self) -> None:
        """Leadership began or ended: every clock stops, nobody is set aside."""
        self._since.clear()
        self._next.clear()
        if self.set_aside:
            self.set_aside.clear()
            self.version += 1
        self._due = math.inf

    # -- deciding ------------------------------------------------------------------------------

    def step(self, now: float) -> bool:
        """Set aside the workers whose clock ran out; try again those whose time is up.

        Returns whether :attr:`set_aside` changed (membership, as placement sees it, did).
        """
        if now < self._due:
            return False
        self._due = math.inf
        changed = False
        deadline = self.deadline
        for instance, since in list(self._since.items()):
            if now < since + deadline:
                self._due = min(self._due, since + deadline)
                continue
            del self._since[instance]
            if instance in self.host.view.presence and self._waits(instance):
                away = self._next.get(instance, 2 * deadline)
                self._next[instance] = min(2 * away, SET_ASIDE_MAX)
                self.set_aside[instance] = now + away
                changed = True
                logger.warning(
                    "worker %s claimed none of the splits assigned to it for %.0f s (claim "
                    "deadline): they go to other workers, and %s is given work again in %.0f s",
                    instance, deadline, instance, away,
                )  # fmt: skip
        for instance, until in list(self.set_aside.items()):
            if now >= until:
                del self.set_aside[instance]
                changed = True
            else:
                self._due = min(self._due, until)
        if changed:
            self.version += 1
        return changed

    def next_deadline(self) -> float:
        """When a clock runs out or a worker set aside is to be tried again."""
        return self._due

    def _start(self, instance: str, now: float) -> None:
        self._since[instance] = now
        self._due = min(self._due, now + self.deadline)

    def _waits(self, instance: str) -> bool:
        """Whether ``instance``'s record names a split nobody holds (it still waits on it)."""
        current = self.host.view.assignments.get(instance)
        return current is not None and any(self._free(split) for split in current[0].splits)

    def _free(self, split: str) -> bool:
        state = self.host.view.splits.get(split)
        return (
            state is not None
            and state.lease is None
            and state.progress.status is Status.RUNNABLE
            and not state.progress.completed
        )
