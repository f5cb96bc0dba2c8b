"""The demo's job: a checkable backfill over a deterministic synthetic dataset.

The dataset is a sequence of records whose values come from a keyed hash of the seed and the
record index, so any process can regenerate any range. The job cuts it into weighted splits
(a split's weight is its size class) and folds every record of a split into a checksum,
committing ``(watermark, checksum)`` as it goes. Because a successor resumes from the last
committed watermark and state, the final checksum of every split must equal a single pass
over its range however often the split changed hands — which is exactly what the demo checks.

A split's descriptor is its range of records, so a handler asked to split
(``SplitHandle.split_requested``) can cut what it has left in two at a commit: it keeps the
first half (the primary) and a new split, the residual, takes the second. The dataset may hold
one *straggler*, a split many times longer than the rest, which only splitting keeps from
setting the job's length.
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
    "decode_range",
    "encode_range",
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
    """A deterministic dataset of ``splits`` ranges with sizes of 1-3 units of ``unit`` records.

    ``straggler``, if given, is the number of one split whose size is ``straggler_units``
    units instead (its weight too): the long split a bounded job would otherwise wait for.
    """

    seed: int
    splits: int
    unit: int = 400
    straggler: int | None = None
    straggler_units: int = 16

    def value(self, index: int) -> int:
        """The value of record ``index``."""
        digest = hashlib.blake2b(f"{self.seed}:{index}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    def weight(self, split: int) -> int:
        """The size class (1-3, or the straggler's units) of split number ``split``."""
        if split == self.straggler:
            return self.straggler_units
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

    @property
    def straggler_id(self) -> str | None:
        """The straggler's split id (None when the dataset has none)."""
        return None if self.straggler is None else self.split_id(self.straggler)

    def fold(self, start: int, end: int) -> Fold:
        """The result of records ``start..end`` folded in one pass, with no coordination."""
        fold = Fold()
        for index in range(start, end):
            fold = fold.add(self.value(index))
        return fold

    def single_pass(self) -> dict[str, Fold]:
        """The expected result of every planned split (unsplit), computed in one pass."""
        return {split_id: self.fold(start, end) for split_id, start, end, _ in self.ranges()}


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
    """Splits whose completing commit landed (residuals included)."""
    started_at: dict[str, float] = attrs.field(factory=dict)
    """split id -> when (Trio's clock) a handler first started it."""
    residuals: dict[str, str] = attrs.field(factory=dict)
    """residual id -> the split it was split off, for every split that landed."""
    labels: dict[str, str] = attrs.field(factory=dict)
    """residual id -> a readable name (``range-0013/2``: the second residual of range-0013)."""
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

    def root(self, split: str) -> str:
        """The planned split that ``split`` is a piece of (itself, unless it is a residual)."""
        while split in self.residuals:
            split = self.residuals[split]
        return split

    def split_off(self, parent: str, residual: str) -> str:
        """Record that ``residual`` was split off ``parent``; return its short name."""
        root = self.root(parent)
        self.residuals[residual] = parent
        pieces = sum(1 for r in self.residuals if self.root(r) == root)
        label = f"{root}/{pieces}"
        self.labels[residual] = label
        return label

    def label(self, split: str) -> str:
        """A readable name for ``split`` (a residual's is its root's and its number)."""
        return self.labels.get(split, split)

    def log(self, message: str) -> None:
        """Append to the event log (and echo it when someone listens)."""
        self.events.append(message)
        if self.on_event is not None:
            self.on_event(message)


def encode_range(start: int, end: int) -> bytes:
    """The descriptor of records ``start..end``."""
    return json.dumps({"start": start, "end": end}).encode()


def decode_range(descriptor: bytes) -> tuple[int, int]:
    """The ``(start, end)`` records of a descriptor :func:`encode_range` wrote."""
    bounds = json.loads(descriptor)
    return int(bounds["start"]), int(bounds["end"])


def make_planner(dataset: Dataset) -> Callable[[PlanContext], Plan]:
    """A planner that plans every range of ``dataset`` once, as a bounded (final) plan."""

    def plan(ctx: PlanContext) -> Plan:
        return Plan(
            splits=[
                SplitSpec(split_id, descriptor=encode_range(start, end), weight=weight)
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
    poison: Callable[[int], bool] = lambda record: False,
    splits: bool = False,
    split_batches: int = 1,
    on_commit: Callable[[SplitHandle, int, bool], Awaitable[None]] | None = None,
) -> Callable[[SplitHandle], Awaitable[None]]:
    """The backfill handler one worker runs for each split it gains.

    Folds ``batch`` records per step, pretending each step takes ``batch_seconds``, and
    commits after every step. A range holding a record for which ``poison`` returns True
    raises :class:`PoisonRecord` on reaching it, as a split with a bad record would. With
    ``splits``, a split the leader asks to split is cut in two right after a commit, when
    each half would hold at least ``split_batches`` batches: the handler keeps the first half
    and a residual split takes the second.
    """

    async def split_rest(split: SplitHandle, start: int, position: int, end: int) -> int:
        """Split off the second half of ``position..end``; return the handler's new end."""
        # A batch boundary halfway through what is left: both halves keep whole batches, and
        # the point lies past every record folded so far (all of them committed).
        middle = position + (end - position) // (2 * batch) * batch
        try:
            residual = await split.split(
                primary=encode_range(start, middle), residual=encode_range(middle, end)
            )
        except Fenced:
            stats.fenced += 1
            stats.log(f"{worker}'s late split of {split.id} was fenced (no residual runs)")
            raise
        label = stats.split_off(split.id, residual)
        stats.log(
            f"{worker} splits {stats.label(split.id)} for an idle lane: it keeps records "
            f"{start}-{middle}, the residual {label} takes {middle}-{end}"
        )
        return middle

    async def handle(split: SplitHandle) -> None:
        start, end = decode_range(split.descriptor)
        watermark = split.progress.watermark
        position = start if watermark is None else watermark
        fold = Fold.decode(split.progress.state)
        stats.gained += 1
        stats.started_at.setdefault(split.id, trio.current_time())
        stats.holders[split.id] = worker
        if position > start:
            stats.resumed += 1
            stats.log(
                f"{worker} resumes {stats.label(split.id)} at record {position - start} "
                f"(epoch {split.epoch})"
            )
        try:
            while position < end:
                if split.revoke_requested.is_set():
                    stats.log(f"{worker} hands {split.id} back at a commit boundary")
                    return
                step_end = min(position + batch, end)
                bad = next((i for i in range(position, step_end) if poison(i)), None)
                if bad is not None:
                    stats.poison_hits += 1
                    stats.log(
                        f"{worker}: {stats.label(split.id)} hit a malformed record; the handler "
                        "raises and the split consumes an attempt"
                    )
                    raise PoisonRecord(f"record {bad} of {split.id} is malformed")
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
                elif (
                    splits
                    and split.split_requested.is_set()
                    and end - position >= 2 * split_batches * batch
                ):
                    # Committed first, so the split point lies past everything folded.
                    end = await split_rest(split, start, position, end)
        except trio.Cancelled:
            stats.cancelled += 1
            raise
        finally:
            if stats.holders.get(split.id) == worker:
                del stats.holders[split.id]

    return handle
