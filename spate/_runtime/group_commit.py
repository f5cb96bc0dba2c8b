"""Group commit: writes that queue while others are in flight go out together.

A store that can carry several conditional writes in one round trip
(:class:`~spate.store.BatchedWrites`) pays its cost per request (a round trip, a consensus
entry, an HTTP exchange) once per group instead of once per write. The rule:

* A write that finds nothing in flight and nothing queued goes out at once, on its own: a
  lone committer never waits for company.
* Otherwise it joins the queue, and one sender task takes everything queued (up to the
  store's ``max_batch``) in one call. The sender runs only once the tasks made runnable with
  it have had their turn, so a burst (every split handed back at once) leaves as one group
  behind the write that went first, about one round trip in all.

Each write keeps its own outcome: Won, Lost, or the store's refusal of it alone. A group whose
outcome is unknown (the store could not be reached, or the call ran out of time) reports that
to every member, each of which then treats its write as it treats any unknown outcome. A
member cancelled while still queued leaves the queue, unwritten; one cancelled while its group
is in flight may have landed, as any write cancelled in flight.

Every write is grouped but the ephemeral updates: those are renewals, which must never wait
behind other writes. So a hand-over's lease deletes go out together, and so do the lease
creates of the claims that follow it. A group's ephemeral writes share one session (a
coordinator has one at a time; a write naming a newer one waits for the next group).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Awaitable, Sequence
from contextlib import AbstractContextManager

import attrs
import outcome
import trio
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext

from spate._errors import StoreError, StoreUnavailable
from spate._quote import seconds
from spate._store import (
    BatchedWrites,
    Create,
    Keyspace,
    Remove,
    Revision,
    Session,
    Store,
    Swap,
    Write,
    WriteResult,
    max_batch_of,
)
from spate.telemetry._provider import tracing

logger = logging.getLogger("spate.group_commit")
_tracer = trace.get_tracer("spate")

__all__ = ["GroupCommit", "grouping"]


@attrs.define(eq=False)
class _Waiter:
    write: Write
    session: Session | None
    """The session its ephemeral write names (None: durable, or the client's own)."""
    span: SpanContext | None = None
    """The member's write span (its fenced write's), when tracing: the group links to it."""
    done: trio.Event = attrs.field(factory=trio.Event)
    result: outcome.Outcome[WriteResult] | None = None
    abandoned: bool = False
    """Its caller stopped waiting (cancelled, or out of time) while its group was in flight."""


class GroupCommit:
    """The writes of one coordinator's runtime: grouped, but for renewals (passed on).

    ``store`` is both the store and its batched form; ``timeout`` bounds each group's call
    (a member's own deadline may end its wait sooner). Call :meth:`run` in a task of the
    coordinator's nursery: it is the sender.
    """

    def __init__(self, store: BatchedWrites, plain: Store, *, timeout: float) -> None:
        self._batched = store
        self._store = plain
        self._timeout = timeout
        self._limit = max(1, store.max_batch)
        self._queue: list[_Waiter] = []
        self._in_flight = 0
        self._wake = trio.Event()
        self._stopped = False
        self.groups = 0
        """Groups sent so far (each one call of ``write_many``)."""
        self.grouped = 0
        """Writes sent in those groups."""

    # -- the writes write_spans.write performs -----------------------------------------------------

    async def create(
        self, keyspace: Keyspace, key: str, value: bytes, *, session: Session | None = None
    ) -> WriteResult:
        """A create: grouped with others queued, or sent at once."""
        if self._alone():
            return await self._direct(self._store.create(keyspace, key, value, session=session))
        return await self._queued(Create(key, value, keyspace), session)

    async def delete(
        self, keyspace: Keyspace, key: str, expected: Revision | None = None
    ) -> WriteResult:
        """A delete: grouped with others queued, or sent at once."""
        if self._alone():
            return await self._direct(self._store.delete(keyspace, key, expected))
        return await self._queued(Remove(key, expected, keyspace), None)

    async def update(
        self,
        keyspace: Keyspace,
        key: str,
        value: bytes,
        expected: Revision,
        *,
        session: Session | None = None,
    ) -> WriteResult:
        """A compare-and-swap: a durable one is grouped with others queued, or goes at once.

        An ephemeral one (a renewal) is always passed on at once.
        """
        if keyspace is not Keyspace.DURABLE:
            return await self._store.update(keyspace, key, value, expected, session=session)
        if self._alone():
            # Written out rather than through _direct: every commit comes this way.
            self._in_flight += 1
            try:
                return await self._store.update(keyspace, key, value, expected)
            finally:
                self._in_flight -= 1
        return await self._queued(Swap(key, value, expected), None)

    def _alone(self) -> bool:
        """Whether a write goes at once, on its own: nothing in flight or queued (or stopped)."""
        return self._stopped or (not self._queue and not self._in_flight)

    async def _direct(self, call: Awaitable[WriteResult]) -> WriteResult:
        self._in_flight += 1
        try:
            return await call
        finally:
            self._in_flight -= 1

    async def _queued(self, write: Write, session: Session | None) -> WriteResult:
        waiter = _Waiter(write, session if write.keyspace is Keyspace.EPHEMERAL else None)
        if tracing():
            waiter.span = trace.get_current_span().get_span_context()
        self._queue.append(waiter)
        self._wake.set()
        try:
            await waiter.done.wait()
        except BaseException:
            if waiter.result is None:
                if waiter in self._queue:
                    self._queue.remove(waiter)  # never sent: nothing was written
                else:
                    waiter.abandoned = True  # in flight: never sent again on its behalf
            raise
        assert waiter.result is not None
        return waiter.result.unwrap()

    # -- the sender ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Send the queued groups, one at a time, until cancelled.

        A group in flight is shielded from the cancellation, as a write in its caller's own
        task is (each call is bounded by the timeout): its outcome always reaches its
        members. Once cancelled, the sender still sends what is queued, and later writes go
        out on their own.
        """
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                # The tasks made runnable with this one (a burst of hand-backs) queue first.
                await trio.lowlevel.cancel_shielded_checkpoint()
                with trio.CancelScope(shield=True):
                    await self._drain()
        finally:
            self._stopped = True
            with trio.CancelScope(shield=True):
                await self._drain()

    async def _drain(self) -> None:
        while self._queue:
            await self._send(self._take())

    def _take(self) -> list[_Waiter]:
        """The next group: the oldest queued writes, at most one per key, one session.

        The runtime writes a key from one flow at a time, but a write outside the driver (an
        operator's requeue) could queue beside one of the same key; a store may refuse a
        call naming a key twice (etcd does), so the second waits for the next group. So does
        an ephemeral write naming another session than the group's (a session replaced
        while writes of the old one were queued).
        """
        group: list[_Waiter] = []
        keys: set[tuple[Keyspace, str]] = set()
        session: Session | None = None
        rest: list[_Waiter] = []
        for waiter in self._queue:
            named = (waiter.write.keyspace, waiter.write.key)
            fits = waiter.session is None or session is None or waiter.session is session
            if len(group) < self._limit and named not in keys and fits:
                keys.add(named)
                group.append(waiter)
                if session is None:
                    session = waiter.session
            else:
                rest.append(waiter)
        self._queue = rest
        return group

    async def _send(self, group: list[_Waiter]) -> None:
        refused: StoreError | None = None
        self._in_flight += 1
        try:
            results = await self._call(group)
        except StoreUnavailable as exc:
            self._fail(group, exc)  # each member raises it
            return
        except StoreError as exc:
            refused = exc
        except BaseException as exc:
            self._fail(group, StoreUnavailable(f"the write was interrupted in flight ({exc!r})"))
            raise
        finally:
            self._in_flight -= 1
        if refused is not None:
            if len(group) == 1:
                self._fail(group, refused)
                return
            # Refused as a whole (a server whose txn limit is lower than ours, say), so
            # nothing was written: each goes again on its own, and so does every later write.
            logger.warning(
                "the store refused %d writes sent together (%s); sending each on its own "
                "from now on",
                len(group),
                refused,
            )
            self._limit = 1
            for waiter in group:
                if not waiter.abandoned:
                    await self._send([waiter])
            return
        for waiter, result in zip(group, results, strict=True):
            if isinstance(result, StoreError):
                waiter.result = outcome.Error(result)
            else:
                waiter.result = outcome.Value(result)
            waiter.done.set()

    async def _call(self, group: list[_Waiter]) -> Sequence[WriteResult | StoreError]:
        with trio.move_on_after(self._timeout) as scope:
            if len(group) == 1:
                waiter = group[0]
                try:
                    with _within(waiter.span):
                        return [await self._one(waiter.write, waiter.session)]
                except StoreError as exc:
                    return [exc]
            self.groups += 1
            self.grouped += len(group)
            writes = [w.write for w in group]
            session = next((w.session for w in group if w.session is not None), None)
            if tracing():
                with self._span(group):
                    results = await self._batched.write_many(writes, session=session)
            else:
                results = await self._batched.write_many(writes, session=session)
            if len(results) != len(group):
                self._limit = 1  # never trusted with a group again
                raise StoreUnavailable(
                    f"the store answered {len(results)} results to {len(group)} writes sent "
                    "together (its write_many is broken), so any of them may have landed; "
                    "each later write is sent on its own"
                )
            return results
        assert scope.cancelled_caught
        raise StoreUnavailable(
            f"{len(group)} writes sent together got no answer within {seconds(self._timeout)}; "
            "any of them may have landed"
        )

    def _one(self, write: Write, session: Session | None) -> Awaitable[WriteResult]:
        """The store's own call for one write (a group of one, or one resent alone)."""
        if isinstance(write, Swap):
            return self._store.update(
                write.keyspace, write.key, write.value, write.expected, session=session
            )
        if isinstance(write, Create):
            return self._store.create(write.keyspace, write.key, write.value, session=session)
        return self._store.delete(write.keyspace, write.key, write.expected)

    @staticmethod
    def _span(group: list[_Waiter]) -> AbstractContextManager[trace.Span]:
        # The group's call serves many writes but can have one parent: it is a child of the
        # first member's write span, and links to every member's, so a trace viewer leads
        # from each commit to the round trip that carried it.
        members = [w.span for w in group if w.span is not None and w.span.is_valid]
        parent = trace.set_span_in_context(NonRecordingSpan(members[0])) if members else None
        return _tracer.start_as_current_span(
            "spate.group-commit",
            context=parent,
            links=[Link(member) for member in members],
            attributes={"spate.group.size": len(group)},
        )

    @staticmethod
    def _fail(group: list[_Waiter], exc: StoreUnavailable | StoreError) -> None:
        for waiter in group:
            if waiter.result is None:
                # An exception object each: one raised in several tasks would pile their
                # tracebacks onto each other.
                waiter.result = outcome.Error(copy.copy(exc))
                waiter.done.set()


def grouping(store: Store) -> bool:
    """Whether ``store`` can carry writes in groups."""
    return max_batch_of(store) > 1


def _within(span: SpanContext | None) -> AbstractContextManager[object]:
    """The store call of a write queued alone runs in its writer's span, as if in its task."""
    if span is None or not span.is_valid:
        return contextlib.nullcontext()
    return trace.use_span(NonRecordingSpan(span), end_on_exit=False)
