"""The placement's fill: unowned splits to the least-loaded open domain and worker.

The third step of the placement (see :mod:`spate._core.placement.index`). It keeps its
candidates in heaps built at each solve from the workers with a free lane: one heap of
workers (no domains), or a heap per domain of its workers and a heap of the domains by load.
A split taken costs O(log workers), so a solve's fill costs the splits it places.

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from spate._core.placement.state import StickyState

__all__ = ["CandidateHeaps"]


class CandidateHeaps:
    """The fill of one index: its candidate workers and domains, as heaps, on each solve."""

    def __init__(self, state: StickyState) -> None:
        self._state = state

    def fill(
        self,
        queue: Iterable[tuple[int, str]],
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
    ) -> Iterable[tuple[int, str]]:
        """The fill: ``queue`` (-weight, split), heaviest first, while a lane is free.

        Each split goes to the least-loaded open domain and in it to the least-loaded worker
        with a free lane (ties by a hash of the name, seeded from the job). Returns those
        placed.
        """
        state = self._state
        cap, placed = state.cap, []
        worker_hash = state.worker_hash
        if not state.domains:
            spare = [(load[m], worker_hash[m], m) for m in state.names if count[m] < cap[m]]
            heapq.heapify(spare)
            for negative, split in queue:
                if not spare:
                    break
                _, h, worker = heapq.heappop(spare)
                final[split] = worker
                placed.append((negative, split))
                load[worker] -= negative
                count[worker] += 1
                if count[worker] < cap[worker]:
                    heapq.heappush(spare, (load[worker], h, worker))
            return placed
        domain_of = state.domain
        domains: dict[str, list[tuple[int, int, str]]] = {}
        for m in state.names:
            if count[m] < cap[m]:
                domains.setdefault(domain_of[m], []).append((load[m], worker_hash[m], m))
        for heap in domains.values():
            heapq.heapify(heap)
        domain_load: dict[str, int] = {}
        for m in state.names:
            domain_load[domain_of[m]] = domain_load.get(domain_of[m], 0) + load[m]
        tops = [(domain_load[d], state.domain_hash[d], d) for d in domains]
        heapq.heapify(tops)
        for negative, split in queue:
            if not tops:
                break
            dload, dh, d = heapq.heappop(tops)
            heap = domains[d]
            _, mh, worker = heapq.heappop(heap)
            final[split] = worker
            placed.append((negative, split))
            load[worker] -= negative
            count[worker] += 1
            if count[worker] < cap[worker]:
                heapq.heappush(heap, (load[worker], mh, worker))
            if heap:
                heapq.heappush(tops, (dload - negative, dh, d))
        return placed
