"""Recording a run into a :class:`~spate_testing.sim._history.History`.

Three taps, one per side of the protocol:

- :class:`RecordingStore` wraps a store and records every write with its true outcome. Put it
  *beneath* any fault injection (``FaultyStore(RecordingStore(inner))``): then a write whose
  reply is lost still shows as landed, and a frozen worker's write shows when it really lands.
- :func:`recorded_handler` wraps a ``run_worker`` handler and records what the worker was
  told: the gain (split and epoch), every acknowledged commit, every split call's end, and
  how the handler ended.
- :class:`RecordingMetrics` is a :class:`~spate.MetricsHooks` that counts what the
  coordinator reports (revocation outcomes, acquisitions, losses), for the checker's
  revocation identity, and records the leader's balance rounds
  (:class:`~spate_testing.sim._history.Balanced`) as its ``balance`` hook hears them.

:class:`Recorder` bundles the three for one history, which is how a test records its own
fleet.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, cast

import trio

from spate import (
    AllComplete,
    BalanceReport,
    Config,
    ConfigError,
    Fenced,
    Gauges,
    MetricsHooks,
    Stalled,
    StoreError,
    ValueTooLarge,
)
from spate._core.leader.balance_rounds import balance_config
from spate._core.records import Finality, Keys, PlanRecord, ProgressRecord, decode
from spate._metrics import AcquireReason, LossReason, RevocationOutcome
from spate.store import (
    Capabilities,
    Conflict,
    Entry,
    Keyspace,
    Remove,
    Revision,
    Session,
    Store,
    Swap,
    Won,
    Write,
    WriteResult,
    batched,
    max_batch_of,
)
from spate_testing.sim._history import (
    Acked,
    Action,
    Balanced,
    BalanceMove,
    Final,
    FinalSplit,
    Gained,
    HandlerEnded,
    HandlerHow,
    History,
    Revocations,
    Split,
    SplitOutcome,
    StoreWrite,
    Verdict,
    WriteOp,
)

if TYPE_CHECKING:
    from spate import SplitHandle
    from spate_testing.sim._handlers import SplitHooks

__all__ = [
    "RecordedSplit",
    "Recorder",
    "RecordingMetrics",
    "RecordingStore",
    "final_listing",
    "listing_of",
    "recorded_handler",
]

HandlerFn = Callable[["SplitHandle"], Awaitable[None]]


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # outside a Trio run (a final snapshot taken afterwards)
        return float("nan")


class RecordingStore:
    """Delegates to ``inner`` and appends a :class:`StoreWrite` for every write it makes.

    Reads and watches pass through unrecorded. ``actor`` names who writes through this
    wrapper (one wrapper per worker incarnation). The wrapper never enters or closes ``inner``.
    """

    def __init__(self, inner: Store, history: History, actor: str) -> None:
        self.inner = inner
        self.history = history
        self.actor = actor

    def __repr__(self) -> str:
        return f"RecordingStore({self.actor!r}, {self.inner!r})"

    @property
    def capabilities(self) -> Capabilities:
        """The inner store's."""
        return self.inner.capabilities

    @property
    def ephemeral_ttl(self) -> float:
        """The inner store's TTL."""
        return self.inner.ephemeral_ttl

    async def __aenter__(self) -> RecordingStore:
        """Nothing to open: the inner store is managed by whoever made it."""
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Nothing to close."""
        await trio.lowlevel.checkpoint()

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        """Delegate."""
        return await self.inner.get(keyspace, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        """Delegate."""
        return await self.inner.list(keyspace, prefix)

    def list_pages(self, keyspace: Keyspace, prefix: str, *, page_size: int) -> Any:
        """Delegate."""
        return self.inner.list_pages(keyspace, prefix, page_size=page_size)

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        """Delegate."""
        return self.inner.watch(keyspace, prefix, exact=exact)

    def session(self) -> AbstractAsyncContextManager[Session]:
        """Delegate."""
        return self.inner.session()

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        """Delegate and record."""
        named = {} if session is None else {"session": session}
        return await self._write(
            "create", keyspace, key, None, value, self.inner.create(keyspace, key, value, **named)
        )

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        """Delegate and record."""
        named = {} if session is None else {"session": session}
        return await self._write(
            "update",
            keyspace,
            key,
            expected,
            value,
            self.inner.update(keyspace, key, value, expected, **named),
        )

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        """Delegate and record."""
        return await self._write(
            "delete", keyspace, key, expected, None, self.inner.delete(keyspace, key, expected)
        )

    @property
    def max_batch(self) -> int:
        """The inner store's (1 when it cannot send swaps together: nothing is grouped)."""
        return max_batch_of(self.inner)

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        """Delegate and record each write as the create, update or delete it is."""
        try:
            results = await batched(self.inner).write_many(writes, session=session)
        except BaseException:
            for write in writes:  # any of them may have landed
                op, expected, _ = _described(write)
                self._record(op, write.keyspace, write.key, expected, "error", None, None)
            raise
        for write, result in zip(writes, results, strict=True):
            op, expected, value = _described(write)
            if isinstance(result, Won):
                self._record(op, write.keyspace, write.key, expected, "won", result.revision, value)
            elif isinstance(result, Conflict):
                self._record(op, write.keyspace, write.key, expected, "lost", None, None)
        return results

    async def _write(
        self,
        op: WriteOp,
        keyspace: Keyspace,
        key: str,
        expected: Revision | None,
        value: bytes | None,
        call: Awaitable[WriteResult],
    ) -> WriteResult:
        try:
            result = await call
        except BaseException:
            # A call that raised (or was cancelled mid-flight) may have landed: indeterminate.
            self._record(op, keyspace, key, expected, "error", None, None)
            raise
        # Recorded in the same scheduling step as the reply, so history order is store order.
        if isinstance(result, Won):
            self._record(op, keyspace, key, expected, "won", result.revision, value)
        else:
            assert isinstance(result, Conflict)
            self._record(op, keyspace, key, expected, "lost", None, None)
        return result

    def _record(
        self,
        op: WriteOp,
        keyspace: Keyspace,
        key: str,
        expected: Revision | None,
        outcome: Any,
        revision: Revision | None,
        value: bytes | None,
    ) -> None:
        self.history.append(
            StoreWrite(
                at=_now(),
                actor=self.actor,
                op=op,
                keyspace=keyspace.value,
                key=key,
                expected=expected,
                outcome=outcome,
                revision=revision,
                value=None if value is None else bytes(value),
            )
        )


