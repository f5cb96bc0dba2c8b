"""The invariant checker: what must hold over any history of a spate fleet.

:func:`check` returns every :class:`Violation` it finds (an empty list means the history is
clean). Each invariant has a stable name (:data:`INVARIANTS`):

``stale-epoch``
    No write lands from a stale epoch: a progress record's epoch never goes down, and a write
    that keeps the epoch comes from the worker incarnation that claimed that epoch. Where no
    store writes were recorded (real processes), acknowledged commits are used instead: a
    commit acknowledged at a higher watermark cannot carry a lower epoch than one below it.
``two-owners``
    At most one owner per split per epoch: no two incarnations gain (or have acknowledged
    commits at) the same split and epoch, and a gain matches the write that claimed the epoch.
``lost-ack``
    No acknowledged commit is lost: it landed before it was acknowledged, and the final
    record's watermark is at least every acknowledged commit's (completion included).
``watermark-regression``
    Watermarks never go backwards in the store, and a completed split never becomes
    uncompleted (nor is its progress record deleted).
``unfinished-split``
    With a final plan, every split ends completed or quarantined, and the final listing holds
    exactly the splits the workload planned.
``verdict-mismatch``
    Every verdict a worker returned matches the final listing (AllComplete: all completed;
    Stalled: the same completed and quarantined counts, at least one quarantined).
``revocation-identity``
    requested = drained + forced + cancelled + in flight, with in flight never negative, never
    more than the drains the worker reports, and zero once its coordinator closed normally.
``termination``
    The job reached its verdict within the run's bound of simulated time.
``range-partition``
    For a splittable workload (a history with an :class:`~spate_testing.sim._history.ItemSpace`):
    the committed ranges partition the job's items exactly. Every progress write's watermark
    lies within its split's range (the record's descriptor since its last split, else the
    spec's) and a completed split's equals its end; a split write cuts its range in order into
    the new primary and the residuals it adds, none of them starting before the committed
    watermark, and changes the descriptor only so; and at the end of a final plan the ranges
    of the splits that exist tile the item space: an item in no split is lost, one in two is
    counted twice. (Replay after a takeover is allowed: only committed work is judged.)
``residual-origin``
    A residual runs if and only if its parent's split write won (``docs/protocol.md``, Splitting):
    every split that was seeded or gained is planned or named by a won write of its parent's
    progress record (which landed first), its spec holds the descriptor and parent that write named,
    a record never drops a residual it named, every named residual is seeded by the end of a final
    plan, a split call acknowledged with a residual id landed (by that worker, naming that
    residual), and a split call that raised Fenced landed nothing.
``foreign-delivery``
    No worker is delivered anything about a split it neither holds nor claims, the leader's
    ownership events aside (``docs/protocol.md``, Who reads what): no watch delivers a progress
    record or a spec to anyone (nobody watches them), a lease only to a worker that leads at that
    moment (:class:`~spate_testing.sim._history.Leading`), and another instance's assignment record
    to no follower. Read from :class:`~spate_testing.sim._history.Delivered` events (live events and
    snapshot entries; point reads and listings are not deliveries), which the machine engine's store
    model records; a history without them passes.
``balance-cooldown``
    No balance round moves a split within its cooldown of its previous balance move, whoever
    made either (a new leader after a failover included): read from the rounds
    (:class:`~spate_testing.sim._history.Balanced`), a move of ``split`` at ``t`` after one
    at ``t0`` needs ``t - t0`` at least the earlier round's ``cooldown`` (seconds). A move
    decided by a leader is judged whether or not it then landed, except a deposed leader's:
    once a newer generation's bump landed (the store's plan writes say so), the rounds of a
    leader of an older one are fenced, and double leadership may cost balance
    (``docs/protocol.md``), so they neither break nor start a cooldown.
``balance-budget``
    No balance round moves more than its budget: the loads of its moves (their sum, and the
    round's own ``moved_load``) at most ``budget`` (``max_moved_load``) x the job's load,
    unless the round made one step alone (the planner's rule 8: one split one way between two
    workers, any lighter ones back, and no other move).
``balance-settled``
    Settled means settled: once a leader's round finds every worker within the band, no later
    round of that leadership moves a split while the loads hold still, that is while the same
    workers each carry a load (before the round's moves) within half a band (``load_band / 2``
    x the mean worker load) of what they carried in the round that settled. A round that
    judged the fleet otherwise (outside the band, idle, unmeasured) ends the settled spell;
    one that finds it within the band again with loads that moved on starts a new one. Read
    from the rounds' ``loads``; a history without them passes.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable
from typing import Any

import attrs

from spate._core.records import (
    KeyKind,
    Keys,
    PlanRecord,
    ProgressRecord,
    Residual,
    SpecRecord,
    Status,
    UnreadableRecord,
    decode,
)
from spate_testing.sim._history import (
    Acked,
    Balanced,
    BalanceMove,
    Delivered,
    Final,
    FinalSplit,
    Gained,
    History,
    ItemSpace,
    Leading,
    Revocations,
    Split,
    StoreWrite,
    Verdict,
    instance_of,
    range_bounds,
)

__all__ = ["INVARIANTS", "Violation", "check"]

INVARIANTS = (
    "stale-epoch",
    "two-owners",
    "lost-ack",
    "watermark-regression",
    "unfinished-split",
    "verdict-mismatch",
    "revocation-identity",
    "termination",
    "range-partition",
    "residual-origin",
    "foreign-delivery",
    "balance-cooldown",
    "balance-budget",
    "balance-settled",
)
"""The names of the invariants :func:`check` holds, in the order it checks them."""


@attrs.frozen
class Violation:
    """One broken invariant: its name (one of :data:`INVARIANTS`) and what exactly broke."""

    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.detail}"


def _wm(watermark: int | None) -> int:
    return -1 if watermark is None else watermark


@attrs.define
class _Landed:
    """A progress write that landed, in store order."""

    index: int
    actor: str
    record: ProgressRecord


@attrs.define
class _Named:
    """A residual as the won write that first named it: which split, whose write, where."""

    index: int
    parent: str
    actor: str
    epoch: int
    entry: Residual
    primary: bytes | None
    """The parent's descriptor that write set (its new primary)."""


