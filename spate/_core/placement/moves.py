"""The placement's improving moves: the spread across domains and the balance of workers.

Steps 4 and 5 of the placement (see :mod:`spate._core.placement.index`), run only when a
rebalance is allowed. Each move is the one :func:`~spate._core.placement.vocabulary.best_transfer`
finds on the sticky state's weight bins (per domain for the spread, per worker for the
balance), so a solve costs the moves it makes, not the job. Held splits are taken out of the
bins while the moves run (:meth:`ImprovingMoves.hold`) and put back afterwards.

Pure and synchronous: no Trio, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Set

from spate._core.placement.state import StickyState
from spate._core.placement.vocabulary import Band, best_transfer

__all__ = ["ImprovingMoves"]


class ImprovingMoves:
    """The spread and balance passes of one index, on its sticky state's bins."""

    def __init__(self, state: StickyState) -> None:
        self._state = state

    def run(
        self,
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
        origin: dict[str, str | None],
        limit: int,
    ) -> None:
        """The spread across domains (when there are domains), then the balance in each."""
        state = self._state
        if state.domains:
            limit += 4 * len(state.inputs)
            self._spread(load, count, final, origin, limit)
            for group in state.groups().values():
                if len(group) > 1:
                    self._balance(group, load, count, final, origin, limit)
        else:
            self._balance(state.names, load, count, final, origin, limit)

    def hold(
        self,
        held: Collection[str],
        final: Mapping[str, str],
        origin: Mapping[str, str | None],
        pinned_now: Set[str],
    ) -> list[tuple[str, int, str]]:
        """Take the held splits out of the bins (the improving steps move only what is there).

        Returns (worker, weight, split) of each taken out, to put back once the steps ran.
        """
        state = self._state
        taken = []
        for split in held:
            p = state.inputs.get(split)
            if p is None:
                continue
            if split in origin:  # taken off its owner by an earlier step: where it went now
                worker = final.get(split)
                if worker is None or split in pinned_now:
                    continue
            else:
                worker = state.owner(p)
                if worker is None or split in state.pinned:
                    continue
            weight = p.load
            state.bins_remove(worker, weight, split)
            taken.append((worker, weight, split))
        return taken

    def improvable(self, load: Mapping[str, int], count: Mapping[str, int]) -> bool:
        """Whether the spread or the balance would take one more move on the current bins."""
        state = self._state
        cap = state.cap
        if state.domains:
            domains = sorted(state.domain_bins)
            dload = dict.fromkeys(domains, 0)
            dcount = dict.fromkeys(domains, 0)
            dcap = dict.fromkeys(domains, 0)
            for m in state.names:
                d = state.domain[m]
                dload[d] += load[m]
                dcount[d] += count[m]
                dcap[d] += cap[m]
            if len(domains) > 1 and best_transfer(domains, dload, dcount, dcap, state.domain_bins):
                return True
        bins = state.bins
        return any(
            best_transfer(group, load, count, cap, bins, Band.of(group, load, bins)) is not None
            for group in state.groups().values()
            if len(group) > 1
        )

    def _place_of(self, split: str, final: Mapping[str, str]) -> str:
        worker = final.get(split)
        if worker is None:
            worker = self._state.owner(self._state.inputs[split])
            assert worker is not None
        return worker

    def _spread(
        self,
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
        origin: dict[str, str | None],
        limit: int,
    ) -> None:
        """The spread: splits moved between domains while one move lowers the squared loads."""
        state = self._state
        domains = sorted(state.domain_bins)
        if len(domains) < 2:
            return
        cap, worker_hash = state.cap, state.worker_hash
        workers_of: dict[str, list[str]] = {d: [] for d in domains}
        for m in state.names:
            workers_of[state.domain[m]].append(m)
        dload = {d: sum(load[m] for m in workers_of[d]) for d in domains}
        dcount = {d: sum(count[m] for m in workers_of[d]) for d in domains}
        dcap = {d: sum(cap[m] for m in workers_of[d]) for d in domains}
        bins = state.domain_bins
        for _ in range(limit):
            step = best_transfer(domains, dload, dcount, dcap, bins)
            if step is None:
                break
            target, source, (_, _, split, weight) = step
            owner = self._place_of(split, final)
            receiver = min(
                (m for m in workers_of[target] if count[m] < cap[m]),
                key=lambda m: (load[m], worker_hash[m], m),
            )
            self._move(split, weight, owner, receiver, load, count, final, origin)
            dload[source] -= weight
            dload[target] += weight
            dcount[source] -= 1
            dcount[target] += 1

    def _balance(
        self,
        group: list[str],
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
        origin: dict[str, str | None],
        limit: int,
    ) -> None:
        """The balance among ``group`` (all workers, or one domain's), on the kept bins."""
        cap, bins = self._state.cap, self._state.bins
        band = Band.of(group, load, bins)
        for _ in range(limit):
            step = best_transfer(group, load, count, cap, bins, band)
            if step is None:
                break
            target, source, (_, _, split, weight) = step
            self._move(split, weight, source, target, load, count, final, origin)

    def _move(
        self,
        split: str,
        weight: int,
        source: str,
        target: str,
        load: dict[str, int],
        count: dict[str, int],
        final: dict[str, str],
        origin: dict[str, str | None],
    ) -> None:
        if split not in origin:
            origin[split] = source
        self._state.bins_remove(source, weight, split)
        self._state.bins_add(target, weight, split)
        final[split] = target
        load[source] -= weight
        load[target] += weight
        count[source] -= 1
        count[target] += 1