class RecordingMetrics(MetricsHooks):
    """Counts the coordinator's outcomes for one actor (revocations, acquisitions, losses).

    Given a ``history`` and the actor's ``config``, it also records each balance round the
    actor runs while it leads, stamped by ``clock`` (default: the Trio run's clock).
    """

    def __init__(
        self,
        actor: str,
        *,
        history: History | None = None,
        config: Config | None = None,
        clock: Callable[[], float] = _now,
    ) -> None:
        self.actor = actor
        self.history = history
        self.clock = clock
        balance = None if config is None else balance_config(config)
        self.budget = 0.0 if balance is None else balance.max_moved_load
        self.band = 0.0 if balance is None else balance.load_band
        self.cooldown = (
            0.0 if balance is None else balance.cooldown_rounds * balance.balance_interval
        )
        self.revocations: collections.Counter[str] = collections.Counter()
        self.acquisitions: collections.Counter[str] = collections.Counter()
        self.losses: collections.Counter[str] = collections.Counter()
        # The final counts alone could hide a broken identity (an outcome counted before its
        # request, a revocation never settled), so the first live inconsistency is kept.
        self.problem: str | None = None

    @property
    def in_flight(self) -> int:
        """Revocations requested and not yet drained, forced or cancelled."""
        r = self.revocations
        return r["requested"] - r["drained"] - r["forced"] - r["cancelled"]

    def revocation(self, outcome: RevocationOutcome) -> None:
        """Count one revocation outcome."""
        self.revocations[outcome] += 1
        if self.in_flight < 0 and self.problem is None:
            self.problem = f"{outcome} #{self.revocations[outcome]} was counted before its request"

    def gauges(self, levels: Gauges) -> None:
        """Compare revocations in flight with the drains the worker reports."""
        # A revocation in flight is a drain in progress; the gauge also counts drains whose
        # revocation was cancelled, so it may exceed the in-flight count but never trail it.
        if self.in_flight > levels.draining and self.problem is None:
            self.problem = (
                f"{self.in_flight} revocation(s) in flight but only {levels.draining} drain(s) "
                "reported"
            )

    def balance(self, report: BalanceReport | None) -> None:
        """Record one balance round (``None``, the end of a leadership, is the Leading event's)."""
        if report is None or self.history is None:
            return
        self.history.append(
            Balanced(
                at=self.clock(),
                actor=self.actor,
                round=report.round,
                reason=report.reason,
                moves=tuple(
                    BalanceMove(split=split, source=source, target=target, load=load)
                    for split, source, target, load in report.moves
                ),
                moved_load=report.moved_load,
                job_load=report.job_load,
                budget=self.budget,
                cooldown=self.cooldown,
                loads=report.worker_loads,
                band=self.band,
            )
        )

    def acquired(self, reason: AcquireReason) -> None:
        """Count one acquisition."""
        self.acquisitions[reason] += 1

    def lost(self, reason: LossReason) -> None:
        """Count one loss."""
        self.losses[reason] += 1

    def snapshot(self, *, settled: bool, at: float | None = None) -> Revocations:
        """The revocation counters as a history event (``settled``: the coordinator closed).

        ``at`` is the time to stamp it with (default: the Trio run's clock).
        """
        return Revocations(
            at=_now() if at is None else at,
            actor=self.actor,
            requested=self.revocations["requested"],
            drained=self.revocations["drained"],
            forced=self.revocations["forced"],
            cancelled=self.revocations["cancelled"],
            settled=settled,
            problem=self.problem,
        )


