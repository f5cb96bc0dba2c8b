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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import attrs
import trio

from spate import Plan, PlanContext, SplitHandle, SplitSpec

__all__ = ["PoisonedSplit", "Workload"]


class PoisonedSplit(Exception):
    """Raised by the handler of a poison split: it stands for a record that always fails."""


@attrs.frozen
class Workload:
    """The splits of one simulated job, in planning batches, with their step counts.

    ``batches`` lists, per planner run, ``(split id, steps, weight)`` triples; a bounded job has
    one batch. ``poison`` names splits whose handler always fails halfway; ``stubborn`` splits
    whose handler declines a revocation instead of handing the split back.
    """

    batches: tuple[tuple[tuple[str, int, int], ...], ...]
    poison: frozenset[str] = frozenset()
    stubborn: frozenset[str] = frozenset()
    step_seconds: float = 0.5

    @property
    def split_ids(self) -> tuple[str, ...]:
        """Every split id the job will plan, in planning order."""
        return tuple(split for batch in self.batches for split, _, _ in batch)

    @property
    def total_steps(self) -> int:
        """Steps of work in the whole job (one commit each)."""
        return sum(steps for batch in self.batches for _, steps, _ in batch)

    def planner(self) -> Callable[[PlanContext], Plan]:
        """The planner: the first batch not yet fully known, final with the last batch."""

        def plan(ctx: PlanContext) -> Plan:
            for i, batch in enumerate(self.batches):
                if not all(split in ctx.known for split, _, _ in batch):
                    return Plan(
                        splits=_specs(s for s in batch if s[0] not in ctx.known),
                        final=i == len(self.batches) - 1,
                    )
            return Plan(splits=[], final=True)

        return plan

    async def handle(self, split: SplitHandle) -> None:
        """Do a split's steps from its resume point, one commit per step."""
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
            await split.commit(position, state=str(position).encode(), completed=position >= steps)


def _specs(batch: Iterable[tuple[str, int, int]]) -> list[SplitSpec]:
    return [
        SplitSpec(split, descriptor=json.dumps({"steps": steps}).encode(), weight=weight)
        for split, steps, weight in batch
    ]
