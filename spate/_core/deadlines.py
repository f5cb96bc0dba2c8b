"""Deadlines by key in a heap: the earliest is found in O(1), the due ones in O(log n) each.

A step asks "what is due now?" and "when is the next one?"; with many keys waiting (splits
held back after errors, drains) scanning them all on every step would make each step cost
the number of waiting keys. Setting a key again replaces its deadline; the replaced entry
stays in the heap and is skipped when it surfaces (lazy deletion).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

__all__ = ["Deadlines"]


class Deadlines:
    """A deadline per key; the keys whose deadline passed come out in deadline order."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __contains__(self, key: object) -> bool:
        return key in self._at

    def __len__(self) -> int:
        return len(self._at)

    def set(self, key: str, deadline: float) -> None:
        """Give ``key`` the deadline ``deadline`` (replacing any it had)."""
        self._at[key] = deadline
        heapq.heappush(self._heap, (deadline, key))

    def discard(self, key: str) -> None:
        """Forget ``key``'s deadline, if it has one."""
        self._at.pop(key, None)

    def next(self) -> float:
        """The earliest deadline (``inf`` when there is none)."""
        self._skip_stale()
        return self._heap[0][0] if self._heap else math.inf

    def pop_due(self, now: float) -> Iterator[str]:
        """Remove and yield every key whose deadline is at or before ``now``."""
        while True:
            self._skip_stale()
            if not self._heap or self._heap[0][0] > now:
                return
            _, key = heapq.heappop(self._heap)
            del self._at[key]
            yield key

    def _skip_stale(self) -> None:
        heap = self._heap
        while heap and self._at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
