"""The demo's job: a checkable backfill over a deterministic synthetic dataset.

The dataset is a sequence of records whose values come from a keyed hash of the seed and the
record index, so any process can regenerate any range. The job cuts it into weighted splits
(a split's weight is its size class) and folds every record of a split into a checksum,
committing ``(watermark, checksum)`` as it goes. Because a successor resumes from the last
committed watermark and state, the final checksum of every split must equal a single pass
over its range however often the split changed hands — which is exactly what the demo checks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import attrs
import trio

from spate._errors import Fenced
from spate._plan import Plan, PlanContext, SplitSpec

if TYPE_CHECKING:
    from spate._runtime.worker import SplitHandle

__all__ = [
    "Dataset",
    "DemoStats",
    "Fold",
    "PoisonRecord",
    "make_handler",
    "make_planner",
]

_MASK = (1 << 64) - 1


@attrs.frozen
class Fold:
    """The running result of one split: how many records and their checksum."""

    count: int = 0
    checksum: int = 0

    def add(self, value: int) -> Fold:
        """Fold one record value in (order-sensitive, so replays out of order would show)."""
        mixed = ((self.checksum * 0x100000001B3) ^ value) & _MASK
        return Fold(self.count + 1, mixed)

    def encode(self) -> bytes:
        """The split's committed state."""
        return json.dumps({"count": self.count, "checksum": self.checksum}).encode()

    @classmethod
    def decode(cls, state: bytes) -> Fold:
        """Read a committed state back; empty state is the start."""
        if not state:
            return cls()
        data = json.loads(state)
        return cls(int(data["count"]), int(data["checksum"]))


