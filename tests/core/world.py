"""A fleet of coordination machines on one float clock: the synchronous test harness.

Nothing here runs Trio. Each worker is the real :class:`~spate._core.machine.Machine`, driven
by the simulator's callback runtime (:class:`~spate_testing.sim._process.SimWorker`: startup,
watches, heartbeats, the planner, flows with the runtime's per-key rules), over the
simulator's store model (:class:`~spate_testing.sim._model.ModelStore`: revisions,
compare-and-swap, per-key expiry of ephemeral keys) and a discrete-event
:class:`~spate_testing.sim._clockwork.Scheduler` whose time is a float. A test reads as the
protocol's specification:

    world = World()
    a = world.start("a", planner=planner_of(2), on_event=cooperative)
    world.run_until(lambda: len(a.owned) == 2)
    b = world.start("b", planner=planner_of(2))
    a.kill()
    world.run_for(LEASE)
    record, _ = world.record("s00")

The pieces a test drives:

- time: :meth:`World.run_for`, :meth:`World.run_until`, :meth:`World.settle`; in a world
  that does not tick (``ticking=False``) no heartbeat, reconcile or replan runs unless the
  test asks for it (:meth:`Worker.heartbeat`, :meth:`Worker.reconcile`);
- API calls: :meth:`Worker.commit`, :meth:`Worker.split`, :meth:`Worker.fail`,
  :meth:`Worker.release`, :meth:`Worker.depart`, :meth:`Worker.decline_revoke` return a
  :class:`Call`;
  :meth:`World.wait` runs the world until it ends and returns (or raises) what the
  coordinator's method would;
- deaths and faults: :meth:`Worker.kill`, :meth:`Worker.freeze`, :meth:`Worker.partition`,
  a write that fails (once, or every such write: :meth:`Worker.fail_every`), whose reply is
  lost, that is held in the network, or that another
  writer beats (:meth:`Worker.fail_next`, :meth:`Worker.lose_reply`, :meth:`Worker.hold_next`,
  :meth:`Worker.before_next`), a read that fails (:meth:`Worker.fail_next_read`) or is held
  in the network (:meth:`Worker.hold_next_read`),
  watch events delivered by hand in one batch (:meth:`Worker.watch_batch`), slow writes
  (:meth:`Worker.slow_writes`) and a slow watch (:meth:`Worker.deafen`);
- the store as another client sees it: :meth:`World.get`, :meth:`World.record`,
  :meth:`World.write`;
- what a worker said: :attr:`Worker.events`, :meth:`Worker.of`, :meth:`Worker.time_of`,
  :attr:`Worker.counts` (the metrics hooks), :attr:`Worker.writes` (every write and how it
  ended), :attr:`Worker.reads` and :meth:`Worker.listings` (every read), :attr:`Worker.calls`
  (every call, reads and writes, in order), :attr:`Worker.watches` (the watches it keeps) and
  :attr:`Worker.delivered` (every live event its watches delivered: who reads what).

What a worker holds and leads is read from its machine in one place (the section "the
machine's state" of :class:`Worker`).
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Iterable
from typing import Any, Literal

import attrs
import outcome

from spate import (
    Config,
    Event,
    Fenced,
    Gained,
    Planner,
    Progress,
    RevokeRequested,
    StoreUnavailable,
)
from spate._core.flows import Flow, Op
from spate._core.leader.phase import LeaderPhase
from spate._core.records import ProgressRecord, decode
from spate._core.view.scopes import WatchScope
from spate._metrics import AcquireReason, LossReason, RevocationOutcome
from spate.store import (
    Delete,
    Entry,
    EphemeralSemantics,
    Keyspace,
    Put,
    WatchEvent,
    Won,
    WriteResult,
)
from spate_testing.faults import FaultRates
from spate_testing.sim._clockwork import Scheduler
from spate_testing.sim._history import History, StoreWrite
from spate_testing.sim._model import Link, ModelStore, WatchSink
from spate_testing.sim._process import SimWorker
from spate_testing.sim._recorder import RecordingMetrics
from spate_testing.sim._workload import Workload
from tests.common import JOB, KEYS, EventLog, config, planner_of

__all__ = [
    "JOB",
    "KEYS",
    "LEASE",
    "Call",
    "Held",
    "Worker",
    "World",
    "complete_on_gain",
    "config",
    "cooperative",
    "leading_now",
    "phase_now",
    "planner_of",
]

LEASE = 9.0
"""The lease (and the store's TTL) of every world."""

WriteKind = Literal["create", "update", "delete"]
OpKind = Literal["get", "list", "create", "update", "delete"]


# -- calls -------------------------------------------------------------------------------------


@attrs.define(eq=False)
class Call:
    """An API call in flight (its flow runs on the worker); :meth:`World.wait` awaits it."""

    what: str
    result: outcome.Outcome[Any] | None = None
    _then: list[Callable[[Call], None]] = attrs.field(factory=list)

    @property
    def done(self) -> bool:
        """Whether the call has ended."""
        return self.result is not None

    def then(self, fn: Callable[[Call], None]) -> Call:
        """Run ``fn`` once the call ended (at once if it has); returns the call."""
        if self.result is not None:
            fn(self)
        else:
            self._then.append(fn)
        return self

    @property
    def error(self) -> BaseException | None:
        """The error the call returned or raised (None if it succeeded)."""
        assert self.result is not None, f"{self.what} has not ended"
        if isinstance(self.result, outcome.Error):
            return self.result.error
        value = self.result.unwrap()
        return value if isinstance(value, BaseException) else None

    def unwrap(self) -> Any:
        """What the coordinator's method returns, or the error it raises."""
        assert self.result is not None, f"{self.what} has not ended"
        value = self.result.unwrap()
        if isinstance(value, BaseException):
            raise value
        return value

    def _finish(self, result: outcome.Outcome[Any]) -> None:
        self.result = result
        for fn in self._then:
            fn(self)
        self._then.clear()


# -- faults on one worker's link ---------------------------------------------------------------


@attrs.define(eq=False)
class _Rule:
    kind: OpKind
    keyspace: Keyspace
    key: str
    action: Callable[[Op, Callable[[outcome.Outcome[Any]], None], int | None], None]
    once: bool = True

    def matches(self, op: Op) -> bool:
        return (
            op.method == self.kind and op.keyspace is self.keyspace and op.key.startswith(self.key)
        )


@attrs.define(eq=False)
class Held:
    """A write held in the network: it reaches the store when :meth:`release` is called."""

    arrived: bool = False
    _land: Callable[[], None] | None = None

    def release(self) -> None:
        """Let the write land; its caller then hears how it went."""
        land, self._land = self._land, None
        if land is not None:
            land()


class _Link(Link):
    """A worker's link with the harness's one-shot faults and a record of every write."""

    def __init__(self, model: ModelStore, scheduler: Scheduler, **named: Any) -> None:
        super().__init__(model, scheduler, **named)
        self._clock = scheduler
        self.rules: list[_Rule] = []
        self.writes: list[tuple[float, str, str]] = []
        self.ops: list[Op] = []
        self.reads: list[Op] = []
        self.calls: list[tuple[float, Op]] = []
        self.delivered: list[tuple[float, Keyspace, str, str]] = []
        self.gates: dict[Keyspace, str] = {}
        self._gated: list[Callable[[], None]] = []
        self.answered: Callable[[], None] = lambda: None
        """Called after every reply (the worker steps then, as the runtime's loop does)."""

    def call(
        self,
        op: Op,
        reply: Callable[[outcome.Outcome[Any]], None],
        *,
        lease: int | None = None,
    ) -> None:
        self.calls.append((self._clock.now(), op))
        if op.is_write:
            self.ops.append(op)
            reply = self._counted(op, reply)
        else:
            self.reads.append(op)
        reply = self._then_step(reply)
        for rule in self.rules:
            if rule.matches(op):
                if rule.once:
                    self.rules.remove(rule)
                rule.action(op, reply, lease)
                return
        super().call(op, reply, lease=lease)

    def _then_step(
        self, reply: Callable[[outcome.Outcome[Any]], None]
    ) -> Callable[[outcome.Outcome[Any]], None]:
        # The Trio runtime's loop steps the machine after every batch of inputs, and a
        # background flow's store reply is one; the simulator's flow runner resumes the flow
        # and steps only at the worker's next input. A step costs nothing when nothing moved,
        # so the harness steps as the runtime does.
        def answer(result: outcome.Outcome[Any]) -> None:
            reply(result)
            self.answered()

        return answer

    def _counted(
        self, op: Op, reply: Callable[[outcome.Outcome[Any]], None]
    ) -> Callable[[outcome.Outcome[Any]], None]:
        def counted(result: outcome.Outcome[Any]) -> None:
            if isinstance(result, outcome.Value):
                how = "won" if isinstance(result.value, Won) else "lost"
            else:
                how = "error"
            self.writes.append((self._clock.now(), op.operation, how))
            reply(result)

        return counted

    def land(self, op: Op, lease: int | None) -> WriteResult:
        """Apply ``op`` to the store now, bypassing every fault."""
        return self.model.write(self.actor, op, lease=lease)

    # -- a slow watch ----------------------------------------------------------------------------

    def watch(
        self, keyspace: Keyspace, prefix: str, sink: WatchSink, *, exact: bool = False
    ) -> Callable[[], None]:
        return super().watch(keyspace, prefix, _GatedSink(self, keyspace, sink), exact=exact)

    def hear(self, keyspace: Keyspace) -> None:
        self.gates.pop(keyspace, None)
        held, self._gated = self._gated, []
        for deliver in held:
            deliver()


@attrs.define(eq=False)
class _GatedSink:
    """A watch sink whose live events under a gated prefix wait until the gate opens."""

    link: _Link
    keyspace: Keyspace
    inner: WatchSink

    def snapshot(self, entries: list[Entry]) -> None:
        self.inner.snapshot(entries)

    def event(self, event: WatchEvent) -> None:
        key = (
            event.entry.key
            if isinstance(event, Put)
            else event.key
            if isinstance(event, Delete)
            else ""
        )
        if isinstance(event, Put | Delete):
            kind = "put" if isinstance(event, Put) else "delete"
            self.link.delivered.append((self.link._clock.now(), self.keyspace, key, kind))
        gate = self.link.gates.get(self.keyspace)
        if self.link._gated or (gate is not None and key.startswith(gate)):
            # Held in order: an event behind a held one waits for it too.
            self.link._gated.append(lambda: self.inner.event(event))
            return
        self.inner.event(event)

    def broken(self, reason: str) -> None:
        self.inner.broken(reason)


# -- workers -----------------------------------------------------------------------------------


class _Metrics(RecordingMetrics):
    """The metrics hooks, counted under the names the assertions use (``acquired:expired``)."""

    def __init__(self, actor: str) -> None:
        super().__init__(actor)
        self.counts: collections.Counter[str] = collections.Counter()

    def acquired(self, reason: AcquireReason) -> None:
        super().acquired(reason)
        self.counts[f"acquired:{reason}"] += 1

    def lost(self, reason: LossReason) -> None:
        super().lost(reason)
        self.counts[f"lost:{reason}"] += 1

    def revocation(self, outcome: RevocationOutcome) -> None:
        super().revocation(outcome)
        self.counts[f"revocation:{outcome}"] += 1

    def released(self, count: int) -> None:
        self.counts["released"] += count

    def failed(self) -> None:
        self.counts["failed"] += 1

    def quarantined(self) -> None:
        self.counts["quarantined"] += 1


Handler = Callable[["Worker", Event], None]
"""A test's event handler: called at the next turn after each event, as a consumer would be."""


class Worker(EventLog, SimWorker):
    """One worker process: a machine, its runtime model, and what it emitted."""

    def __init__(
        self,
        *,
        on_event: Handler | None,
        ticking: bool,
        expect_error: bool,
        link: _Link,
        **named: Any,
    ) -> None:
        super().__init__(link=link, **named)
        self.link: _Link = link
        link.answered = lambda: SimWorker.request_step(self)
        self._on_event = on_event
        self._ticking = ticking
        self.expect_error = expect_error
        """Whether the test expects this worker to stop on an error (else it fails the test)."""
        self.slow_started: list[tuple[float, str, str]] = []
        """When each slowed write (:meth:`slow_writes`) started, its kind and its key."""
        self.events: list[Event] = []
        self.times: list[float] = []
        self.error: BaseException | None = None
        self.step_requests = 0

    # -- what it emitted -----------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Record ``event``; the test's handler sees it at the next turn."""
        self.events.append(event)
        self.times.append(self.scheduler.now())
        handler = self._on_event
        if handler is not None:
            self._soon(lambda: handler(self, event))

    @property
    def counts(self) -> collections.Counter[str]:
        """The metrics hooks' calls, by ``hook:reason``."""
        assert isinstance(self.metrics, _Metrics)
        return self.metrics.counts

    @property
    def writes(self) -> list[tuple[float, str, str]]:
        """Every write: when its answer came, its operation, and ``won``/``lost``/``error``."""
        return self.link.writes

    @property
    def ops(self) -> list[Op]:
        """Every write this worker sent, in order."""
        return self.link.ops

    @property
    def reads(self) -> list[Op]:
        """Every read (get, list) this worker sent, in order (watches are not reads)."""
        return self.link.reads

    @property
    def calls(self) -> list[tuple[float, Op]]:
        """Every store call (read or write) this worker sent: when, and what, in order."""
        return self.link.calls

    @property
    def delivered(self) -> list[tuple[float, Keyspace, str, str]]:
        """Every live event its watches delivered: when, keyspace, key, ``put``/``delete``."""
        return self.link.delivered

    def listings(self, prefix: str) -> int:
        """How many listings of exactly ``prefix`` this worker sent."""
        return sum(op.method == "list" and op.key == prefix for op in self.link.reads)

    @property
    def nonce(self) -> str:
        """This process's nonce."""
        return self.machine.nonce

    def watch_put(self, keyspace: Keyspace, entry: Entry) -> bool:
        """Deliver a watch event by hand; False when it changed nothing (an echo)."""
        changed = self.machine.watch_put(keyspace, entry)
        self.input(lambda: changed)
        return changed

    def watch_batch(self, keyspace: Keyspace, entries: Iterable[Entry]) -> None:
        """Deliver several watch puts by hand as one input (one step), as a runtime batch does."""
        machine = self.machine

        def batch() -> bool:
            return any([machine.watch_put(keyspace, entry) for entry in entries])

        self.input(batch)

    def request_step(self) -> None:
        """Count the machine's own requests for a step (state changed outside an input)."""
        self.step_requests += 1
        super().request_step()

    # -- the machine's state (the one place a test reads it) -----------------------------------

    @property
    def owned(self) -> frozenset[str]:
        """The splits this worker holds."""
        return self.machine.owned

    @property
    def leading(self) -> bool:
        """Whether this worker is the leader."""
        return self.machine.leading

    @property
    def phase(self) -> LeaderPhase:
        """Where this worker stands in leading the job."""
        return self.machine.leader_phase

    @property
    def watches(self) -> tuple[WatchScope, ...]:
        """The watches this worker keeps open now."""
        return self.machine.watches

    def handed_over(self, splits: Iterable[str]) -> bool:
        """Whether ``splits`` have moved on since a departure (``wait_handed_over``'s test)."""
        return self.machine.handed_over(list(splits))

    def lease_key(self, split: str) -> tuple[Keyspace, str]:
        """Where ``split``'s lease lives on this world's store (durable on per-key stores)."""
        view = self.machine.view
        return view.lease_keyspace, view.lease_key(split)

    def drop_silently(self, split: str) -> None:
        """Stop holding ``split`` without writing (a loss noticed before its key went)."""
        self.machine._tenancies.drop(split, "fenced")

    def stop_claiming(self) -> None:
        """Claim nothing more, as a leaving worker does (without its hand-back)."""
        self.machine._departure.parting = True

    def step_down(self, *, resign: bool) -> None:
        """Give up leadership, with or without deleting the leader key."""
        self.machine._leader.demote(resign=resign)

    @property
    def stray_leases(self) -> bool:
        """Whether the claims still track a lease key of this process's that it does not hold."""
        return bool(self.machine._tenancies._stray)

    @property
    def renewed_at(self) -> dict[str, float]:
        """When each held split's lease was last written."""
        return {split: held.last_ok for split, held in self.machine._claims.owned.items()}

    # -- API calls -----------------------------------------------------------------------------

    def _call(self, what: str, flow: Flow[Any]) -> Call:
        call = Call(what)

        def done(result: outcome.Outcome[Any]) -> None:
            if isinstance(result, outcome.Error):
                self.die(result.error)  # an exception out of an API call's flow is fatal
            call._finish(result)

        if self.stopped:
            call._finish(outcome.Error(RuntimeError(f"{self.actor} has stopped")))
        else:
            self.flows.start(flow, done)
        return call

    def commit(self, split: str, progress: Progress) -> Call:
        """``Coordinator.commit``."""
        return self._call(f"commit of {split}", self.machine.commit_flow(split, progress))

    def split(self, split: str, primary: bytes, residual: bytes) -> Call:
        """``Coordinator.split``: the residual's id once the fenced write landed."""
        flow = self.machine.split_flow(split, primary, residual, None)
        return self._call(f"split of {split}", flow)

    def fail(self, split: str, reason: str) -> Call:
        """``Coordinator.fail``."""
        return self._call(f"fail of {split}", self.machine.fail_flow(split, reason))

    def release(self, splits: Iterable[str]) -> Call:
        """``Coordinator.release``: Fenced, writing nothing, if one of them is not held."""
        ids = list(splits)
        for split in ids:
            if split not in self.owned:
                call = Call(f"release of {split}")
                call._finish(outcome.Value(Fenced(split, "this worker does not hold it")))
                return call
        return self._call(f"release of {ids}", self.machine.release_all_flow(ids))

    def depart(self) -> Call:
        """``Coordinator.depart``."""
        return self._call("departure", self.machine.depart_flow())

    def decline_revoke(self, split: str) -> None:
        """``Coordinator.decline_revoke``."""
        self.machine.decline_revoke(split)
        self.request_step()

    # -- ticks, for a world that does not tick on its own ---------------------------------------

    def heartbeat(self) -> None:
        """One heartbeat, as an input."""
        self.input(self.machine.heartbeat)

    def reconcile(self) -> None:
        """One reconcile tick, as an input."""
        self.input(self.machine.reconcile)

    def _open(self) -> None:
        if self._ticking:
            super()._open()
            return
        self._opened = True
        self._sync_watches()

    # -- deaths and faults ---------------------------------------------------------------------

    def freeze(self) -> None:
        """Pause the process's link: calls and watch events wait until :meth:`thaw`."""
        self.link.freeze()

    def thaw(self) -> None:
        """Let a frozen link go on."""
        self.link.thaw()

    def partition(self) -> None:
        """Cut the worker off from the store: calls fail, watches break."""
        self.link.partition()

    def heal(self) -> None:
        """End a partition."""
        self.link.heal()

    def _rule(
        self,
        kind: OpKind,
        keyspace: Keyspace,
        key: str,
        action: Callable[[Op, Callable[[outcome.Outcome[Any]], None], int | None], None],
        *,
        once: bool = True,
    ) -> None:
        self.link.rules.append(_Rule(kind, keyspace, key, action, once))

    def fail_next(self, kind: WriteKind, keyspace: Keyspace, key: str) -> None:
        """The next such write never reaches the store; its caller hears StoreUnavailable."""

        def fail(op: Op, reply: Callable[[outcome.Outcome[Any]], None], lease: int | None) -> None:
            error = StoreUnavailable(f"{self.actor}: injected failure of {op.method} {op.key}")
            self.scheduler.soon(lambda: reply(outcome.Error(error)))

        self._rule(kind, keyspace, key, fail)

    def fail_every(self, kind: WriteKind, keyspace: Keyspace, prefix: str) -> Callable[[], None]:
        """Every such write under ``prefix`` fails (StoreUnavailable) until the returned
        function is called: a worker wedged at that write (say, one that cannot claim)."""

        def fail(op: Op, reply: Callable[[outcome.Outcome[Any]], None], lease: int | None) -> None:
            error = StoreUnavailable(f"{self.actor}: injected failure of {op.method} {op.key}")
            self.scheduler.soon(lambda: reply(outcome.Error(error)))

        self._rule(kind, keyspace, prefix, fail, once=False)
        rule = self.link.rules[-1]
        return lambda: self.link.rules.remove(rule)

    def fail_next_read(self, kind: Literal["get", "list"], keyspace: Keyspace, key: str) -> None:
        """The next such read never reaches the store; its caller hears StoreUnavailable."""

        def fail(op: Op, reply: Callable[[outcome.Outcome[Any]], None], lease: int | None) -> None:
            error = StoreUnavailable(f"{self.actor}: injected failure of {op.method} {op.key}")
            self.scheduler.soon(lambda: reply(outcome.Error(error)))

        self._rule(kind, keyspace, key, fail)

    def lose_reply(self, kind: WriteKind, keyspace: Keyspace, key: str) -> None:
        """The next such write lands, but its caller hears StoreUnavailable (maybe landed)."""

        def lose(op: Op, reply: Callable[[outcome.Outcome[Any]], None], lease: int | None) -> None:
            def arrive() -> None:
                self.link.land(op, lease)
                reply(outcome.Error(StoreUnavailable(f"{self.actor}: reply lost")))

            self.scheduler.soon(arrive)

        self._rule(kind, keyspace, key, lose)

    def hold_next(self, kind: WriteKind, keyspace: Keyspace, key: str) -> Held:
        """The next such write waits in the network until released, then lands and answers."""
        held = Held()

        def hold(op: Op, reply: Callable[[outcome.Outcome[Any]], None], lease: int | None) -> None:
            held.arrived = True
            held._land = lambda: reply(outcome.Value(self.link.land(op, lease)))

        self._rule(kind, keyspace, key, hold)
        return held

    def hold_next_read(self, kind: Literal["get", "list"], keyspace: Keyspace, key: str) -> Held:
        """The next such read waits in the network until released, then is answered."""
        held = Held()

        def hold(op: Op, reply: Callable[[outcome.Outcome[Any]], None], lease: int | None) -> None:
            held.arrived = True
            held._land = lambda: Link.call(self.link, op, reply, lease=lease)

        self._rule(kind, keyspace, key, hold)
        return held

    def before_next(
        self, kind: OpKind, keyspace: Keyspace, key: str, fn: Callable[[], None]
    ) -> None:
        """Run ``fn`` (another writer's write, say) just before the next such call lands.

        ``kind`` may name a read too (``"list"``: the call whose key is the listed prefix).
        """

        def first(op: Op, reply: Callable[[outcome.Outcome[Any]], None], lease: int | None) -> None:
            def arrive() -> None:
                fn()
                Link.call(self.link, op, reply, lease=lease)

            self.scheduler.soon(arrive)

        self._rule(kind, keyspace, key, first)

    def slow_writes(self, kind: WriteKind, keyspace: Keyspace, prefix: str, seconds: float) -> None:
        """Every such write from now on takes ``seconds`` to reach the store."""

        def slow(op: Op, reply: Callable[[outcome.Outcome[Any]], None], lease: int | None) -> None:
            self.slow_started.append((self.scheduler.now(), op.method, op.key))
            self.scheduler.later(seconds, lambda: Link.call(self.link, op, reply, lease=lease))

        self._rule(kind, keyspace, prefix, slow, once=False)

    def deafen(self, keyspace: Keyspace, prefix: str) -> None:
        """Hold back live watch events under ``prefix`` (a slow watch) until :meth:`hear`."""
        self.link.gates[keyspace] = prefix

    def hear(self, keyspace: Keyspace) -> None:
        """Deliver the held-back watch events, in order, and stop holding them."""
        self.link.hear(keyspace)


# -- the world ---------------------------------------------------------------------------------


class World:
    """A store model, a float clock, and the workers started on them."""

    def __init__(self, *, ticking: bool = True, sessions: bool = False) -> None:
        self.scheduler = Scheduler()
        self.history = History(job=JOB, seed=0)
        self.model = ModelStore(
            self.scheduler,
            ttl=LEASE,
            history=self.history,
            semantics=EphemeralSemantics.SESSION if sessions else EphemeralSemantics.PER_KEY,
        )
        self.ticking = ticking
        self.workers: list[Worker] = []
        self._lives: collections.Counter[str] = collections.Counter()

    @property
    def now(self) -> float:
        """The world's time, in seconds."""
        return self.scheduler.now()

    # -- workers -------------------------------------------------------------------------------

    def start(
        self,
        instance: str,
        *,
        planner: Planner | None = None,
        cfg: Config | None = None,
        on_event: Handler | None = None,
        locality: str = "",
        fingerprint: str = "",
        rates: FaultRates | None = None,
        expect_error: bool = False,
        wait: bool = True,
    ) -> Worker:
        """Start a worker (a new process under ``instance``); by default, run until it is up."""
        self._lives[instance] += 1
        actor = f"{instance}#{self._lives[instance]}"
        resolved = (cfg or config()).resolve(LEASE)
        assert resolved.op_timeout is not None
        link = _Link(
            self.model,
            self.scheduler,
            actor=actor,
            rng=random.Random(actor),
            rates=rates or FaultRates(),
            op_timeout=resolved.op_timeout,
        )
        worker = Worker(
            on_event=on_event,
            ticking=self.ticking,
            expect_error=expect_error,
            link=link,
            scheduler=self.scheduler,
            history=self.history,
            actor=actor,
            instance=instance,
            job=JOB,
            workload=Workload(batches=()),
            planner=planner or planner_of(4),
            config=resolved,
            fingerprint=fingerprint,
            leave_deadline=30.0,
            metrics=_Metrics(actor),
            nonce=f"n-{actor}",
            on_exit=self._exited,
        )
        # The simulator's workers all share one locality; the harness's may differ.
        worker.machine.locality = locality
        self.workers.append(worker)
        self.scheduler.soon(worker.guarded(worker.begin))
        if wait:
            self.run_until(lambda: worker.ready or worker.stopped, within=30.0)
        return worker

    def _exited(self, worker: SimWorker, error: BaseException | None) -> None:
        assert isinstance(worker, Worker)
        worker.error = error

    # -- time ----------------------------------------------------------------------------------

    def run_for(self, seconds: float) -> None:
        """Let ``seconds`` pass: every timer, reply and watch event due meanwhile runs."""
        self.scheduler.run_until(self.now + seconds)
        self._check()

    def settle(self) -> None:
        """Run everything due now, without letting time pass."""
        self.scheduler.run_until(self.now)
        self._check()

    def run_until(self, condition: Callable[[], bool], within: float = 120.0) -> None:
        """Run until ``condition()`` holds; fail if it does not within ``within`` seconds."""
        held = self.scheduler.run_until(self.now + within, condition)
        self._check()
        assert held, f"the condition did not hold within {within} s (now {self.now})"

    def wait(self, call: Call, within: float = 30.0) -> Any:
        """Run until ``call`` ends; return what it returns, or raise what it raises."""
        self.run_until(lambda: call.done, within)
        return call.unwrap()

    def _check(self) -> None:
        # An unexpected error in a worker is a test failure, not a quiet death.
        for worker in self.workers:
            error = worker.error
            if error is not None and not worker.expect_error:
                raise AssertionError(f"{worker.actor} stopped on an error") from error

    # -- the store, as another client sees it --------------------------------------------------

    def get(self, keyspace: Keyspace, key: str) -> Entry | None:
        """The live entry under ``key``, or None."""
        return self.model.get(keyspace, key)

    def listing(self, keyspace: Keyspace, prefix: str) -> list[Entry]:
        """Every live entry under ``prefix``."""
        return self.model.list(keyspace, prefix)

    def store_writes(self, keyspace: Keyspace | None = None, prefix: str = "") -> list[StoreWrite]:
        """Every write the store applied or refused so far, in order (under ``prefix``)."""
        return [
            w
            for w in self.history.of(StoreWrite)
            if (keyspace is None or w.keyspace == keyspace.value) and w.key.startswith(prefix)
        ]

    def record(self, split: str) -> tuple[ProgressRecord, int]:
        """``split``'s progress record and its revision."""
        entry = self.get(Keyspace.DURABLE, KEYS.split(split))
        assert entry is not None, f"no progress record for {split}"
        return decode(ProgressRecord, entry.key, entry.value), entry.revision

    def write(
        self,
        kind: WriteKind,
        keyspace: Keyspace,
        key: str,
        value: bytes = b"",
        expected: int | None = None,
    ) -> WriteResult:
        """A write by another client, landing now (the workers hear of it at the next turn)."""
        return self.model.write("test", Op(kind, keyspace, key, value, expected))


def cooperative(worker: Worker, event: Event) -> None:
    """A handler that hands a revoked split back at once (after committing 7)."""
    if isinstance(event, RevokeRequested):
        split = event.split

        def release(call: Call) -> None:
            # Already gone (a repeated request, or lost meanwhile): nothing to hand back.
            if call.error is None and split in worker.owned:
                worker.release([split])

        worker.commit(split, Progress(7, b"st")).then(release)


def complete_on_gain(worker: Worker, event: Event) -> None:
    """A handler that completes every gained split at once."""
    if isinstance(event, Gained):
        worker.commit(event.split, Progress(100, completed=True))


# Read through a call: a test asserts a worker's phase (or that it leads), steps the world, and
# asserts the next; mypy would keep the first assert's narrowing of the property across the step.
def phase_now(worker: Worker) -> LeaderPhase:
    """The worker's leader phase as it is now."""
    return worker.phase


def leading_now(worker: Worker) -> bool:
    """Whether the worker leads now."""
    return worker.leading
