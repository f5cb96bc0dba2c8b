"""The view's counts of splits by status, and the splits one charged takeover from quarantine.

Kept split by split as progress records and leases are folded, so neither the gauges nor the
claims' search for what to quarantine ever counts the job.
"""

from __future__ import annotations

import attrs

from spate._core.protocol import ClaimKind, exhausts_attempts
from spate._core.records import ProgressRecord, Status

__all__ = ["SplitCounts", "Tallies"]


@attrs.frozen
class Tallies:
    """Split counts by status."""

    runnable: int
    completed: int
    quarantined: int


class SplitCounts:
    """Split counts by status (kept incrementally), and the near-quarantine set."""

    def __init__(self, max_attempts: int) -> None:
        self.max_attempts = max_attempts
        self.near_quarantine: set[str] = set()
        """Runnable splits whose next charged takeover reaches ``max_attempts`` (a split whose
        last tenancy advanced is charged nothing, so it is not near)."""
        self._runnable = 0
        self._completed = 0
        self._quarantined = 0
        self._near_memo: dict[tuple[int, bool, int], bool] = {}

    @property
    def tallies(self) -> Tallies:
        """Split counts by status."""
        return Tallies(self._runnable, self._completed, self._quarantined)

    def count(self, status: Status, delta: int) -> None:
        """``delta`` more (or fewer) splits in ``status``."""
        if status is Status.RUNNABLE:
            self._runnable += delta
        elif status is Status.COMPLETED:
            self._completed += delta
        else:
            self._quarantined += delta

    def add_first(self, splits: list[str], records: list[ProgressRecord]) -> None:
        """Count a run of splits seen for the first time, each with its first record.

        :meth:`count` and :meth:`check_near_quarantine` of each, in one call (a new leader's
        listing brings 100,000).
        """
        near, near_set = self._near, self.near_quarantine
        runnable = Status.RUNNABLE
        running = 0
        for split, record in zip(splits, records, strict=True):
            if record.status is runnable:
                running += 1
                if near(record.attempts, record.advanced):
                    near_set.add(split)
                    continue
            else:
                self.count(record.status, +1)
            near_set.discard(split)
        self._runnable += running

    def check_near_quarantine(self, split: str, progress: ProgressRecord) -> None:
        """Put ``split`` in (or take it out of) :attr:`near_quarantine` by its record."""
        if progress.status is Status.RUNNABLE and self._near(progress.attempts, progress.advanced):
            self.near_quarantine.add(split)
        else:
            self.near_quarantine.discard(split)

    def _near(self, attempts: int, advanced: bool) -> bool:
        """Whether a runnable split's next charged takeover reaches ``max_attempts``.

        Asked once per progress record folded, of a handful of distinct answers: remembered
        by its arguments (the rule stays :func:`~spate._core.protocol.exhausts_attempts`).
        """
        key = (attempts, advanced, self.max_attempts)
        near = self._near_memo.get(key)
        if near is None:
            # The next end that can be charged is a takeover from a dead owner.
            near = self._near_memo[key] = exhausts_attempts(
                ClaimKind.EXPIRED, attempts, advanced, self.max_attempts
            )
        return near
