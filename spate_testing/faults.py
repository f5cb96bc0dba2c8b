"""A fault-injecting wrapper around any store.

:class:`FaultyStore` implements the store contract by delegating to another store and
injecting the trouble real fleets meet. Some faults are switched by the test (``freeze``,
``partition``); the rest are drawn per call from a seeded :class:`random.Random`, so a run is
reproducible from its seed. Every injected fault is counted in :attr:`FaultyStore.injected`.

The faults, and the real-world event each one stands for:

``freeze()`` / ``thaw()``
    A stopped process (SIGSTOP, a GC pause, a VM migration): calls block before reaching the
    store and proceed, in order, after the thaw — a write sent before the pause lands after
    it, as a zombie's would. The wait ignores the caller's cancellation (a stopped process
    cannot time out its own requests), so those late writes really reach the store.
``partition()`` / ``heal()``
    This client is cut off while others are not: calls raise StoreUnavailable without
    reaching the store, and open watches break.
``latency``
    A slow store; may exceed the lease.
``unavailable_rate``
    A call fails with StoreUnavailable before it reaches the store.
``maybe_landed_rate``
    A write lands but its reply is lost: the caller sees StoreUnavailable.
``duplicate_rate`` / ``watch_drop_rate``
    A watch delivers an event twice, or breaks mid-stream (the caller must re-watch).
``silent_expiry``
    Expiries do not reach watchers (NATS before 2.11): Delete events for ephemeral keys that
    this client did not delete itself are dropped. Capabilities say so honestly.
``spike_rate`` / ``spike_latency``
    Now and then a call stalls for ``spike_latency`` seconds before it reaches the store (a
    slow disk, a leader election): set it beyond the lease to starve renewals.
``late_rate`` / ``late_delay``
    A write times out for its caller (StoreUnavailable at once) yet lands ``late_delay``
    seconds later, after the caller has moved on: the request was still in the network.
    Needs a nursery to run in (:meth:`FaultyStore.attach`); without one it never fires.
``replay_rate``
    After a live event, a watch re-delivers the last few live events again (a resumed watch
    replaying from an older revision): stale echoes the caller must recognise by revision.
"""

from __future__ import annotations

import builtins
import collections
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio

from spate import StoreError, StoreUnavailable
from spate.store import (
    Capabilities,
    Conflict,
    Delete,
    Entry,
    Keyspace,
    Remove,
    Revision,
    Session,
    SnapshotDone,
    Store,
    WatchEvent,
    Won,
    Write,
    WriteResult,
    batched,
    max_batch_of,
)

__all__ = ["FaultRates", "FaultyStore"]

_R = TypeVar("_R")


@attrs.frozen
class FaultRates:
    """Per-call probabilities of the random faults (each in [0, 1])."""

    unavailable_rate: float = 0.0
    maybe_landed_rate: float = 0.0
    duplicate_rate: float = 0.0
    watch_drop_rate: float = 0.0
    latency: float = 0.0
    """Seconds added before every call reaches the store."""
    silent_expiry: bool = False
    spike_rate: float = 0.0
    spike_latency: float = 0.0
    """Seconds a latency spike stalls a call."""
    late_rate: float = 0.0
    late_delay: float = 0.0
    """Seconds after its caller gave up that a late write lands."""
    replay_rate: float = 0.0

    def __attrs_post_init__(self) -> None:
        for name in (
            "unavailable_rate",
            "maybe_landed_rate",
            "duplicate_rate",
            "watch_drop_rate",
            "spike_rate",
            "late_rate",
            "replay_rate",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], not {value!r}")
        for name in ("latency", "spike_latency", "late_delay"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name} must be >= 0 seconds, not {value!r}")


def _named(session: Session | None) -> dict[str, Session]:
    return {} if session is None else {"session": session}


