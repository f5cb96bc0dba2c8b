"""The simulator's workload: a deterministic planner and a handler that commits watermarks.

Each split is a count of steps (its descriptor). The handler resumes from the committed
watermark, sleeps one step on the simulated clock, commits the next watermark, and completes
at the end; it hands the split back at a commit boundary when a revocation is requested. A
*stubborn* split's handler cannot stop there: it declines the revocation (which forces it:
the split is taken back and its uncommitted step replays elsewhere) and keeps working until
it is cancelled. A *poison* split raises halfway through every time, so it runs out of
attempts and ends quarantined. Everything is a function of the split id and the seed, so two
runs of one seed plan and do the same work.

Plans come in two shapes: *bounded* (every split at once, final) and *open* (batches over
several planner runs, the last one final), which exercises replanning.

A *splittable* workload (docs/splitting.md) plans the same steps as ranges of one job-wide item
space instead: split ``i``'s descriptor is ``b"start:end"``, its watermark the position of the next
item, and at a commit point the handler splits what is left when the leader asks
(``split_requested``), and sometimes unasked: it keeps ``start:mid`` and a new split takes
``mid:end``, ``mid`` past the committed position. The split points, like everything else, are
functions of the seed, the split and its position. Poison is then a property of an item (the middle
one of a planned poison split), so whichever split holds that item fails at it; a residual of a
stubborn split is stubborn too.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Iterable

import attrs
import trio

from spate import Plan, PlanContext, SplitHandle, SplitSpec
from spate_testing.sim._history import range_bounds, range_descriptor

__all__ = ["PoisonedSplit", "Workload", "root_of"]


class PoisonedSplit(Exception):
    """Raised by the handler of a poison split: it stands for a record that always fails."""


def root_of(split: str) -> str:
    """The planned split a split descends from (a residual's id extends its root's)."""
    return split.partition(".r")[0]


@attrs.frozen
class Workload:
    """The splits of one simulated job, in planning batches, with their step counts.

    ``batches`` lists, per planner run, ``(split id, steps, weight)`` triples; a bounded job has
    one batch. ``poison`` names splits whose handler always fails halfway; ``stubborn`` splits
    whose handler declines a revocation instead of handing the split back.

    With ``splittable``, descriptors are ranges of one item space (see the module docstring):
    the handler splits when asked, and unasked at a commit point with probability
    ``split_rate``, every such draw made from ``seed``, the split and its position.
    """

    batches: tuple[tuple[tuple[str, int, int], ...], ...]
    poison: frozenset[str] = frozenset()
    stubborn: frozenset[str] = frozenset()
    step_seconds: float = 0.5
    splittable: bool = False
    split_rate: float = 0.0
    seed: int = 0
    loads: tuple[tuple[str, float], ...] = ()
    """Planned split -> the load its handler reports each step (``SplitHandle.report_load``);
    a residual reports its root's. Empty: nothing is reported (most seeds)."""

    def load_of(self, split: str) -> float:
        """The load ``split``'s handler reports each step (0.0: none)."""
        if not self.loads:
            return 0.0
        return dict(self.loads).get(root_of(split), 0.0)

    @property
    def split_ids(self) -> tuple[str, ...]:
        """Every split id the job will plan, in planning order."""
        return tuple(split for batch in self.batches for split, _, _ in batch)

    @property
    def total_steps(self) -> int:
        """Steps of work in the whole job (one commit each)."""
        return sum(steps for batch in self.batches for _, steps, _ in batch)

    @functools.cached_property
    def ranges(self) -> dict[str, tuple[int, int]]:
        """Each planned split's items ``(start, end)``: consecutive, in planning order."""
        found: dict[str, tuple[int, int]] = {}
        start = 0
        for batch in self.batches:
            for split, steps, _ in batch:
                found[split] = (start, start + steps)
                start += steps
        return found

    @property
    def item_space(self) -> tuple[int, int]:
        """The job's items ``(start, end)``: what the completed ranges must tile exactly."""
        return 0, self.total_steps

    @functools.cached_property
    def poison_items(self) -> frozenset[int]:
        """The items that always fail (splittable): the middle one of each poison split."""
        return frozenset(
            start + (end - start) // 2
            for split, (start, end) in self.ranges.items()
            if split in self.poison
        )

    def bounds(self, descriptor: bytes) -> tuple[int, int]:
        """``(start, end)`` of a gained split's work: its range, or ``(0, steps)``."""
        if self.splittable:
            return range_bounds(descriptor)
        return 0, int(json.loads(descriptor)["steps"])

    def fails_at(self, split: str, position: int, end: int) -> bool:
        """Whether the handler of ``split`` fails before doing the item at ``position``."""
        if self.splittable:
            return position in self.poison_items
        return split in self.poison and position >= end // 2

    def is_stubborn(self, split: str) -> bool:
        """Whether the handler of ``split`` declines revocations (a residual: as its root)."""
        return root_of(split) in self.stubborn

    def split_point(self, split: str, position: int, end: int, *, asked: bool) -> int | None:
        """Where the handler of ``split`` splits at a commit point at ``position``, if it does.

        Only with room for both parts (the residual starts past the committed position); when
        ``asked`` always, otherwise with probability ``split_rate``. A pure function of the
        seed and its arguments, so both engines, and every owner, split alike.
        """
        if not self.splittable or end - position < 2:
            return None
        rng = random.Random(f"{self.seed}/split/{split}/{position}/{end}")
        unasked = rng.random() < self.split_rate
        if not (asked or unasked):
            return None
        if rng.random() < 0.5:
            return position + (end - position + 1) // 2  # the middle of what is left
        return position + 1 + rng.randrange(end - position - 1)

    def planner(self) -> Callable[[PlanContext], Plan]:
        """The planner: the first batch not yet fully known, final with the last batch."""

        def plan(ctx: PlanContext) -> Plan:
            for i, batch in enumerate(self.batches):
                if not all(split in ctx.known for split, _, _ in batch):
                    return Plan(
                        splits=self._specs(s for s in batch if s[0] not in ctx.known),
                        final=i == len(self.batches) - 1,
                    )
            return Plan(splits=[], final=True)

        return plan

    def _specs(self, batch: Iterable[tuple[str, int, int]]) -> list[SplitSpec]:
        if not self.splittable:
            return _specs(batch)
        ranges = self.ranges
        return [
            SplitSpec(split, descriptor=range_descriptor(*ranges[split]), weight=weight)
            for split, _, weight in batch
        ]

    async def handle(self, split: SplitHandle) -> None:
        """Do a split's steps from its resume point, one commit per step."""
        if self.splittable:
            return await self._handle_range(split)
        steps = int(json.loads(split.descriptor)["steps"])
        position = split.progress.watermark or 0
        declined = False
        while position < steps:
            if split.revoke_requested.is_set():
                if split.id not in self.stubborn:
                    return
                if not declined:
                    declined = True
                    await split.decline_revoke()
            if split.id in self.poison and position >= steps // 2:
                raise PoisonedSplit(f"step {position} of {split.id} always fails")
            await trio.sleep(self.step_seconds)
            position += 1
            if load := self.load_of(split.id):
                split.report_load(load)  # Fenced ends the handler, as a commit's would
            await split.commit(position, state=str(position).encode(), completed=position >= steps)

    async def _handle_range(self, split: SplitHandle) -> None:
        """A splittable split's items from its resume point, one commit per item.

        Every commit point (the resume point included) may split off the rest's tail.
        """
        start, end = range_bounds(split.descriptor)
        position = start if split.progress.watermark is None else split.progress.watermark
        declined = False
        while position < end:
            if split.revoke_requested.is_set():
                if not self.is_stubborn(split.id):
                    return
                if not declined:
                    declined = True
                    await split.decline_revoke()
            mid = self.split_point(split.id, position, end, asked=split.split_requested.is_set())
            if mid is not None:
                # Fenced (the split is no longer ours) ends the handler, as a commit's would.
                await split.split(range_descriptor(start, mid), range_descriptor(mid, end))
                end = mid
                continue  # the same commit point: it may split again (or be revoked)
            if self.fails_at(split.id, position, end):
                raise PoisonedSplit(f"item {position} of {split.id} always fails")
            await trio.sleep(self.step_seconds)
            position += 1
            if load := self.load_of(split.id):
                split.report_load(load)
            await split.commit(position, state=str(position).encode(), completed=position >= end)


def _specs(batch: Iterable[tuple[str, int, int]]) -> list[SplitSpec]:
    return [
        SplitSpec(split, descriptor=json.dumps({"steps": steps}).encode(), weight=weight)
        for split, steps, weight in batch
    ]