@attrs.frozen
class Dataset:
    """A deterministic dataset of ``splits`` ranges with sizes of 1-3 units of ``unit`` records."""

    seed: int
    splits: int
    unit: int = 400

    def value(self, index: int) -> int:
        """The value of record ``index``."""
        digest = hashlib.blake2b(f"{self.seed}:{index}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    def weight(self, split: int) -> int:
        """The size class (1-3) of split number ``split``."""
        digest = hashlib.blake2b(f"{self.seed}:weight:{split}".encode(), digest_size=1).digest()
        return 1 + digest[0] % 3

    def split_id(self, split: int) -> str:
        """The split id of split number ``split``."""
        return f"range-{split:04d}"

    def ranges(self) -> list[tuple[str, int, int, int]]:
        """``(split id, first record, end record, weight)`` for every split, in order."""
        out = []
        start = 0
        for i in range(self.splits):
            weight = self.weight(i)
            end = start + weight * self.unit
            out.append((self.split_id(i), start, end, weight))
            start = end
        return out

    @property
    def total_records(self) -> int:
        """How many records the whole dataset has."""
        return sum(end - start for _, start, end, _ in self.ranges())

    def single_pass(self) -> dict[str, Fold]:
        """The expected result of every split, computed in one pass with no coordination."""
        expected = {}
        for split_id, start, end, _ in self.ranges():
            fold = Fold()
            for index in range(start, end):
                fold = fold.add(self.value(index))
            expected[split_id] = fold
        return expected


class PoisonRecord(Exception):
    """The demo's poison split hit its bad record (standing in for a real data bug)."""


@attrs.define
class DemoStats:
    """Counters the demo's handlers update (one process, so plain ints are enough)."""

    processed: int = 0
    """Records folded for the first time (at most the dataset's total)."""
    replayed: int = 0
    """Records folded again: work a lost or failed tenancy did but never committed."""
    frontier: dict[str, int] = attrs.field(factory=dict)
    """split id -> one past the furthest record any tenancy folded."""
    commits: int = 0
    """Commits that landed."""
    fenced: int = 0
    """Commits refused because the split had moved on (zombie writes that did not land)."""
    gained: int = 0
    """Handler starts (split acquisitions)."""
    cancelled: int = 0
    """Handlers cancelled because their split was lost or taken back."""
    poison_hits: int = 0
    """Times the poison split failed."""
    resumed: int = 0
    """Acquisitions that resumed a split part-way (from another tenancy's last commit)."""
    completed: set[str] = attrs.field(factory=set)
    """Splits whose completing commit landed."""
    holders: dict[str, str] = attrs.field(factory=dict)
    """split id -> the worker whose handler runs it now."""
    watermarks: dict[str, int] = attrs.field(factory=dict)
    """split id -> records done, as last committed."""
    events: list[str] = attrs.field(factory=list)
    """Human-readable event log, newest last."""
    on_event: Callable[[str], None] | None = None

    def fold(self, split: str, start: int, end: int) -> None:
        """Count records ``start..end`` of ``split`` as folded: new ones, then replays."""
        frontier = self.frontier.get(split, start)
        fresh = max(0, end - max(start, frontier))
        self.processed += fresh
        self.replayed += (end - start) - fresh
        self.frontier[split] = max(frontier, end)

    def log(self, message: str) -> None:
        """Append to the event log (and echo it when someone listens)."""
        self.events.append(message)
        if self.on_event is not None:
            self.on_event(message)


def _descriptor(start: int, end: int) -> bytes:
    return json.dumps({"start": start, "end": end}).encode()


def make_planner(dataset: Dataset) -> Callable[[PlanContext], Plan]:
    """A planner that plans every range of ``dataset`` once, as a bounded (final) plan."""

    def plan(ctx: PlanContext) -> Plan:
        return Plan(
            splits=[
                SplitSpec(split_id, descriptor=_descriptor(start, end), weight=weight)
                for split_id, start, end, weight in dataset.ranges()
                if split_id not in ctx.known
            ],
            final=True,
        )

    return plan


def make_handler(
    dataset: Dataset,
    stats: DemoStats,
    worker: str,
    *,
    batch: int = 50,
    batch_seconds: float = 0.05,
    poison: Callable[[str], bool] = lambda split: False,
    on_commit: Callable[[SplitHandle, int, bool], Awaitable[None]] | None = None,
) -> Callable[[SplitHandle], Awaitable[None]]:
    """The backfill handler one worker runs for each split it gains.

    Folds ``batch`` records per step, pretending each step takes ``batch_seconds``, and
    commits after every step. A split for which ``poison`` returns True raises
    :class:`PoisonRecord` halfway through, as a split with a bad record would.
    """

    async def handle(split: SplitHandle) -> None:
        bounds = json.loads(split.descriptor)
        start, end = int(bounds["start"]), int(bounds["end"])
        position = split.progress.watermark if split.progress.watermark is not None else start
        fold = Fold.decode(split.progress.state)
        stats.gained += 1
        stats.holders[split.id] = worker
        if position > start:
            stats.resumed += 1
            stats.log(
                f"{worker} resumes {split.id} at record {position - start} (epoch {split.epoch})"
            )
        try:
            while position < end:
                if split.revoke_requested.is_set():
                    stats.log(f"{worker} hands {split.id} back at a commit boundary")
                    return
                step_end = min(position + batch, end)
                if poison(split.id) and position <= (start + end) // 2 < step_end:
                    stats.poison_hits += 1
                    stats.log(
                        f"{worker}: {split.id} hit a malformed record; the handler raises and "
                        "the split consumes an attempt"
                    )
                    raise PoisonRecord(f"record {(start + end) // 2} of {split.id} is malformed")
                for index in range(position, step_end):
                    fold = fold.add(dataset.value(index))
                stats.fold(split.id, position, step_end)
                await trio.sleep(batch_seconds)
                position = step_end
                try:
                    await split.commit(position, state=fold.encode(), completed=position >= end)
                except Fenced:
                    stats.fenced += 1
                    stats.log(
                        f"{worker}'s late commit to {split.id} was fenced (zombie write refused)"
                    )
                    raise
                stats.commits += 1
                stats.watermarks[split.id] = position - start
                if on_commit is not None:
                    await on_commit(split, position, position >= end)
                if position >= end:
                    stats.completed.add(split.id)
        except trio.Cancelled:
            stats.cancelled += 1
            raise
        finally:
            if stats.holders.get(split.id) == worker:
                del stats.holders[split.id]

    return handle