class RecordedSplit:
    """A split handle that records acknowledged commits and split calls.

    Everything else is the real handle's: the handler receives this in place of the
    :class:`~spate.SplitHandle`, and attribute access is forwarded, so ``split.id``,
    ``split.progress``, ``split.revoke_requested``... behave as usual. ``hooks``, if given,
    hear of each split call (the simulator's chaos strikes around them).
    """

    def __init__(
        self,
        inner: SplitHandle,
        history: History,
        actor: str,
        hooks: SplitHooks | None = None,
    ) -> None:
        self._inner = inner
        self._history = history
        self._actor = actor
        self._hooks = hooks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit(
        self, watermark: int | None, *, state: bytes = b"", completed: bool = False
    ) -> None:
        """Commit through the real handle; record the acknowledgement once it returns."""
        await self._inner.commit(watermark, state=state, completed=completed)
        self._history.append(
            Acked(
                at=_now(),
                actor=self._actor,
                split=self._inner.id,
                epoch=self._inner.epoch,
                watermark=watermark,
                completed=completed,
            )
        )

    async def split(self, primary: bytes, residual: bytes, *, weight: int | None = None) -> str:
        """Split through the real handle; record how the call ended (split, fenced, abandoned)."""
        inner = self._inner
        asked = inner.split_requested.is_set()
        epoch = inner.epoch
        how: SplitOutcome = "abandoned"
        rid: str | None = None
        if self._hooks is not None:
            if asked:
                # (This engine hears of a request when its handler acts on it: still
                # outstanding, since the leader has not read the split yet.)
                self._hooks.split_asked(self._actor)
            self._hooks.splitting(self._actor)
        try:
            rid = await inner.split(primary, residual, weight=weight)
            how = "split"
        except Fenced:
            how = "fenced"
            raise
        except (ConfigError, ValueTooLarge) as exc:
            # Refused arguments are the handler's own mistake: a finding, as a crash is.
            self._history.append(
                Action(at=_now(), actor=self._actor, what="crash", detail=f"split refused: {exc}")
            )
            raise
        finally:
            # (Any other exit, a cancellation above all, leaves the outcome unknown.)
            self._history.append(
                Split(
                    at=_now(),
                    actor=self._actor,
                    split=inner.id,
                    epoch=epoch,
                    primary=primary,
                    residual=residual,
                    outcome=how,
                    residual_id=rid,
                    asked=asked,
                )
            )
        if self._hooks is not None:
            self._hooks.split_done(self._actor)
            await trio.lowlevel.checkpoint()  # (a kill there cancels the handler here)
        return rid


def recorded_handler(
    handler: HandlerFn, history: History, actor: str, hooks: SplitHooks | None = None
) -> HandlerFn:
    """Wrap a ``run_worker`` handler so gains, commits, split calls and endings are recorded.

    ``hooks``, if given, hear of each split call.
    """

    async def handle(split: SplitHandle) -> None:
        history.append(
            Gained(
                at=_now(),
                actor=actor,
                split=split.id,
                epoch=split.epoch,
                watermark=split.progress.watermark,
            )
        )
        how: HandlerHow = "returned"
        try:
            await handler(cast("SplitHandle", RecordedSplit(split, history, actor, hooks)))
            if split.completed:
                how = "completed"
        except Fenced:
            how = "fenced"
            raise
        except trio.Cancelled:
            how = "cancelled"
            raise
        except Exception:
            how = "raised"
            raise
        finally:
            history.append(
                HandlerEnded(at=_now(), actor=actor, split=split.id, epoch=split.epoch, how=how)
            )

    return handle


