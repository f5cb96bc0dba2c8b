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
``foreign-delivery``
    No worker is delivered anything about a split it neither holds nor claims, the leader's
    ownership events aside (DESIGN §4b): no watch delivers a progress record or a spec to
    anyone (nobody watches them), a lease only to a worker that leads at that moment
    (:class:`~spate_testing.sim.history.Leading`), and another instance's assignment record
    to no follower. Read from :class:`~spate_testing.sim.history.Delivered` events (live
    events and snapshot entries; point reads and listings are not deliveries), which the
    machine engine's store model records; a history without them passes.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import attrs

from spate._core.records import KeyKind, Keys, ProgressRecord, Status, UnreadableRecord, decode
from spate_testing.sim.history import (
    Acked,
    Delivered,
    Final,
    FinalSplit,
    Gained,
    History,
    Leading,
    Revocations,
    StoreWrite,
    Verdict,
    instance_of,
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
    "foreign-delivery",
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

    def flag(self, invariant: str, detail: str) -> None:
        self.violations.append(Violation(invariant, detail))

    # -- the store's own history --------------------------------------------------------

    def store_writes(self) -> None:
        for index, event in enumerate(self.history.events):
            if not isinstance(event, StoreWrite) or event.keyspace != "durable":
                continue
            kind = self.keys.classify(event.key)
            if kind is None or kind[0] is not KeyKind.SPLIT:
                continue
            self.saw_store = True
            if event.outcome != "won":
                continue
            self._progress_write(index, kind[1], event)

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
            extra = sorted(set(listing) - set(final.expected))
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
    checker.deliveries()
    skipped = set(skip)
    order = {name: i for i, name in enumerate(INVARIANTS)}
    kept = [v for v in checker.violations if v.invariant not in skipped]
    return sorted(kept, key=lambda v: order[v.invariant])