@attrs.define
class _SplitFacts:
    current: ProgressRecord | None = None
    landed: list[_Landed] = attrs.field(factory=list)
    # epoch -> the actor whose write moved the record to it (claim or quarantine)
    claimed_by: dict[int, str] = attrs.field(factory=dict)


class _Checker:
    def __init__(self, history: History) -> None:
        self.history = history
        self.keys = Keys(history.job)
        self.violations: list[Violation] = []
        self.splits: dict[str, _SplitFacts] = collections.defaultdict(_SplitFacts)
        self.saw_store = False
        self.specs: dict[str, tuple[int, SpecRecord]] = {}
        """Split -> (history index, the spec record) of its first won spec write."""
        self.named: dict[str, _Named] = {}
        """Residual id -> the won write that first named it."""

    def flag(self, invariant: str, detail: str) -> None:
        self.violations.append(Violation(invariant, detail))

    # -- the store's own history --------------------------------------------------------

    def store_writes(self) -> None:
        for index, event in enumerate(self.history.events):
            if not isinstance(event, StoreWrite) or event.keyspace != "durable":
                continue
            kind = self.keys.classify(event.key)
            if kind is not None and kind[0] is KeyKind.SPEC:
                if event.outcome == "won" and event.op != "delete":
                    self._spec_write(index, kind[1], event)
                continue
            if kind is None or kind[0] is not KeyKind.SPLIT:
                continue
            self.saw_store = True
            if event.outcome != "won":
                continue
            self._progress_write(index, kind[1], event)

    def _spec_write(self, index: int, split: str, event: StoreWrite) -> None:
        try:
            spec = decode(SpecRecord, event.key, event.value or b"", split=split)
        except UnreadableRecord:
            return  # (a spec carries no ownership; nothing here judges it unread)
        self.specs.setdefault(split, (index, spec))

    def _progress_write(self, index: int, split: str, event: StoreWrite) -> None:
        facts = self.splits[split]
        previous = facts.current
        where = f"split {split!r}, write #{index} by {event.actor} at t={event.at:.3f}"
        if event.op == "delete":
            if previous is not None:
                self.flag(
                    "watermark-regression",
                    f"{where} deleted the progress record (epoch {previous.epoch}, "
                    f"watermark {previous.watermark})",
                )
            facts.current = None
            return
        try:
            record = decode(ProgressRecord, event.key, event.value or b"", split=split)
        except UnreadableRecord as exc:
            self.flag("watermark-regression", f"{where} wrote an unreadable record: {exc.problem}")
            return
        facts.current = record
        facts.landed.append(_Landed(index, event.actor, record))
        self._residuals_named(index, split, event.actor, previous, record, where)
        if previous is None:
            if record.epoch > 0:
                facts.claimed_by[record.epoch] = event.actor
            return
        if record.epoch < previous.epoch:
            self.flag(
                "stale-epoch",
                f"{where} moved the epoch back from {previous.epoch} to {record.epoch}",
            )
        elif record.epoch > previous.epoch:
            facts.claimed_by[record.epoch] = event.actor
        elif record.epoch > 0:
            holder = facts.claimed_by.get(record.epoch)
            if holder is not None and holder != event.actor:
                self.flag(
                    "stale-epoch",
                    f"{where} landed at epoch {record.epoch}, which {holder} claimed: only "
                    "the claimant of an epoch may write at it",
                )
        if _wm(record.watermark) < _wm(previous.watermark):
            self.flag(
                "watermark-regression",
                f"{where} lowered the watermark from {previous.watermark} to {record.watermark}",
            )
        if previous.completed and not record.completed:
            self.flag("watermark-regression", f"{where} un-completed a completed split")

    def _residuals_named(
        self,
        index: int,
        split: str,
        actor: str,
        previous: ProgressRecord | None,
        record: ProgressRecord,
        where: str,
    ) -> None:
        before = () if previous is None else previous.residuals
        if record.residuals[: len(before)] != before:
            self.flag(
                "residual-origin",
                f"{where} dropped or rewrote residuals its record named: "
                f"{[r.id for r in before]} became {[r.id for r in record.residuals]}",
            )
        known = {r.id for r in before}
        for entry in record.residuals:
            if entry.id in known:
                continue
            first = self.named.get(entry.id)
            if first is None:
                self.named[entry.id] = _Named(
                    index, split, actor, record.epoch, entry, record.descriptor
                )
            elif first.parent != split or first.entry != entry:
                self.flag(
                    "residual-origin",
                    f"{where} named residual {entry.id!r} ({entry.descriptor!r}), which write "
                    f"#{first.index} already named for split {first.parent!r} "
                    f"({first.entry.descriptor!r})",
                )

    # -- what the workers were told -----------------------------------------------------

    def gains(self) -> None:
        owners: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        for event in self.history.of(Gained):
            owners[(event.split, event.epoch)].append(event.actor)
            claimant = self.splits[event.split].claimed_by.get(event.epoch)
            if claimant is not None and claimant != event.actor:
                self.flag(
                    "two-owners",
                    f"{event.actor} gained split {event.split!r} at epoch {event.epoch}, but "
                    f"the store gave that epoch to {claimant}",
                )
        for (split, epoch), actors in sorted(owners.items()):
            if len(set(actors)) > 1:
                self.flag(
                    "two-owners",
                    f"split {split!r} was gained at epoch {epoch} by {sorted(set(actors))}",
                )

    def acks(self) -> None:
        by_split: dict[str, list[tuple[int, Acked]]] = collections.defaultdict(list)
        for index, event in enumerate(self.history.events):
            if isinstance(event, Acked):
                by_split[event.split].append((index, event))
        for split, acks in sorted(by_split.items()):
            self._acks_of_split(split, acks)

    def _acks_of_split(self, split: str, acks: list[tuple[int, Acked]]) -> None:
        facts = self.splits[split]
        writers: dict[int, set[str]] = collections.defaultdict(set)
        for index, ack in acks:
            writers[ack.epoch].add(ack.actor)
            if self.saw_store and not any(
                landed.index < index
                and landed.actor == ack.actor
                and landed.record.epoch == ack.epoch
                and _wm(landed.record.watermark) >= _wm(ack.watermark)
                and (landed.record.completed or not ack.completed)
                for landed in facts.landed
            ):
                self.flag(
                    "lost-ack",
                    f"{ack.actor} was told its commit of split {split!r} (epoch {ack.epoch}, "
                    f"watermark {ack.watermark}) landed, but no such write landed before",
                )
        for epoch, actors in sorted(writers.items()):
            if len(actors) > 1:
                self.flag(
                    "two-owners",
                    f"split {split!r} had commits acknowledged at epoch {epoch} to "
                    f"{sorted(actors)}",
                )
        # Store order agrees with watermark order (watermarks never regress), so a commit
        # acknowledged above another's watermark landed after it and cannot be staler.
        ordered = sorted((_wm(a.watermark), a.epoch, a.actor) for _, a in acks)
        staler: tuple[int, int, str] | None = None  # highest epoch below the current watermark
        below = 0
        for wm, epoch, actor in ordered:
            while ordered[below][0] < wm:
                if staler is None or ordered[below][1] > staler[1]:
                    staler = ordered[below]
                below += 1
            if staler is not None and epoch < staler[1]:
                self.flag(
                    "stale-epoch",
                    f"split {split!r}: {actor}'s commit at epoch {epoch} (watermark {wm}) was "
                    f"acknowledged above {staler[2]}'s at epoch {staler[1]} (watermark "
                    f"{staler[0]})",
                )
                break

    # -- how it ended ---------------------------------------------------------------------

    def ending(self) -> None:
        final = self.history.final
        if final is None:
            self.flag("termination", "the history has no final listing: the run did not end")
            return
        if not final.terminated:
            self.flag(
                "termination",
                f"the job had no verdict {final.bound:g} s of simulated time after the faults "
                f"stopped (cut off at t={final.at:.1f})",
            )
        listing = {s.split: s for s in final.splits}
        for ack in self.history.of(Acked):
            record = listing.get(ack.split)
            if record is None:
                self.flag(
                    "lost-ack",
                    f"split {ack.split!r} is missing from the final listing, yet {ack.actor}'s "
                    f"commit (watermark {ack.watermark}) was acknowledged",
                )
            elif _wm(record.watermark) < _wm(ack.watermark) or (
                ack.completed and not record.completed
            ):
                self.flag(
                    "lost-ack",
                    f"split {ack.split!r} ends at watermark {record.watermark} (completed: "
                    f"{record.completed}), below {ack.actor}'s acknowledged commit at epoch "
                    f"{ack.epoch} (watermark {ack.watermark}, completed: {ack.completed})",
                )
        if final.plan_final:
            self._final_plan(final, listing)

    def _final_plan(self, final: Final, listing: dict[str, FinalSplit]) -> None:
        completed = quarantined = 0
        for s in final.splits:
            if s.status == Status.COMPLETED.value and s.completed:
                completed += 1
            elif s.status == Status.QUARANTINED.value:
                quarantined += 1
            else:
                self.flag(
                    "unfinished-split",
                    f"split {s.split!r} ends {s.status} (completed: {s.completed}, watermark "
                    f"{s.watermark}, owner {s.owner}) although the plan is final",
                )
        if final.expected is not None:
            missing = sorted(set(final.expected) - set(listing))
            # (A residual named by a won split write is work the job gained, not an intruder;
            # residual-origin judges where each came from.)
            extra = sorted(set(listing) - set(final.expected) - set(self.named))
            if missing:
                self.flag("unfinished-split", f"planned splits never seeded: {missing}")
            if extra:
                self.flag("unfinished-split", f"splits nobody planned: {extra}")
        verdicts = self.history.of(Verdict)
        if final.terminated and not verdicts:
            self.flag("termination", "the run ended but no worker returned a verdict")
        for v in verdicts:
            if v.all_complete:
                ok = quarantined == 0 and completed == len(final.splits)
                said = "AllComplete"
            else:
                ok = v.completed == completed and v.quarantined == quarantined and quarantined > 0
                said = f"Stalled(completed={v.completed}, quarantined={v.quarantined})"
            if not ok:
                self.flag(
                    "verdict-mismatch",
                    f"{v.actor} returned {said} at t={v.at:.3f}, but the final listing has "
                    f"{completed} completed and {quarantined} quarantined of "
                    f"{len(final.splits)}",
                )

    def revocations(self) -> None:
        for r in self.history.of(Revocations):
            in_flight = r.requested - r.drained - r.forced - r.cancelled
            counts = (
                f"requested {r.requested}, drained {r.drained}, forced {r.forced}, "
                f"cancelled {r.cancelled}"
            )
            if r.problem is not None:
                self.flag("revocation-identity", f"{r.actor}: {r.problem} ({counts})")
            elif in_flight < 0:
                self.flag(
                    "revocation-identity",
                    f"{r.actor} settled more revocations than it requested ({counts})",
                )
            elif r.settled and in_flight != 0:
                self.flag(
                    "revocation-identity",
                    f"{r.actor}'s coordinator closed with {in_flight} revocation(s) still in "
                    f"flight ({counts})",
                )

    # -- splitting (docs/protocol.md, Splitting) -----------------------------------------------

    def _range_of(self, split: str, record: ProgressRecord) -> tuple[int, int] | None:
        """The items of ``split`` as ``record`` says: its descriptor, else its spec's."""
        descriptor = record.descriptor
        if descriptor is None:
            spec = self.specs.get(split)
            if spec is None:
                return None
            descriptor = spec[1].descriptor
        try:
            return range_bounds(descriptor)
        except ValueError:
            self.flag("range-partition", f"split {split!r} has no range: {descriptor!r}")
            return None

    def ranges(self) -> None:
        spaces = self.history.of(ItemSpace)
        if not spaces or not self.saw_store:
            return
        space: ItemSpace = spaces[-1]
        for split, facts in sorted(self.splits.items()):
            previous: tuple[ProgressRecord, tuple[int, int]] | None = None
            for landed in facts.landed:
                record = landed.record
                found = self._range_of(split, record)
                if found is None:
                    continue
                self._range_write(split, landed, found, previous)
                previous = (record, found)
        final = self.history.final
        if final is not None and final.plan_final:
            self._tiling(space, final)

    def _range_write(
        self,
        split: str,
        landed: _Landed,
        found: tuple[int, int],
        previous: tuple[ProgressRecord, tuple[int, int]] | None,
    ) -> None:
        record = landed.record
        start, end = found
        where = f"split {split!r}, write #{landed.index} by {landed.actor}"
        wm = record.watermark
        if wm is not None and not start <= wm <= end:
            self.flag(
                "range-partition",
                f"{where}: watermark {wm} lies outside its range {start}:{end}",
            )
        if record.completed and (start if wm is None else wm) != end:
            self.flag(
                "range-partition",
                f"{where} completed it at watermark {wm}, but its range {start}:{end} ends at "
                f"{end}: items {wm}:{end} were never committed",
            )
        if previous is None:
            return
        old, (old_start, old_end) = previous
        added = record.residuals[len(old.residuals) :]
        if not added:
            if record.descriptor != old.descriptor:
                self.flag(
                    "range-partition",
                    f"{where} changed its descriptor from {old.descriptor!r} to "
                    f"{record.descriptor!r} without splitting anything off",
                )
            return
        pieces = [(start, end, split)]
        for entry in added:
            try:
                pieces.append((*range_bounds(entry.descriptor), entry.id))
            except ValueError:
                self.flag(
                    "range-partition",
                    f"{where} split off {entry.id!r} with no range: {entry.descriptor!r}",
                )
                return
        committed = old_start if old.watermark is None else old.watermark
        cursor = old_start
        for piece_start, piece_end, name in pieces:
            if piece_start != cursor or piece_end <= piece_start:
                self.flag(
                    "range-partition",
                    f"{where} split {old_start}:{old_end} into "
                    f"{', '.join(f'{a}:{b}' for a, b, _ in pieces)}: not a partition of it in "
                    "order",
                )
                return
            if name != split and piece_start < committed:
                self.flag(
                    "range-partition",
                    f"{where} split off {name!r} ({piece_start}:{piece_end}) below the committed "
                    f"watermark {committed}: committed items would run twice",
                )
            cursor = piece_end
        if cursor != old_end:
            self.flag(
                "range-partition",
                f"{where} split {old_start}:{old_end} into pieces ending at {cursor}: items "
                f"{cursor}:{old_end} were dropped",
            )

    def _tiling(self, space: ItemSpace, final: Final) -> None:
        pieces: list[tuple[int, int, str]] = []
        for s in final.splits:
            current = self.splits[s.split].current
            found = None if current is None else self._range_of(s.split, current)
            if found is None:
                self.flag("range-partition", f"split {s.split!r} ends with no known range")
                continue
            pieces.append((*found, s.split))
        pieces.sort()
        cursor, last = space.start, ""
        for start, end, split in pieces:
            if start > cursor:
                self.flag(
                    "range-partition",
                    f"items {cursor}:{start} are in no split at the end: lost "
                    f"{self._who_had(cursor, start)}",
                )
            elif start < cursor:
                self.flag(
                    "range-partition",
                    f"items {start}:{min(cursor, end)} are in two splits at the end, {last!r} "
                    f"and {split!r}: counted twice",
                )
            if end > cursor:
                cursor, last = end, split
        if cursor < space.end:
            self.flag(
                "range-partition",
                f"items {cursor}:{space.end} are in no split at the end: lost "
                f"{self._who_had(cursor, space.end)}",
            )
        elif cursor > space.end:
            self.flag(
                "range-partition",
                f"items {space.end}:{cursor} lie outside the job's item space "
                f"{space.start}:{space.end}",
            )

    def _who_had(self, start: int, end: int) -> str:
        """Which named residual held ``start:end``, for a message about a lost range."""
        for rid, named in sorted(self.named.items()):
            try:
                a, b = range_bounds(named.entry.descriptor)
            except ValueError:
                continue
            if a < end and start < b:
                return f"(residual {rid!r}, {a}:{b}, named by write #{named.index})"
        return "(no split held them)"

    def residuals(self) -> None:
        if not self.saw_store:
            return
        final = self.history.final
        planned = None if final is None or final.expected is None else set(final.expected)
        # Where each split first shows up: a spec, a progress record, a gain.
        first: dict[str, tuple[int, str]] = {}
        for split, (index, _) in self.specs.items():
            first[split] = (index, "its spec was written")
        for split, facts in self.splits.items():
            if facts.landed and (split not in first or facts.landed[0].index < first[split][0]):
                first[split] = (facts.landed[0].index, "its progress record was written")
        for index, event in enumerate(self.history.events):
            if isinstance(event, Gained) and (
                event.split not in first or index < first[event.split][0]
            ):
                first[event.split] = (index, f"{event.actor} gained it")
        for split, (index, how) in sorted(first.items()):
            named = self.named.get(split)
            spec = self.specs.get(split)
            if named is None:
                parent = spec[1].parent if spec is not None else ""
                if parent or (planned is not None and split not in planned):
                    self.flag(
                        "residual-origin",
                        f"split {split!r} exists ({how}, event #{index}) but no won split "
                        "write of any record named it"
                        + (f" (its spec names parent {parent!r})" if parent else ""),
                    )
                continue
            if index < named.index:
                self.flag(
                    "residual-origin",
                    f"residual {split!r}: {how} (event #{index}) before the split write "
                    f"naming it landed (#{named.index})",
                )
            if spec is not None and (
                spec[1].descriptor != named.entry.descriptor or spec[1].parent != named.parent
            ):
                self.flag(
                    "residual-origin",
                    f"residual {split!r} was seeded as {spec[1].descriptor!r} off "
                    f"{spec[1].parent!r}, but write #{named.index} named it "
                    f"{named.entry.descriptor!r} off {named.parent!r}",
                )
        if final is not None and final.plan_final and final.terminated:
            listed = {s.split for s in final.splits}
            for rid, named in sorted(self.named.items()):
                if rid not in listed:
                    self.flag(
                        "residual-origin",
                        f"residual {rid!r} ({named.entry.descriptor!r}), named by "
                        f"{named.actor}'s split of {named.parent!r} (write #{named.index}), "
                        "was never seeded",
                    )
        for index, event in enumerate(self.history.events):
            if isinstance(event, Split):
                self._split_call(index, event)

    def _split_call(self, index: int, call: Split) -> None:
        what = (
            f"{call.actor}'s split of {call.split!r} at epoch {call.epoch} into "
            f"{call.primary!r} + {call.residual!r} (t={call.at:.3f})"
        )
        if call.outcome == "split":
            named = self.named.get(call.residual_id or "")
            if (
                named is None
                or named.index > index
                or named.actor != call.actor
                or named.parent != call.split
                or named.entry.descriptor != call.residual
            ):
                self.flag(
                    "residual-origin",
                    f"{what} returned residual {call.residual_id!r}, but no write of its naming "
                    "that residual had landed",
                )
        elif call.outcome == "fenced":
            for rid, named in sorted(self.named.items()):
                if (
                    named.actor == call.actor
                    and named.parent == call.split
                    and named.epoch == call.epoch
                    and named.entry.descriptor == call.residual
                    and named.primary == call.primary
                ):
                    self.flag(
                        "residual-origin",
                        f"{what} raised Fenced, yet its write landed (#{named.index}): residual "
                        f"{rid!r} runs",
                    )

    # -- who was told what ------------------------------------------------------------------

    def deliveries(self) -> None:
        leading: set[str] = set()
        # (actor, what) -> how many deliveries, and the first one's description
        found: dict[tuple[str, str], list[Any]] = {}
        classify = self.keys.classify
        for event in self.history.events:
            if isinstance(event, Leading):
                if event.leading:
                    leading.add(event.actor)
                else:
                    leading.discard(event.actor)
                continue
            if not isinstance(event, Delivered):
                continue
            actor = event.actor
            durable = event.keyspace == "durable"
            for key in event.keys:
                kind = classify(key)
                if kind is None:
                    continue
                what, name = kind
                # (A lease is a split key in the ephemeral keyspace, or on a store with per-key
                # TTLs a durable lease key: the leader watches whichever holds them.)
                if what is KeyKind.SPLIT and durable:
                    wrong = "a progress record (nobody watches them)"
                elif what in (KeyKind.SPLIT, KeyKind.LEASE):
                    if actor in leading:
                        continue
                    wrong = "a lease while not leading"
                elif what is KeyKind.SPEC:
                    wrong = "a spec (nobody watches them)"
                elif what is KeyKind.ASSIGN and name != instance_of(actor) and actor not in leading:
                    wrong = "another instance's assignment record while not leading"
                else:
                    continue
                seen = found.get((actor, wrong))
                if seen is None:
                    how = "in a watch snapshot" if event.snapshot else "by a live watch event"
                    found[(actor, wrong)] = [1, f"{key!r} {how} at t={event.at:.3f}"]
                else:
                    seen[0] += 1
        for (actor, wrong), (count, first) in found.items():
            self.flag(
                "foreign-delivery",
                f"{actor} was delivered {wrong}: {count} time(s), the first {first}",
            )

    # -- balance rounds ---------------------------------------------------------------------

    def balance_rounds(self) -> None:
        # split -> (when its last balance move was decided, that round's cooldown, by whom)
        last: dict[str, tuple[float, float, str]] = {}
        plan_key = self.keys.plan
        # The generation each actor's bump landed at, and the newest one that landed: a
        # leader whose generation was superseded is deposed, whether or not it knows yet.
        led: dict[str, int] = {}
        newest = 0
        for event in self.history.events:
            if isinstance(event, StoreWrite):
                if event.key == plan_key and event.outcome == "won" and event.value:
                    try:
                        generation = decode(PlanRecord, event.key, event.value).generation
                    except UnreadableRecord:
                        continue
                    if generation > newest:
                        newest = generation
                        led[event.actor] = generation
                continue
            if not isinstance(event, Balanced):
                continue
            total = math.fsum(m.load for m in event.moves)
            allowed = event.budget * event.job_load
            # the planner sums in another order: a few ulps of slack, never a split's worth
            slack = 1e-9 * max(1.0, event.job_load)
            if max(total, event.moved_load) > allowed + slack and not _one_step(event.moves):
                self.flag(
                    "balance-budget",
                    f"{event.actor}'s round {event.round} at t={event.at:.3f} moved "
                    f"{max(total, event.moved_load):.6g} of a job's load of "
                    f"{event.job_load:.6g}: more than its budget of {event.budget:g} "
                    f"({allowed:.6g})",
                )
            if event.actor in led and led[event.actor] < newest:
                # A deposed leader that has not heard yet: its moves are fenced (workers ignore
                # an assignment of an older generation), and double leadership is allowed to
                # cost balance (docs/protocol.md): its rounds neither break nor start cooldowns.
                continue
            for move in event.moves:
                before = last.get(move.split)
                if before is not None:
                    at, cooldown, actor = before
                    if event.at - at < cooldown - 1e-9:
                        self.flag(
                            "balance-cooldown",
                            f"{event.actor}'s round {event.round} at t={event.at:.3f} moved "
                            f"{move.split!r} ({move.source} -> {move.target}) "
                            f"{event.at - at:.3f} s after {actor}'s round moved it at "
                            f"t={at:.3f}: within its cooldown of {cooldown:g} s",
                        )
                last[move.split] = (event.at, event.cooldown, event.actor)

    def balance_settled(self) -> None:
        # actor -> (its leadership's last round, the loads of the round that settled it)
        spell: dict[str, tuple[int, dict[str, float] | None]] = {}
        for event in self.history.events:
            if not isinstance(event, Balanced):
                continue
            last, settled = spell.get(event.actor, (0, None))
            if event.round <= last:
                settled = None  # a new leadership: it remembers nothing of the last one's
            loads = _loads_before(event)
            holds = settled is not None and _holds(loads, settled, event.band)
            if holds and event.moves:
                assert settled is not None
                moved = ", ".join(f"{m.split!r} ({m.source} -> {m.target})" for m in event.moves)
                worst = max(abs(loads[n] - settled[n]) for n in loads)
                self.flag(
                    "balance-settled",
                    f"{event.actor}'s round {event.round} at t={event.at:.3f} moved {moved} "
                    f"after a round found every worker within the band, with loads still "
                    f"within half a band of those (at most {worst:.6g} away)",
                )
            if event.reason != "within band" or not event.loads:
                settled = None
            elif not holds:
                settled = loads
            spell[event.actor] = (event.round, settled)