class FaultyStore:
    """Delegates to ``inner`` and injects faults; see the module docstring for the list.

    ``inner`` is not entered or closed by this wrapper when ``owns_inner`` is False (the
    default), so many wrappers can share one store (one wrapper per simulated process).
    """

    def __init__(
        self,
        inner: Store,
        *,
        rng: random.Random | None = None,
        rates: FaultRates | None = None,
        owns_inner: bool = False,
        name: str = "",
    ) -> None:
        self.inner = inner
        self.rng = rng if rng is not None else random.Random(0)
        self.rates = rates if rates is not None else FaultRates()
        self.name = name
        self._owns_inner = owns_inner
        self._thawed = trio.Event()
        self._thawed.set()
        self._partition_generation = 0
        self._partitioned = False
        # (key, revision) of ephemeral deletions this client made itself: their Delete events
        # are real, not expiry, so silent_expiry must not drop them.
        self._own_deletes: set[tuple[str, Revision]] = set()
        self.injected: collections.Counter[str] = collections.Counter()
        """How many faults of each kind were injected."""
        self._nursery: trio.Nursery | None = None
        self.late_writes: collections.Counter[str] = collections.Counter()
        """Writes that waited out a freeze, by outcome: ``refused`` (the condition no longer
        held: a zombie's stale write, fenced by the store) or ``landed``."""

    def __repr__(self) -> str:
        return f"FaultyStore({self.name or self.inner!r})"

    # -- switches ----------------------------------------------------------------------

    def freeze(self) -> None:
        """Block every call (and watch delivery) until :meth:`thaw`."""
        if self._thawed.is_set():
            self._thawed = trio.Event()
            self.injected["freeze"] += 1

    def thaw(self) -> None:
        """Let frozen calls proceed, in the order they were made."""
        self._thawed.set()

    @property
    def frozen(self) -> bool:
        """Whether calls are currently blocked."""
        return not self._thawed.is_set()

    def partition(self) -> None:
        """Cut this client off: calls raise StoreUnavailable and open watches break."""
        if not self._partitioned:
            self._partitioned = True
            self._partition_generation += 1
            self.injected["partition"] += 1

    def heal(self) -> None:
        """End the partition."""
        self._partitioned = False

    def attach(self, nursery: trio.Nursery) -> None:
        """Run late writes (``late_rate``) in ``nursery``; it must outlive this wrapper's use."""
        self._nursery = nursery

    # -- the contract -------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        """The inner store's, with watch expiry switched off under ``silent_expiry``."""
        caps = self.inner.capabilities
        if self.rates.silent_expiry:
            return attrs.evolve(caps, expiry_reaches_watchers=False)
        return caps

    @property
    def ephemeral_ttl(self) -> float:
        """The inner store's TTL."""
        return self.inner.ephemeral_ttl

    async def __aenter__(self) -> FaultyStore:
        """Enter the inner store too when this wrapper owns it."""
        if self._owns_inner:
            await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the inner store when this wrapper owns it."""
        if self._owns_inner:
            await self.inner.__aexit__(*exc_info)

    def _roll(self, rate: float) -> bool:
        return rate > 0.0 and self.rng.random() < rate

    async def _gate(self, what: str) -> bool:
        """Apply latency, freeze and partition; True if the call waited out a freeze."""
        if self.rates.latency > 0:
            await trio.sleep(self.rates.latency)
        if self._roll(self.rates.spike_rate):
            self.injected["latency_spike"] += 1
            await trio.sleep(self.rates.spike_latency)
        waited = not self._thawed.is_set()
        if waited:
            # A stopped process cannot time out its own requests: they reach the store when
            # it wakes, whatever deadline the caller set. That late write is what fencing is for.
            with trio.CancelScope(shield=True):
                await self._thawed.wait()
        if self._partitioned:
            raise StoreUnavailable(f"{self!r}: partitioned from the store during {what}")
        if self._roll(self.rates.unavailable_rate):
            self.injected["unavailable"] += 1
            raise StoreUnavailable(f"{self!r}: injected unavailability during {what}")
        return waited

    def _late(self, waited: bool, result: WriteResult) -> None:
        if waited:
            self.late_writes["refused" if isinstance(result, Conflict) else "landed"] += 1

    def _maybe_lose_reply(self, what: str) -> None:
        if self._roll(self.rates.maybe_landed_rate):
            self.injected["maybe_landed"] += 1
            raise StoreUnavailable(f"{self!r}: injected lost reply after {what} (it landed)")

    async def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        """Delegate after the gate."""
        await self._gate("get")
        return await self.inner.get(keyspace, key)

    async def list(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        """Delegate after the gate."""
        await self._gate("list")
        return await self.inner.list(keyspace, prefix)

    @asynccontextmanager
    async def list_pages(
        self, keyspace: Keyspace, prefix: str, *, page_size: int
    ) -> AsyncIterator[AsyncIterator[builtins.list[Entry]]]:
        """The inner listing, each page after the gate (a partition breaks it mid-way)."""
        await self._gate("list")
        async with self.inner.list_pages(keyspace, prefix, page_size=page_size) as pages:

            async def gated() -> AsyncGenerator[list[Entry], None]:
                async for page in pages:
                    await self._gate("list")
                    yield page

            async with aclosing(gated()) as gated_pages:
                yield gated_pages

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        """The inner store's session, opened after the gate (a partition refuses it)."""
        await self._gate("session")
        async with self.inner.session() as session:
            yield session

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        """Delegate after the gate; the reply may be lost, or the write land late."""
        return await self._write(
            "create",
            keyspace,
            key,
            lambda s: self.inner.create(keyspace, key, value, **_named(s)),
            session,
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
        """Delegate after the gate; the reply may be lost, or the write land late."""
        return await self._write(
            "update",
            keyspace,
            key,
            lambda s: self.inner.update(keyspace, key, value, expected, **_named(s)),
            session,
        )

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        """Delegate after the gate; the reply may be lost, or the write land late."""
        return await self._write(
            "delete", keyspace, key, lambda _: self.inner.delete(keyspace, key, expected), None
        )

    @property
    def max_batch(self) -> int:
        """The inner store's (1 when it cannot send writes together: nothing is grouped)."""
        return max_batch_of(self.inner)

    async def write_many(
        self, writes: Sequence[Write], *, session: Session | None = None
    ) -> Sequence[WriteResult | StoreError]:
        """Delegate after the gate, as one write: the group may land late, or lose its reply."""
        inner = batched(self.inner)

        def settle(results: Sequence[WriteResult | StoreError], waited: bool) -> None:
            for write, result in zip(writes, results, strict=True):
                if isinstance(result, Won | Conflict):
                    if isinstance(write, Remove):
                        self._note_delete("delete", write.keyspace, write.key, result)
                    self._late(waited, result)

        return await self._faulty(
            "write_many", lambda named: inner.write_many(writes, session=named), session, settle
        )

    async def _write(
        self,
        what: str,
        keyspace: Keyspace,
        key: str,
        named: Callable[[Session | None], Awaitable[WriteResult]],
        session: Session | None,
    ) -> WriteResult:
        def settle(result: WriteResult, waited: bool) -> None:
            self._note_delete(what, keyspace, key, result)
            self._late(waited, result)

        return await self._faulty(what, named, session, settle)

    async def _faulty(
        self,
        what: str,
        named: Callable[[Session | None], Awaitable[_R]],
        session: Session | None,
        settle: Callable[[_R, bool], None],
    ) -> _R:
        """One write (or group) through the faults; ``settle`` gets its result and a flag.

        The flag says whether the call waited out a freeze; a late landing settles as not.
        """
        waited = await self._gate(what)
        if self._nursery is not None and self._roll(self.rates.late_rate):
            self.injected["late_landing"] += 1
            # The request left the process while its session was open; it lands whenever
            # it arrives, even after that session ended (a per-key store cannot tell).
            self._nursery.start_soon(self._land_late, lambda: named(None), settle)
            raise StoreUnavailable(
                f"{self!r}: injected timeout during {what} (the write lands "
                f"{self.rates.late_delay:g} s later)"
            )
        if waited:
            # The request left before the stop; the caller's deadline cannot recall it.
            with trio.CancelScope(shield=True):
                result = await named(session)
        else:
            result = await named(session)
        settle(result, waited)
        self._maybe_lose_reply(what)
        return result

    async def _land_late(
        self, call: Callable[[], Awaitable[_R]], settle: Callable[[_R, bool], None]
    ) -> None:
        await trio.sleep(self.rates.late_delay)
        try:
            result = await call()
        except StoreError:
            return  # the store closed (or failed) before the late write arrived
        settle(result, False)

    def _note_delete(self, what: str, keyspace: Keyspace, key: str, result: WriteResult) -> None:
        if what == "delete" and keyspace is Keyspace.EPHEMERAL and isinstance(result, Won):
            self._own_deletes.add((key, result.revision))

    def watch(self, keyspace: Keyspace, prefix: str, *, exact: bool = False) -> Any:
        """The inner watch, with drops, duplicates, silent expiry, freeze and partition."""
        return self._watch(keyspace, prefix, exact)

    @asynccontextmanager
    async def _watch(
        self, keyspace: Keyspace, prefix: str, exact: bool
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        await self._gate("watch")
        async with (
            self.inner.watch(keyspace, prefix, exact=exact) as events,
            aclosing(self._filter(keyspace, events, self._partition_generation)) as filtered,
        ):
            yield filtered

    async def _filter(
        self, keyspace: Keyspace, events: AsyncIterator[WatchEvent], generation: int
    ) -> AsyncGenerator[WatchEvent, None]:
        recent: collections.deque[WatchEvent] = collections.deque(maxlen=4)
        live = False
        async for event in events:
            await self._thawed.wait()
            if self._partitioned or self._partition_generation != generation:
                raise StoreUnavailable(f"{self!r}: watch broken by a partition")
            if self._roll(self.rates.watch_drop_rate):
                self.injected["watch_drop"] += 1
                raise StoreUnavailable(f"{self!r}: injected watch break")
            if (
                isinstance(event, Delete)
                and keyspace is Keyspace.EPHEMERAL
                and self.rates.silent_expiry
            ) and (event.key, event.revision) not in self._own_deletes:
                self.injected["silent_expiry"] += 1
                continue
            yield event
            if isinstance(event, SnapshotDone):
                live = True
                continue
            if self._roll(self.rates.duplicate_rate):
                self.injected["duplicate"] += 1
                yield event
            if live:
                recent.append(event)
                if self._roll(self.rates.replay_rate):
                    self.injected["replay"] += 1
                    for old in list(recent)[-self.rng.randint(1, len(recent)) :]:
                        yield old