async def final_listing(
    store: Store,
    job: str,
    *,
    expected: Iterable[str] | None = None,
    terminated: bool = True,
    bound: float = 0.0,
) -> Final:
    """Read ``job``'s final state from ``store``: the event that ends a history.

    ``expected`` names the split ids the workload planned (the checker then holds the listing
    to exactly those); ``terminated`` says whether the job reached its verdict in time, and
    ``bound`` what that time was (for the message).
    """
    keys = Keys(job)
    plan_entry = await store.get(Keyspace.DURABLE, keys.plan)
    entries = await store.list(Keyspace.DURABLE, keys.split_prefix)
    return listing_of(
        job, plan_entry, entries, at=_now(), expected=expected, terminated=terminated, bound=bound
    )


def listing_of(
    job: str,
    plan_entry: Entry | None,
    entries: Iterable[Entry],
    *,
    at: float,
    expected: Iterable[str] | None = None,
    terminated: bool = True,
    bound: float = 0.0,
) -> Final:
    """The :class:`Final` of ``job`` from its plan record and its progress records, as read."""
    keys = Keys(job)
    plan_final = False
    if plan_entry is not None:
        plan = decode(PlanRecord, plan_entry.key, plan_entry.value)
        plan_final = plan.finality is Finality.FINAL
    splits = []
    for entry in entries:
        split = entry.key[len(keys.split_prefix) :]
        record = decode(ProgressRecord, entry.key, entry.value, split=split)
        splits.append(
            FinalSplit(
                split=split,
                status=record.status.value,
                epoch=record.epoch,
                watermark=record.watermark,
                completed=record.completed,
                owner=record.owner,
            )
        )
    return Final(
        at=at,
        plan_final=plan_final,
        expected=None if expected is None else tuple(expected),
        splits=tuple(splits),
        terminated=terminated,
        bound=bound,
    )


class Recorder:
    """The recording taps of one history: store, handler and metrics wrappers per actor."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.metrics_by_actor: dict[str, RecordingMetrics] = {}

    def store(self, inner: Store, actor: str) -> RecordingStore:
        """A store wrapper recording ``actor``'s writes."""
        return RecordingStore(inner, self.history, actor)

    def handler(self, handler: HandlerFn, actor: str, hooks: SplitHooks | None = None) -> HandlerFn:
        """``handler`` wrapped to record ``actor``'s gains, commits, split calls and endings.

        ``hooks`` hear of each split call.
        """
        return recorded_handler(handler, self.history, actor, hooks)

    def metrics(self, actor: str, config: Config | None = None) -> RecordingMetrics:
        """The metrics hooks to give ``actor``'s coordinator.

        With ``config`` (the actor's) they also record its balance rounds into the history.
        """
        hooks = self.metrics_by_actor.get(actor)
        if hooks is None:
            hooks = self.metrics_by_actor[actor] = RecordingMetrics(
                actor, history=None if config is None else self.history, config=config
            )
        return hooks

    def action(self, actor: str, what: str, detail: str = "") -> None:
        """Record something done to ``actor`` (a kill, a freeze, ...)."""
        self.history.append(Action(at=_now(), actor=actor, what=what, detail=detail))

    def verdict(self, actor: str, verdict: AllComplete | Stalled) -> None:
        """Record the verdict ``actor``'s ``run_worker`` returned."""
        stalled = verdict if isinstance(verdict, Stalled) else None
        self.history.append(
            Verdict(
                at=_now(),
                actor=actor,
                all_complete=stalled is None,
                completed=None if stalled is None else stalled.completed,
                quarantined=None if stalled is None else stalled.quarantined,
            )
        )


def _described(write: Write) -> tuple[WriteOp, Revision | None, bytes | None]:
    """A write of a group as the single write it stands for: (op, expected, value)."""
    if isinstance(write, Remove):
        return write.kind, write.expected, None
    return write.kind, write.expected if isinstance(write, Swap) else None, write.value