def _holds(loads: dict[str, float], settled: dict[str, float], band: float) -> bool:
    """Whether ``loads`` are the same workers' within half a band of ``settled``'s."""
    if loads.keys() != settled.keys() or not loads:
        return False
    reach = band / 2 * math.fsum(loads.values()) / len(loads)
    # the planner sums in another order: a few ulps of slack
    slack = 1e-9 * max(1.0, reach)
    return all(abs(loads[n] - settled[n]) <= reach + slack for n in loads)


def _loads_before(event: Balanced) -> dict[str, float]:
    """Each worker's load as ``event``'s round found it: its loads with the moves undone."""
    before = dict(event.loads)
    for move in event.moves:
        if move.source in before and move.target in before:
            before[move.source] += move.load
            before[move.target] -= move.load
    return before


def _one_step(moves: tuple[BalanceMove, ...]) -> bool:
    """Whether ``moves`` are one step alone: one split one way, any lighter ones back (rule 8)."""
    if not moves:
        return False
    first = moves[0]
    pair = ((first.source, first.target), (first.target, first.source))
    return (
        all((m.source, m.target) in pair for m in moves)
        and sum(m.source == first.source for m in moves) == 1
    )


def check(history: History, *, skip: Iterable[str] = ()) -> list[Violation]:
    """Every violation of the invariants (:data:`INVARIANTS`) in ``history``; empty if clean.

    ``skip`` names invariants not to check (for histories that cannot support one, such as a
    run deliberately cut short).
    """
    unknown = set(skip) - set(INVARIANTS)
    if unknown:
        raise ValueError(f"unknown invariant(s) {sorted(unknown)}; known: {list(INVARIANTS)}")
    checker = _Checker(history)
    checker.store_writes()
    checker.gains()
    checker.acks()
    checker.ending()
    checker.revocations()
    checker.ranges()
    checker.residuals()
    checker.deliveries()
    checker.balance_rounds()
    checker.balance_settled()
    skipped = set(skip)
    order = {name: i for i, name in enumerate(INVARIANTS)}
    kept = [v for v in checker.violations if v.invariant not in skipped]
    return sorted(kept, key=lambda v: order[v.invariant])
