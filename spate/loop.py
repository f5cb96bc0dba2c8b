"""The control loop: one task that owns every piece of coordination state.

Everything that happens reaches the loop as an *input* — a callable posted to one channel by
a watch pump, a ticker, the planner, an API call, or a store round trip of a flow coming
back — and the loop runs inputs one at a time, then takes a *step*: election, planning,
assignment, claims, revocations, terminal verdict. Inputs and steps never await, so every
decision is serialized against every other and against every write result; writes
themselves run as flows (:mod:`spate.flows`) whose round trips overlap.

The concerns live in their own modules, each a component the loop drives:
:mod:`spate.leader` (election, planning, assignment), :mod:`spate.claims` (claims,
renewals, commit, fail, release, quarantine), :mod:`spate.revocation` (drains and their
deadlines), :mod:`spate.terminal` (the verdict), :mod:`spate.pumps` (watches and timers).
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable
from typing import Any

import attrs
import outcome
import trio

from spate import fenced
from spate.claims import Claims
from spate.config import Config
from spate.errors import FatalCoordinationError, StoreUnavailable
from spate.events import Event
from spate.flows import Driver, Flow, Hold, Op
from spate.leader import Leadership, Planner
from spate.metrics import Gauges, MetricsHooks
from spate.protocol import fingerprint_hash, live_workers, stable_hash_str
from spate.records import Keys, PresenceRecord, UnreadableRecord, encode
from spate.revocation import Revocations
from spate.session import SessionSlot
from spate.store import Entry, Keyspace, Lost, Store, Won
from spate.telemetry._context import Context
from spate.terminal import Terminal
from spate.view import (
    AssignmentChanged,
    AssignmentGone,
    LeaderChanged,
    LeaderGone,
    LeaseChanged,
    LeaseGone,
    Notice,
    PlanChanged,
    PresenceChanged,
    PresenceGone,
    ProgressChanged,
    View,
)

__all__ = ["Core", "Reply"]

logger = logging.getLogger("spate.coordinator")
RECHECK_AFTER = 0.1
"""Seconds before the loop looks again at a rule whose deadline passed without it acting."""

INPUT_BATCH = 256
"""Inputs run back to back before one step (a burst of watch events costs one step)."""


@attrs.define(eq=False)
class Reply:
    """Where the loop puts the answer to one API call."""

    event: trio.Event = attrs.field(factory=trio.Event)
    result: outcome.Outcome[Any] | None = None

    def set(self, result: outcome.Outcome[Any]) -> None:
        """Answer once (later answers are dropped)."""
        if self.result is None:
            self.result = result
            self.event.set()


class Core:
    """The coordinator's state and its loop. Only the loop task mutates it."""

    def __init__(
        self,
        store: Store,
        *,
        job: str,
        instance: str,
        planner: Planner,
        config: Config,
        fingerprint: str,
        metrics: MetricsHooks,
        locality: str = "",
    ) -> None:
        assert config.lease_duration is not None
        assert config.op_timeout is not None
        self.store = store
        self.job = job
        self.instance = instance
        self.locality = locality
        self.config = config
        self.lease = config.lease_duration
        self.op_timeout = config.op_timeout
        self.fingerprint = fingerprint
        self.metrics = metrics
        self.keys = Keys(job)
        self.nonce = secrets.token_hex(16)
        # Heartbeat jitter is per process (two runs of one pod drift apart); placement ties
        # are per job (every leader breaks them the same way).
        self.jitter_seed = stable_hash_str(0, f"{instance}/{self.nonce}")
        self.tie_seed = fingerprint_hash(fingerprint)
        self.session = SessionSlot(store, op_timeout=config.op_timeout)
        self.scope = fenced.Scope(
            job, instance, store.capabilities.system, metrics, session=lambda: self.session.current
        )
        self.view = View(self.keys, max_attempts=config.max_attempts)
        self.presence_rev = 0
        self.parting = False
        self.ready = trio.Event()
        self.stopped: BaseException | None = None
        self.replies: set[Reply] = set()
        self._send, self._receive = trio.open_memory_channel[Callable[[], None]](math.inf)
        self.events_send, self.events_receive = trio.open_memory_channel[Event](math.inf)
        self._snapshots_pending = {Keyspace.DURABLE, Keyspace.EPHEMERAL}
        self._watch_since: dict[Keyspace, int] = {}
        self._alarm_at = math.inf
        self._alarm_changed = trio.Event()
        self._reconciling = False
        self.driver: Driver
        self.nursery: trio.Nursery
        self.claims = Claims(self)
        self.leader = Leadership(self, planner)
        self.revocations = Revocations(self)
        self.terminal = Terminal(self)

    # -- plumbing ----------------------------------------------------------------------------

    def post(self, fn: Callable[[], None]) -> None:
        """Hand ``fn`` to the loop (from any task); the loop runs it, then steps."""
        try:
            self._send.send_nowait(fn)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the loop has stopped; nothing is waiting for this input

    def emit(self, event: Event) -> None:
        """Send ``event`` to the user (never blocks the loop)."""
        try:
            self.events_send.send_nowait(event)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # nobody listens any more

    def start(
        self,
        flow: Flow[Any],
        done: Callable[[outcome.Outcome[Any]], None] | None = None,
        *,
        context: Context | None = None,
    ) -> None:
        """Run ``flow``; by default an exception out of it stops the coordinator.

        ``context`` is the trace context of the API call the flow serves: its writes' spans
        join that trace.
        """
        self.driver.start(flow, done or _unwrap, context)

    def now(self) -> float:
        """The loop's clock (Trio's, so a MockClock drives every deadline)."""
        return trio.current_time()

    def wake_at(self, deadline: float) -> None:
        """Make sure the loop steps again by ``deadline`` (time-based rules need it)."""
        if deadline < self._alarm_at:
            self._alarm_at = deadline
            self._alarm_changed.set()

    async def alarm_task(self) -> None:
        """Post an empty input (so the loop steps) whenever a registered deadline passes."""
        while True:
            self._alarm_changed = trio.Event()
            with trio.move_on_at(self._alarm_at):
                await self._alarm_changed.wait()
                continue
            self._alarm_at = math.inf
            self.post(_nothing)

    def attach(self, nursery: trio.Nursery) -> None:
        """Give the core the nursery its flows, planner runs and I/O tasks live in."""
        self.nursery = nursery
        self.driver = Driver(
            self.store, self.scope, nursery=nursery, post=self.post, op_timeout=self.op_timeout
        )

    async def run(self) -> None:
        """The loop: run inputs, step, until cancelled or a fatal error."""
        try:
            async for fn in self._receive:
                self._run_input(fn)
                for _ in range(INPUT_BATCH):
                    try:
                        fn = self._receive.receive_nowait()
                    except trio.WouldBlock:
                        break
                    self._run_input(fn)
                if self.ready.is_set():
                    self._run_step()
        except BaseException as exc:
            self.stop(exc)
            raise

    def _run_input(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except UnreadableRecord as exc:
            raise FatalCoordinationError(str(exc)) from exc

    def _run_step(self) -> None:
        try:
            self.step()
        except UnreadableRecord as exc:
            raise FatalCoordinationError(str(exc)) from exc

    def stop(self, exc: BaseException) -> None:
        """Fail every waiting API call with ``exc`` (or a closed error) and close the channels."""
        self.stopped = exc
        if isinstance(exc, FatalCoordinationError):
            error: BaseException = exc
        else:
            error = FatalCoordinationError(
                "the coordinator has stopped (its async with block ended); open a new one to "
                "keep working"
            )
        for reply in list(self.replies):
            reply.set(outcome.Error(error))
        self.replies.clear()
        self._send.close()
        self.events_send.close()

    # -- the step ----------------------------------------------------------------------------

    def step(self) -> None:
        """Move every rule forward from the current state (never awaits)."""
        now = self.now()
        self.leader.prune_departed(now)
        if not self.terminal.reported:
            if not self.parting:
                self.leader.step(now)
                self.claims.step(now)
                self.revocations.step(now)
            self.terminal.step(now)
        self._report_gauges()
        for deadline in (
            self.leader.next_deadline(now),
            self.revocations.next_deadline(),
            self.terminal.next_deadline(),
            self.claims.next_deadline(),
        ):
            # A rule may report a deadline that has passed but that it cannot act on yet
            # (its key busy with a write in flight, say). Waking at once would step again at
            # the same instant and decide the same, forever: a busy spin, and under a mock
            # clock a hang, since virtual time never advances. Look again a moment later.
            if deadline < math.inf:
                self.wake_at(max(deadline, now + RECHECK_AFTER))

    def _report_gauges(self) -> None:
        tallies = self.view.tallies
        self.metrics.gauges(
            Gauges(
                owned=len(self.claims.owned),
                completed=tallies.completed,
                quarantined=tallies.quarantined,
                draining=len(self.revocations.revoking),
                live_workers=live_workers(self.view.presence.keys(), self.instance),
                leader=self.leader.leading,
                idle=not self.claims.owned,
            )
        )

    # -- watches -----------------------------------------------------------------------------

    def watch_opening(self, keyspace: Keyspace) -> None:
        """A pump is about to open a watch: keys learned from now on outlive its snapshot."""
        self._watch_since[keyspace] = self.view.seq

    def watch_snapshot(self, keyspace: Keyspace, entries: list[Entry]) -> None:
        """A watch's snapshot arrived: fold it as an authoritative listing."""
        since = self._watch_since.get(keyspace, self.view.seq)
        self.fold(self.view.apply_listing(keyspace, entries, since=since))
        if keyspace is Keyspace.EPHEMERAL:
            self.view.assign_dirty = True
        self._snapshots_pending.discard(keyspace)
        if not self._snapshots_pending and not self.ready.is_set():
            self.ready.set()

    def watch_put(self, keyspace: Keyspace, entry: Entry) -> None:
        """A live watch put."""
        self.fold(self.view.apply_put(keyspace, entry))

    def watch_delete(self, keyspace: Keyspace, key: str, revision: int) -> None:
        """A live watch delete."""
        self.fold(self.view.apply_delete(keyspace, key, revision))

    # -- notices -----------------------------------------------------------------------------

    def fold(self, notices: list[Notice]) -> None:
        """Act on what changed in the view."""
        for notice in notices:
            if isinstance(notice, LeaseChanged | LeaseGone | ProgressChanged):
                self.claims.on_notice(notice)
            elif isinstance(notice, AssignmentChanged | AssignmentGone):
                if notice.instance == self.instance:
                    self.claims.on_assignment(notice)
            elif isinstance(notice, PresenceChanged):
                self._on_presence(notice)
            elif isinstance(notice, PresenceGone):
                if notice.instance != self.instance:
                    self.leader.on_departure(notice.instance, self.now())
            elif isinstance(notice, LeaderChanged | LeaderGone | PlanChanged):
                self.leader.on_notice(notice)

    def _on_presence(self, notice: PresenceChanged) -> None:
        if notice.instance == self.instance:
            if notice.nonce not in (None, self.nonce) and notice.revision > self.presence_rev:
                raise self.duplicate_instance(f"presence key {self.keys.worker(self.instance)!r}")
            return
        self.leader.on_arrival(notice.instance, notice.new, self.now())

    def duplicate_instance(self, where: str) -> FatalCoordinationError:
        """The error for a second live worker using this instance id."""
        return FatalCoordinationError(
            f"another live worker uses instance id {self.instance!r} (a foreign process nonce "
            f"appeared on {where}); instance ids must be unique per live worker — use the pod "
            "or host name, not a constant. This worker stopped to keep one owner per split."
        )

    # -- heartbeat, presence, reconcile -------------------------------------------------------

    def heartbeat(self) -> None:
        """Renew presence, leadership and every due lease; fence starved splits."""
        now = self.now()
        if not self.parting and not self.driver.busy(
            Keyspace.EPHEMERAL, self.keys.worker(self.instance)
        ):
            self.start(self._renew_presence())
        self.leader.heartbeat()
        self.claims.heartbeat(now)
        self.session.check(self.nursery)

    def presence_record(self) -> bytes:
        """This worker's presence value (it advertises its lane budget and locality)."""
        return encode(
            PresenceRecord(
                nonce=self.nonce, max_in_flight=self.config.max_in_flight, locality=self.locality
            )
        )

    def _renew_presence(self) -> Flow[None]:
        key = self.keys.worker(self.instance)
        yield Hold(Keyspace.EPHEMERAL, key)
        if self.parting:
            return
        try:
            if self.presence_rev:
                result = yield Op(
                    "update",
                    Keyspace.EPHEMERAL,
                    key,
                    self.presence_record(),
                    expected=self.presence_rev,
                    operation="presence-renew",
                )
                if isinstance(result, Won):
                    self.presence_rev = result.revision
                    return
            entry = yield Op("get", Keyspace.EPHEMERAL, key)
            if entry is None:
                result = yield Op(
                    "create", Keyspace.EPHEMERAL, key, self.presence_record(), operation="announce"
                )
                if isinstance(result, Won):
                    self.presence_rev = result.revision
                return
            record = _presence_or_none(entry)
            if record is not None and record.nonce != self.nonce:
                raise self.duplicate_instance(f"presence key {key!r}")
            # Our own write whose reply was lost (maybe landed): adopt its revision.
            self.presence_rev = entry.revision
        except StoreUnavailable as exc:
            logger.debug("presence renewal failed (%s); the next heartbeat retries", exc)

    def reconcile(self) -> None:
        """Start the backstop listing of both keyspaces (one at a time)."""
        if not self._reconciling and self.ready.is_set():
            self._reconciling = True
            self.start(self._reconcile_flow())

    def _reconcile_flow(self) -> Flow[None]:
        started = self.now()
        try:
            for keyspace in (Keyspace.EPHEMERAL, Keyspace.DURABLE):
                since = self.view.seq
                try:
                    entries = yield Op("list", keyspace, self.keys.prefix)
                except StoreUnavailable as exc:
                    logger.warning("reconcile listing failed (%s); the next tick retries", exc)
                    return
                self.fold(self.view.apply_listing(keyspace, entries, since=since))
            # Grace windows elapse with time, not events: let the leader re-decide.
            self.view.assign_dirty = True
            self.metrics.reconcile_duration(self.now() - started)
        finally:
            self._reconciling = False

    def delete_presence(self) -> Flow[None]:
        """Drop this worker's presence key (departure): peers rebalance now, not after a TTL."""
        key = self.keys.worker(self.instance)
        yield Hold(Keyspace.EPHEMERAL, key)
        try:
            result = yield Op(
                "delete",
                Keyspace.EPHEMERAL,
                key,
                expected=self.presence_rev or None,
                operation="presence-delete",
            )
        except StoreUnavailable as exc:
            logger.warning("could not delete the presence key (%s); it will expire", exc)
            return
        if isinstance(result, Won):
            self.fold(self.view.forget_own(Keyspace.EPHEMERAL, key, self.presence_rev))
        elif isinstance(result, Lost):
            logger.debug("presence key already gone or rewritten")


def _presence_or_none(entry: Entry) -> PresenceRecord | None:
    from spate.records import decode

    try:
        return decode(PresenceRecord, entry.key, entry.value)
    except UnreadableRecord:
        return None


def _nothing() -> None:
    """An input that only makes the loop step."""


def _unwrap(result: outcome.Outcome[Any]) -> None:
    result.unwrap()
